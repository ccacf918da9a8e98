"""Configuration of :class:`~skrl_marl_ext.HASAC`: MASAC's fields plus the order of the sequential policy update."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from skrl_marl_ext.algorithms.masac_cfg import MASAC_CFG
from skrl_marl_ext.checks.values import check_choice


@dataclasses.dataclass(kw_only=True)
class HASAC_CFG(MASAC_CFG):
    """Configuration of :class:`~skrl_marl_ext.HASAC` (Liu et al., ICLR 2024, https://arxiv.org/abs/2306.10715): the
    fields of :class:`~skrl_marl_ext.MASAC_CFG` (same names, meanings and defaults) plus ``update_order``."""

    shared_fields: ClassVar[tuple[str, ...]] = (*MASAC_CFG.shared_fields, "update_order")

    update_order: str = "random"
    """The order in which the policies are updated one after another at each gradient step (one value for all
    agents). ``"random"``: a fresh permutation every gradient step, as HARL's ``fixed_order: false``, reproducible per
    seed (``torch.manual_seed`` before construction) and the same on every rank; ``"fixed"``: ``possible_agents``
    order. Agents that share one policy move together."""

    def validate(self, *, owner: str = "HASAC") -> bool:
        """Check the value ranges (see :meth:`MASAC_CFG.validate`) and the update order."""
        super().validate(owner=owner)
        check_choice(owner, "update_order", self.update_order, ("random", "fixed"))
        return True
