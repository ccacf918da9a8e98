"""skrl_marl_ext: multi-agent algorithms (MAPPO, IPPO) for skrl 2.x, drop-in for skrl's trainers."""

from skrl_marl_ext.agents import AGENT_MASK_KEY, IPPO, IPPO_CFG, MAPPO, MAPPO_CFG
from skrl_marl_ext.preprocessors import ValueNorm

__version__ = "0.1.0"

__all__ = ["AGENT_MASK_KEY", "IPPO", "IPPO_CFG", "MAPPO", "MAPPO_CFG", "ValueNorm", "__version__"]
