"""Builders shared by the MASAC and HASAC test modules (not a test module)."""

from __future__ import annotations

import gymnasium
import torch
from helpers import QUIET
from skrl.memories.torch import RandomMemory

from skrl_marl_ext import HASAC, MASAC, joint_action_space
from skrl_marl_ext.models import QMLP, CategoricalMLP, SquashedGaussianMLP

CRITICS = ("critic", "critic_2", "target_critic", "target_critic_2")


def make_sac_models(env, *, team=False, shared=False, hidden=(16,), env_states=True):
    """Per agent (or shared) a squashed Gaussian or categorical policy and twin critics with their targets; with
    ``team`` one set of critics for every agent (a team critic)."""
    joint = joint_action_space(env.action_spaces, env.possible_agents)
    critic_state_space = None
    if not env_states:
        size = sum(env.observation_space(u).shape[0] for u in env.possible_agents)
        critic_state_space = gymnasium.spaces.Box(-float("inf"), float("inf"), (size,))

    def policy(uid):
        cls = CategoricalMLP if hasattr(env.action_space(uid), "n") else SquashedGaussianMLP
        return cls(
            observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=hidden
        )

    def critics(uid):
        space = critic_state_space or env.state_space(uid)
        return {role: QMLP(state_space=space, action_space=joint, hidden_sizes=hidden) for role in CRITICS}

    if shared:
        models = {"policy": policy(env.possible_agents[0]), **critics(env.possible_agents[0])}
        return {uid: models for uid in env.possible_agents}
    if team:
        team_critics = critics(env.possible_agents[0])
        return {uid: {"policy": policy(uid), **team_critics} for uid in env.possible_agents}
    return {uid: {"policy": policy(uid), **critics(uid)} for uid in env.possible_agents}


def make_sac(env, cfg=None, *, cls=MASAC, models=None, memories=None, memory_size=100, env_states=True, **kwargs):
    """MASAC (or ``cls=HASAC``) over ``env``, quiet unless ``cfg["experiment"]`` says otherwise, with the models of
    :func:`make_sac_models` (``kwargs``: ``team``, ``shared``, ``hidden``) and a ``RandomMemory`` per agent."""
    cfg = dict(cfg or {})
    cfg.setdefault("experiment", QUIET)
    if memories is None:
        memories = {uid: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for uid in env.possible_agents}
    return cls(
        possible_agents=env.possible_agents,
        models=models if models is not None else make_sac_models(env, env_states=env_states, **kwargs),
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces if env_states else None,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )


def policy_params(agent):
    """Every agent's policy parameters, flattened: ``{uid: tensor}``."""
    return {
        uid: torch.cat([p.detach().reshape(-1).clone() for p in agent.models[uid]["policy"].parameters()])
        for uid in agent.possible_agents
    }


def temperatures(agent):
    """Every agent's temperature ``alpha``, as its checkpoint module holds it."""
    return {
        uid: float(agent.checkpoint_modules[uid]["temperature"].log_temperature.detach().exp())
        for uid in agent.possible_agents
    }


__all__ = ["CRITICS", "HASAC", "MASAC", "make_sac", "make_sac_models", "policy_params", "temperatures"]
