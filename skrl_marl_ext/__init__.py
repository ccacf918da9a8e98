"""skrl_marl_ext: multi-agent algorithms (MAPPO, IPPO, MADDPG) for skrl 2.x, drop-in for skrl's trainers."""

from skrl_marl_ext.agents import AGENT_MASK_KEY, IPPO, IPPO_CFG, MADDPG, MADDPG_CFG, MAPPO, MAPPO_CFG
from skrl_marl_ext.models.maddpg_models import joint_action_space
from skrl_marl_ext.preprocessors import ValueNorm

__version__ = "0.1.0"

__all__ = [
    "AGENT_MASK_KEY",
    "IPPO",
    "IPPO_CFG",
    "MADDPG",
    "MADDPG_CFG",
    "MAPPO",
    "MAPPO_CFG",
    "ValueNorm",
    "__version__",
    "joint_action_space",
]
