"""Tests leave the user's files alone: an agent without experiment settings writes under the test's ``tmp_path``."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import make_models, one_thread, spread  # noqa: F401  (one_thread: autouse)
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MAPPO

REPO = Path(__file__).resolve().parent.parent


def _listing(folder: Path) -> set[str] | None:
    return set(os.listdir(folder)) if folder.is_dir() else None


def test_default_experiment_directory_lies_under_tmp_path(tmp_path):
    before = _listing(REPO / "runs")
    env = spread(num_envs=4, num_agents=2)
    agent = MAPPO(
        possible_agents=env.possible_agents,
        models=make_models(env),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},  # skrl's default experiment: os.getcwd()/runs, a checkpoint every timesteps/10 steps
    )
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 20, "headless": True, "disable_progressbar": True}
    ).train()

    experiment_dir = Path(agent.experiment_dir).resolve()
    assert experiment_dir.is_relative_to(tmp_path.resolve()), experiment_dir
    assert any(name.startswith("agent_") for name in os.listdir(experiment_dir / "checkpoints"))
    assert _listing(REPO / "runs") == before
