"""Configuration of :class:`~skrl_marl_ext.HAPPO`: the on-policy fields plus the order of the sequential update."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from skrl_marl_ext.algorithms.mappo_cfg import OnPolicyCfg
from skrl_marl_ext.checks.values import check_choice


@dataclasses.dataclass(kw_only=True)
class HAPPO_CFG(OnPolicyCfg):
    """Configuration of :class:`~skrl_marl_ext.HAPPO`: the fields of :class:`~skrl_marl_ext.MAPPO_CFG` (same names,
    meanings and defaults, but ``batch_agent_models``) plus ``update_order``."""

    shared_fields: ClassVar[tuple[str, ...]] = (*OnPolicyCfg.shared_fields, "update_order")

    update_order: str = "random"
    """*New.* The order in which the agents are updated one after another at each update (one value for all agents).
    ``"random"``: a fresh permutation every update, as HARL (the paper's theory draws it at random), reproducible per
    seed (``torch.manual_seed`` before construction) and the same on every rank of a distributed run; ``"fixed"``:
    ``possible_agents`` order. Agents that share one model move together (see :class:`~skrl_marl_ext.HAPPO`)."""

    batch_agent_models: bool = False
    """Must stay False: HAPPO updates the agents one after another, and a stacked batch of agents would step them all
    at once with one optimiser."""

    def validate(self, *, owner: str = "agent") -> bool:
        """Check the value ranges (see :meth:`OnPolicyCfg.validate`), the update order, and that agents are not
        batched."""
        super().validate(owner=owner)
        check_choice(owner, "update_order", self.update_order, ("random", "fixed"))
        if self.batch_agent_models:
            raise ValueError(
                f"{owner}: cfg.batch_agent_models=True runs agents with models of their own as one stacked batch with "
                "one optimiser step, but HAPPO updates them one after another; set batch_agent_models=False (HAPPO's "
                "default) or use MAPPO"
            )
        return True
