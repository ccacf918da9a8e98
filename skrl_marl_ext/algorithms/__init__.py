"""The algorithms, one file per family, each in skrl's lifecycle order (``__init__``, ``init``, ``act``,
``record_transition``, ``post_interaction``, ``update``): :mod:`~skrl_marl_ext.algorithms.mappo` (MAPPO and IPPO)
with :mod:`~skrl_marl_ext.algorithms.happo` (HAPPO, on MAPPO's core), and the off-policy family on
:mod:`~skrl_marl_ext.algorithms.off_policy`: :mod:`~skrl_marl_ext.algorithms.maddpg` and
:mod:`~skrl_marl_ext.algorithms.masac` with :mod:`~skrl_marl_ext.algorithms.hasac` (HASAC, on MASAC's core); their
configs beside them (``*_cfg``), on the base in
:mod:`~skrl_marl_ext.algorithms.base` (config, checks, masks, checkpoints, tracking, the optimiser step)."""

from skrl_marl_ext.algorithms.happo import HAPPO as HAPPO
from skrl_marl_ext.algorithms.happo_cfg import HAPPO_CFG as HAPPO_CFG
from skrl_marl_ext.algorithms.hasac_cfg import HASAC_CFG as HASAC_CFG
from skrl_marl_ext.algorithms.maddpg import MADDPG as MADDPG
from skrl_marl_ext.algorithms.maddpg_cfg import MADDPG_CFG as MADDPG_CFG
from skrl_marl_ext.algorithms.mappo import IPPO as IPPO
from skrl_marl_ext.algorithms.mappo import MAPPO as MAPPO
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent as OnPolicyAgent
from skrl_marl_ext.algorithms.mappo_cfg import IPPO_CFG as IPPO_CFG
from skrl_marl_ext.algorithms.mappo_cfg import MAPPO_CFG as MAPPO_CFG
from skrl_marl_ext.algorithms.mappo_cfg import OnPolicyCfg as OnPolicyCfg
from skrl_marl_ext.algorithms.masac_cfg import MASAC_CFG as MASAC_CFG
