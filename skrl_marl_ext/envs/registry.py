"""Env specs as the command line writes them: ``vmas:<scenario>``, ``pettingzoo:<module>``,
``mamujoco:<scenario>-<agent_conf>``, ``builtin:<name>``."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper

from skrl_marl_ext.checks.configs import closest, did_you_mean

BUILTIN_ENVS = ("spread", "memory")
KINDS = ("vmas", "pettingzoo", "mamujoco", "builtin")


def make_env(
    spec: str,
    *,
    num_envs: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **kwargs: Any,
) -> MultiAgentEnvWrapper:
    """Make the skrl multi-agent env that ``spec`` names.

    :param spec: ``"vmas:<scenario>"`` (e.g. ``vmas:balance``), ``"pettingzoo:<module>"`` (a module with
        ``parallel_env``, e.g. ``pettingzoo:mpe2.simple_spread_v3``), ``"mamujoco:<scenario>-<agent_conf>"`` (a
        Gymnasium-Robotics MaMuJoCo body split between agents, e.g. ``mamujoco:HalfCheetah-2x3``) or
        ``"builtin:<name>"`` (``spread`` or ``memory``).
    :param num_envs: Number of envs stepped as one batch.
    :param device: Device of the returned tensors (and of the simulation, for VMAS and builtin envs).
    :param seed: Seed of the env.
    :param kwargs: Passed to the env: the VMAS scenario, ``parallel_env`` (also MaMuJoCo's, e.g. ``agent_obsk=1``),
        :class:`SpreadEnv` or :class:`MemoryEnv`.

    :raises ValueError: On a malformed spec or an unknown kind/name (the message says what to type).
    :raises ImportError: When the env's package is missing (the message says what to install).
    """
    kind, _, name = spec.partition(":")
    if not name or kind not in KINDS:
        near = closest(kind, KINDS) if name else None
        hint = f" Did you mean '{near}:{name}'?" if near else ""
        raise ValueError(
            f"bad env '{spec}'.{hint} Write vmas:<scenario> (e.g. vmas:balance), pettingzoo:<module> "
            "(e.g. pettingzoo:mpe2.simple_spread_v3), mamujoco:<scenario>-<agent_conf> (e.g. mamujoco:HalfCheetah-2x3) "
            "or builtin:<name> (builtin envs: " + ", ".join(BUILTIN_ENVS) + ")"
        )
    if kind == "vmas":
        from skrl_marl_ext.envs.vmas_env import make_vmas_env

        return make_vmas_env(name, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if kind == "pettingzoo":
        from skrl_marl_ext.envs.pettingzoo_batched import make_pettingzoo_env

        return make_pettingzoo_env(name, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if kind == "mamujoco":
        from skrl_marl_ext.envs.mamujoco import make_mamujoco_env, parse_mamujoco_name

        scenario, agent_conf = parse_mamujoco_name(name)
        return make_mamujoco_env(scenario, agent_conf, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if name not in BUILTIN_ENVS:
        raise ValueError(
            f"unknown builtin env '{name}'.{did_you_mean(name, BUILTIN_ENVS)} Builtin envs: {', '.join(BUILTIN_ENVS)}"
        )
    from skrl_marl_ext.envs.memory import MemoryEnv, make_memory_env
    from skrl_marl_ext.envs.spread import SpreadEnv, make_spread_env

    env_class, make = (MemoryEnv, make_memory_env) if name == "memory" else (SpreadEnv, make_spread_env)
    known = [key for key in inspect.signature(env_class).parameters if key not in ("num_envs", "device", "seed")]
    for key in kwargs:
        if key not in known:
            raise ValueError(
                f"builtin:{name} takes no argument '{key}'.{did_you_mean(key, known)} Its arguments: {', '.join(known)}"
            )
    return make(num_envs=num_envs, device=device, seed=seed, **kwargs)
