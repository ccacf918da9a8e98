"""Isaac Lab's five skrl multi-agent configs train through our Runner (and through skrl's own, on the same stand-in).

``tests/data/isaaclab/<task>_<algo>.yaml`` mirror Isaac Lab's ``skrl_mappo_cfg.yaml``/``skrl_ippo_cfg.yaml`` of the
direct tasks ``shadow_hand_over``, ``cart_double_pendulum`` and ``mobile_franka`` (each file's first line names the
one it mirrors). The env is :class:`isaaclab_standin.DirectMARLEnvStandIn` with each task's agents and sizes, wrapped
by skrl's Isaac Lab multi-agent wrapper. Only what keeps a run short is overridden: two rollouts of training, no
TensorBoard/checkpoints (and their directory under ``tmp_path``), no progress bar.
"""

from __future__ import annotations

import os

import pytest
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from isaaclab_checks import assert_sized_as_yaml, assert_trained, snapshot_of
from isaaclab_standin import TASKS, DirectMARLEnvStandIn
from skrl.envs.wrappers.torch import wrap_env
from skrl.multi_agents.torch.ippo import IPPO as SkrlIPPO
from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO
from skrl.utils.runner.torch import Runner as SkrlRunner

from skrl_marl_ext import IPPO, MAPPO
from skrl_marl_ext.runner import Runner

DATA = os.path.join(os.path.dirname(__file__), "data", "isaaclab")
CONFIGS = [
    ("shadow_hand_over", "mappo"),
    ("shadow_hand_over", "ippo"),
    ("cart_double_pendulum", "mappo"),
    ("cart_double_pendulum", "ippo"),
    ("mobile_franka", "mappo"),
]
IDS = [f"{task}-{algo}" for task, algo in CONFIGS]
NUM_ENVS = 4
EPISODE_LENGTH = 10  # steps: episodes end (truncate) within the two rollouts of 16


def _env(task):
    return wrap_env(
        DirectMARLEnvStandIn(**TASKS[task], num_envs=NUM_ENVS, episode_length=EPISODE_LENGTH),
        wrapper="isaaclab-multi-agent",
    )


def _cfg(task, algo, tmp_path, updates=2, **agent):
    """The YAML as ``Runner.load_cfg_from_yaml`` reads it; overridden: run length, logging and the ``agent`` keys given."""
    cfg = Runner.load_cfg_from_yaml(os.path.join(DATA, f"{task}_{algo}.yaml"))
    assert cfg and cfg["agent"]["class"] == algo.upper()
    cfg["agent"].update(agent)
    cfg["agent"]["experiment"].update(directory=str(tmp_path / "runs"), write_interval=0, checkpoint_interval=0)
    cfg["trainer"].update(timesteps=updates * cfg["agent"]["rollouts"], disable_progressbar=True, headless=True)
    return cfg


@pytest.mark.parametrize(("task", "algo"), CONFIGS, ids=IDS)
def test_isaaclab_config_trains_through_our_runner(task, algo, tmp_path):
    env = _env(task)
    cfg = _cfg(task, algo, tmp_path)
    runner = Runner(env, cfg)
    agent = runner.agent
    assert type(agent) is {"mappo": MAPPO, "ippo": IPPO}[algo]
    assert env.state_spaces[env.possible_agents[0]].shape == (
        sum(env.observation_spaces[uid].shape[0] for uid in env.possible_agents)
        if TASKS[task]["state_size"] < 0
        else TASKS[task]["state_size"],
    )
    assert_sized_as_yaml(env, cfg, agent.models)
    snapshot = snapshot_of(agent, env.possible_agents)
    runner.run("train")
    assert_trained(snapshot)
    assert env.unwrapped.episodes_ended > 0


@pytest.mark.parametrize(("task", "algo"), CONFIGS, ids=IDS)
def test_isaaclab_config_trains_through_skrls_own_runner(task, algo, tmp_path):
    # the same YAML and stand-in build and train skrl 2.1.1's own MAPPO/IPPO: the mirrors are faithful (kept cheap:
    # one update of one epoch)
    env = _env(task)
    cfg = _cfg(task, algo, tmp_path, updates=1, learning_epochs=1)
    runner = SkrlRunner(env, cfg)
    agent = runner.agent
    assert type(agent) is {"mappo": SkrlMAPPO, "ippo": SkrlIPPO}[algo]
    assert_sized_as_yaml(env, cfg, agent.models)
    snapshot = snapshot_of(agent, env.possible_agents)
    runner.run("train")
    assert_trained(snapshot)
