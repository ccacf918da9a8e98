"""Configuration of :class:`~skrl_marl_ext.MASAC`: the off-policy fields (:class:`OffPolicyCfg`) plus the entropy
temperature's (skrl 2.x ``SAC_CFG``'s meaning, HARL's and BenchMARL's values where they agree)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from skrl_marl_ext.algorithms.off_policy_cfg import OffPolicyCfg
from skrl_marl_ext.checks.values import check_choice, check_range


@dataclasses.dataclass(kw_only=True)
class MASAC_CFG(OffPolicyCfg):
    """Configuration of :class:`~skrl_marl_ext.MASAC` (soft actor-critic with centralised critics; Haarnoja et al.
    2018, https://arxiv.org/abs/1812.05905).

    Fields marked *per agent* take one value or a dict naming every agent; agents that share models (a group) must be
    given the same value. The other fields hold one value for all agents.
    """

    shared_fields: ClassVar[tuple[str, ...]] = (
        *OffPolicyCfg.shared_fields,
        "initial_temperature",
        "learn_temperature",
        "temperature_learning_rate",
        "critic_entropy",
    )

    initial_temperature: float = 0.2
    """The entropy temperature ``alpha`` of every agent (and of the critics' target) at the start, ``> 0`` (one value
    for all agents). 0.2: skrl's ``SAC_CFG.initial_entropy_value``. HARL and BenchMARL start learned temperatures at 1
    (HARL's tuned MaMuJoCo configs, ``configs/hasac_mamujoco.yaml``); on tasks of small per-step rewards (VMAS, MPE)
    that holds the policies near uniform for thousands of gradient steps before the temperatures come down."""

    learn_temperature: bool = True
    """Learn each agent's temperature towards its ``target_entropy`` (SAC's automatic temperature; HARL's
    ``auto_alpha``, BenchMARL's ``not fixed_alpha``), and the critics' one towards the sum of the agents' targets. False:
    every temperature stays ``initial_temperature``. One value for all agents."""

    temperature_learning_rate: float = 3e-4
    """Learning rate of the temperatures' Adam optimisers (HARL's ``alpha_lr``). One value for all agents."""

    target_entropy: float | None | dict[str, float | None] = None
    """The entropy each agent's temperature steers its policy to (per agent). None: ``-A`` for a Box action of ``A``
    dimensions (SAC's, HARL's), ``0.2 log n`` for ``Discrete(n)`` (BenchMARL's ``discrete_target_entropy_weight``
    0.2 of the largest entropy; HARL's formula gives 0 there, as it reads the size of a Discrete space's empty
    shape)."""

    critic_entropy: str = "joint"
    """Which entropy the critics' soft target takes (one value for all agents). ``"joint"``: the joint policy's,
    ``alpha_c * sum_j log pi_j(a'_j | o'_j)`` over the agents alive in the row, with one temperature ``alpha_c`` of the
    critics learned towards the sum of the agents' target entropies (HARL's soft twin critic; HASAC's maximum-entropy
    objective). ``"own"``: agent ``i``'s critic takes its own, ``alpha_i log pi_i(a'_i | o'_i)`` (BenchMARL's MASAC,
    TorchRL's SAC loss per agent); it needs per-agent critics (not a team critic)."""

    gumbel_temperature: float | dict[str, float] = 1.0
    """Temperature of the straight-through Gumbel-softmax through which discrete policies are sampled in the update
    (per agent): the sample is one-hot, its gradient that of the tempered softmax (HARL's 1.0)."""

    def validate(self, *, owner: str = "MASAC") -> bool:
        """Check the value ranges; raise a ValueError naming the field and the accepted range."""
        super().validate(owner=owner)
        check_range(owner, "initial_temperature", self.initial_temperature, low=0.0, low_open=True)
        check_range(owner, "temperature_learning_rate", self.temperature_learning_rate, low=0.0, low_open=True)
        check_range(owner, "gumbel_temperature", self.gumbel_temperature, low=0.0, low_open=True)
        if not isinstance(self.learn_temperature, bool):
            raise ValueError(f"{owner}: cfg.learn_temperature must be True or False, got {self.learn_temperature!r}")
        targets = self.target_entropy if isinstance(self.target_entropy, dict) else {"": self.target_entropy}
        check_range(owner, "target_entropy", {k: v for k, v in targets.items() if v is not None})
        check_choice(owner, "critic_entropy", self.critic_entropy, ("joint", "own"))
        return True
