"""Train, stop at a checkpoint and resume: what the resume tests of several files share. The env's state and torch's
RNG belong to the caller, so a stopped run saves them beside its checkpoint and a resumed one restores them."""

from __future__ import annotations

import pytest
import torch
from helpers import params
from skrl.trainers.torch import SequentialTrainer

ENV_FIELDS = ("positions", "goals", "active", "steps")
"""The built-in spread env's state fields, which a resumed run restores."""


class Stop(Exception):
    """Ends a trainer's run right after the checkpoint it stops at."""


def env_snapshot(env) -> dict:
    inner = env.unwrapped
    snap = {k: getattr(inner, k).clone() for k in ENV_FIELDS}
    snap["generator"] = inner._generator.get_state()
    return snap


def restore_on_reset(env, snap) -> None:
    """Make the env's next reset (the trainer's first) restore ``snap`` instead of drawing new episodes."""
    inner = env.unwrapped
    original = inner._reset_envs

    def reset_envs(envs):
        for k in ENV_FIELDS:
            setattr(inner, k, snap[k].clone())
        inner._generator.set_state(snap["generator"])
        inner._reset_envs = original

    inner._reset_envs = reset_envs


def train(env, agent, steps):
    cfg = {"timesteps": steps, "headless": True, "disable_progressbar": True}
    SequentialTrainer(env=env, agents=agent, cfg=cfg).train()


def train_until_checkpoint(env, agent, steps, stop_at, extra_path):
    """Train a run of ``steps`` steps that stops after its checkpoint of step ``stop_at``, saving the env's state and
    torch's RNG of that moment to ``extra_path`` (what the caller keeps beside the checkpoint)."""
    write = agent.write_checkpoint

    def write_then_stop(*, timestep, timesteps):
        write(timestep=timestep, timesteps=timesteps)
        if timestep == stop_at:
            torch.save({"env": env_snapshot(env), "rng": torch.get_rng_state()}, extra_path)
            raise Stop

    agent.write_checkpoint = write_then_stop
    with pytest.raises(Stop):
        train(env, agent, steps)


def all_params(agent):
    return torch.cat([params(m) for uid in agent.possible_agents for m in agent.models[uid].values()])
