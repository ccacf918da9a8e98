"""Environments: VMAS, batched PettingZoo and MaMuJoCo wrappers, an episode recorder, and small built-in envs
(spread, memory).

The VMAS, PettingZoo and MaMuJoCo wrappers import their packages only when an env is made, so the extras stay
optional.
"""

from skrl_marl_ext.envs.mamujoco import make_mamujoco_env
from skrl_marl_ext.envs.memory import MemoryEnv, make_memory_env
from skrl_marl_ext.envs.pettingzoo_batched import BatchedParallelEnvWrapper, make_pettingzoo_env
from skrl_marl_ext.envs.recorder import EpisodeRecorder
from skrl_marl_ext.envs.registry import make_env
from skrl_marl_ext.envs.spread import SpreadEnv, make_spread_env
from skrl_marl_ext.envs.vmas_env import VmasWrapper, make_vmas_env, to_gymnasium_space

__all__ = [
    "BatchedParallelEnvWrapper",
    "EpisodeRecorder",
    "MemoryEnv",
    "SpreadEnv",
    "VmasWrapper",
    "make_env",
    "make_mamujoco_env",
    "make_memory_env",
    "make_pettingzoo_env",
    "make_spread_env",
    "make_vmas_env",
    "to_gymnasium_space",
]
