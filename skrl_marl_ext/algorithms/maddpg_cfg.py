"""Configuration of :class:`~skrl_marl_ext.MADDPG`: the off-policy fields (:class:`OffPolicyCfg`), then skrl 2.x
``DDPG_CFG``'s and ``TD3_CFG``'s exploration, smoothing and delay fields, per agent."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from skrl_marl_ext.algorithms.off_policy_cfg import OffPolicyCfg
from skrl_marl_ext.checks.values import check_range


@dataclasses.dataclass(kw_only=True)
class MADDPG_CFG(OffPolicyCfg):
    """Configuration of :class:`~skrl_marl_ext.MADDPG` (Lowe et al. 2017, https://arxiv.org/abs/1706.02275).

    Fields marked *per agent* take one value or a dict naming every agent; agents that share models (a group) must be
    given the same value. The other fields hold one value for all agents: every gradient step draws one set of
    transitions for all agents, so its size and timing cannot differ between them.
    """

    shared_fields: ClassVar[tuple[str, ...]] = (
        *OffPolicyCfg.shared_fields,
        "exploration_noise",
        "exploration_initial_scale",
        "exploration_final_scale",
        "exploration_timesteps",
        "smooth_regularization_noise",
        "smooth_regularization_clip",
        "policy_delay",
    )

    exploration_noise: Any = None
    """Exploration noise of continuous actions: an instance of a skrl noise (``GaussianNoise``,
    ``OrnsteinUhlenbeckNoise``; anything with ``sample(size) -> tensor``). Each group of agents gets its own copy.
    None means ``GaussianNoise(mean=0, std=0.3)`` on the agent's device (30% of a [-1, 1] action range; with the
    default schedule it ends at std 0.03). Discrete actions explore by sampling their categorical policy instead."""

    exploration_initial_scale: float = 1.0
    """Factor on the noise at the first timestep; 0 turns the noise off."""

    exploration_final_scale: float = 0.1
    """Factor on the noise at ``exploration_timesteps`` and after; the factor moves linearly in between. 0.1: explore
    widely first, then act near the policy (the returns a run reports are those of its noisy actions); it did at
    least as well as 0.3 in the learning study (docs/results/learning.md). BenchMARL anneals its noise to
    0.01."""

    exploration_timesteps: int | None = None
    """Timesteps over which the noise factor goes from the initial to the final scale; None: the first third of the
    trainer's ``timesteps`` (BenchMARL's default, ``max_n_frames / 3``)."""

    smooth_regularization_noise: Any = None
    """Target policy smoothing (TD3's, skrl ``TD3_CFG``'s name): a noise instance (e.g. skrl's
    ``GaussianNoise(mean=0, std=0.2)``) whose samples, clipped to ``+-smooth_regularization_clip``, are added to the
    target policies' continuous actions ``mu'(o')`` of the critic targets, which are then clipped to the action bounds.
    None: no smoothing (the MADDPG paper)."""

    smooth_regularization_clip: float = 0.5
    """Bound of the smoothing noise's samples (TD3's and skrl's 0.5), in action units."""

    policy_delay: int = 1
    """The actors and all target networks step once every ``policy_delay`` gradient steps; the critics every step
    (TD3's delayed policy update, skrl ``TD3_CFG``'s name; TD3 uses 2). One value for all agents. 1 (default): every
    step, the MADDPG paper's. The count of gradient steps is saved in checkpoints (module ``progress``), so a resumed
    run keeps the phase."""

    policy_regularization: float | None | dict[str, float | None] = 0.0
    """Weight of the mean square of a continuous policy's output before its ``tanh``
    (``outputs["pre_tanh_actions"]``, :data:`~skrl_marl_ext.keys.PRE_TANH_ACTIONS_KEY`) added to the actor loss
    (per agent). The MADDPG paper's code adds it with weight 1e-3; it keeps the policy off the flat ends of the
    ``tanh``, where the critic's gradient no longer moves it. It helped navigation with a large replay but cost
    balance (docs/results/maddpg_defaults.md), so it is off by default. 0 (default): none.
    None: 1e-3 for policies that give the output (:class:`~skrl_marl_ext.models.DeterministicMLP` does), none for
    those that do not (a warning says so). A weight > 0 for a policy that does not give the output is refused at
    construction."""

    gumbel_temperature: float | dict[str, float] = 1.0
    """Temperature of the straight-through Gumbel-softmax through which discrete actors are trained (per agent)."""

    def validate(self, *, owner: str = "MADDPG") -> bool:
        """Check the value ranges; raise a ValueError naming the field and the accepted range."""
        super().validate(owner=owner)
        value = self.policy_delay
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: cfg.policy_delay must be a positive integer, got {value!r}")
        check_range(owner, "gumbel_temperature", self.gumbel_temperature, low=0.0, low_open=True)
        weights = self.policy_regularization
        weights = weights if isinstance(weights, dict) else {"": weights}
        check_range(owner, "policy_regularization", {k: v for k, v in weights.items() if v is not None}, low=0.0)
        check_range(owner, "smooth_regularization_clip", self.smooth_regularization_clip, low=0.0)
        check_range(owner, "exploration_initial_scale", self.exploration_initial_scale, low=0.0)
        check_range(owner, "exploration_final_scale", self.exploration_final_scale, low=0.0)
        steps = self.exploration_timesteps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ValueError(f"{owner}: cfg.exploration_timesteps must be a positive integer or None, got {steps!r}")
        for name in ("exploration_noise", "smooth_regularization_noise"):
            noise = getattr(self, name)
            if isinstance(noise, type) or (noise is not None and not callable(getattr(noise, "sample", None))):
                raise ValueError(
                    f"{owner}: cfg.{name} must be a noise instance with sample(size) (e.g. skrl's "
                    f"GaussianNoise(mean=0.0, std=0.1, device=device)) or None, got {noise!r}"
                )
        return True
