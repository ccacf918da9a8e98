"""skrl_marl_ext: multi-agent algorithms (MAPPO, IPPO, HAPPO, MADDPG, MASAC, HASAC) for skrl 2.x, drop-in for skrl's trainers.

The names below are imported on first use, so ``import skrl_marl_ext`` does not import skrl: ``python -m
skrl_marl_ext`` under ``torchrun`` must create the process group before skrl's import-time setup runs (skrl calls
``init_process_group("nccl")`` when ``WORLD_SIZE > 1``, which cannot work on CPU). See :mod:`skrl_marl_ext.cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS = {
    "AGENT_MASK_KEY": "skrl_marl_ext.keys",
    "HAPPO": "skrl_marl_ext.algorithms",
    "HAPPO_CFG": "skrl_marl_ext.algorithms",
    "HASAC": "skrl_marl_ext.algorithms.hasac",
    "HASAC_CFG": "skrl_marl_ext.algorithms",
    "IPPO": "skrl_marl_ext.algorithms",
    "IPPO_CFG": "skrl_marl_ext.algorithms",
    "MADDPG": "skrl_marl_ext.algorithms.maddpg",  # a missing MADDPG fails on its own, not with the other agents
    "MADDPG_CFG": "skrl_marl_ext.algorithms",
    "MAPPO": "skrl_marl_ext.algorithms",
    "MAPPO_CFG": "skrl_marl_ext.algorithms",
    "MASAC": "skrl_marl_ext.algorithms.masac",
    "MASAC_CFG": "skrl_marl_ext.algorithms",
    "ValueNorm": "skrl_marl_ext.preprocessors",
    "export_for_skrl": "skrl_marl_ext.checkpoints.export",
    "joint_action_space": "skrl_marl_ext.models.maddpg_models",
}
"""Exported name -> module it is imported from on first use."""

__all__ = [
    "AGENT_MASK_KEY",
    "HAPPO",
    "HAPPO_CFG",
    "HASAC",
    "HASAC_CFG",
    "IPPO",
    "IPPO_CFG",
    "MADDPG",
    "MADDPG_CFG",
    "MAPPO",
    "MAPPO_CFG",
    "MASAC",
    "MASAC_CFG",
    "ValueNorm",
    "__version__",
    "export_for_skrl",
    "joint_action_space",
]

if TYPE_CHECKING:
    from skrl_marl_ext.algorithms import (
        HAPPO,
        HAPPO_CFG,
        HASAC_CFG,
        IPPO,
        IPPO_CFG,
        MADDPG,
        MADDPG_CFG,
        MAPPO,
        MAPPO_CFG,
        MASAC_CFG,
    )
    from skrl_marl_ext.algorithms.hasac import HASAC
    from skrl_marl_ext.algorithms.masac import MASAC
    from skrl_marl_ext.checkpoints.export import export_for_skrl
    from skrl_marl_ext.keys import AGENT_MASK_KEY
    from skrl_marl_ext.models.maddpg_models import joint_action_space
    from skrl_marl_ext.preprocessors import ValueNorm


def __getattr__(name: str) -> Any:
    """Import an exported name (or a submodule, as ``skrl_marl_ext.models``) on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups do not come here
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
