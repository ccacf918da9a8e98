"""Isaac Lab 3's skrl multi-agent configs train through our Runner (and through skrl's own, on the same stand-in).

``tests/data/isaaclab3/`` holds, for the handover task (``Isaac-Shadow-Handover-Direct``) and the pendulum task
(``Isaac-Pendulum-MARL-Direct``), MAPPO and IPPO (each file's first line names its source):

- ``<task>_<algo>.yaml``: Isaac Lab 3.0.0's YAML files, verbatim. The pendulum's ``skrl_marl_ppo_cfg.yaml`` is left
  out: it is single-agent PPO (``agent: class: PPO``, trained on the task converted to one agent).
- ``<task>_<algo>_cfgclass.yaml``: the dict ``to_runner_dict()`` returns for the typed configs (``SkrlMAPPORunnerCfg``,
  ``SkrlIPPORunnerCfg``, ...) that replace those files in Isaac Lab's repository (not in the 3.0.0 release): skrl 2.x
  key names (``gae_lambda``, no ``clip_predicted_values``), ``*_kwargs: null``, ``experiment``/``memory``/``trainer``
  fields at their defaults and the Gaussian model fields ``clip_mean_actions``, ``fixed_log_std``, ``reduction``.

The env is :class:`isaaclab_standin.DirectMARLEnvStandIn` with each task's agents and sizes, wrapped by skrl's Isaac Lab
multi-agent wrapper. Only what keeps a run short is overridden: two rollouts of training, no TensorBoard/checkpoints
(and their directory under ``tmp_path``), no progress bar.
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from isaaclab_checks import assert_sized_as_yaml, assert_trained, snapshot_of
from isaaclab_standin import TASKS, DirectMARLEnvStandIn
from skrl.envs.wrappers.torch import wrap_env
from skrl.multi_agents.torch.ippo import IPPO as SkrlIPPO
from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO
from skrl.utils.runner.torch import Runner as SkrlRunner

from skrl_marl_ext import IPPO, MAPPO
from skrl_marl_ext.runner import Runner

DATA = os.path.join(os.path.dirname(__file__), "data", "isaaclab3")
STAND_IN = {"handover": "shadow_hand_over", "pendulum_marl": "pendulum_marl"}
"""The stand-in task (``isaaclab_standin.TASKS``) of each file's task."""
CONFIGS = [
    (task, algo, kind)
    for task in STAND_IN
    for algo in ("mappo", "ippo")
    for kind in ("", "_cfgclass")  # Isaac Lab 3.0.0's YAML file, the typed config's to_runner_dict()
]
IDS = [f"{task}_{algo}{kind}" for task, algo, kind in CONFIGS]
NUM_ENVS = 4
EPISODE_LENGTH = 10  # steps: episodes end (truncate) within the two rollouts of 16


def _env(task):
    return wrap_env(
        DirectMARLEnvStandIn(**TASKS[STAND_IN[task]], num_envs=NUM_ENVS, episode_length=EPISODE_LENGTH),
        wrapper="isaaclab-multi-agent",
    )


def _cfg(task, algo, kind, tmp_path, updates=2, **agent):
    """The file as ``Runner.load_cfg_from_yaml`` reads it; overridden: run length, logging and the ``agent`` keys given."""
    cfg = Runner.load_cfg_from_yaml(os.path.join(DATA, f"{task}_{algo}{kind}.yaml"))
    assert cfg and cfg["agent"]["class"] == algo.upper()
    cfg["agent"].update(agent)
    cfg["agent"]["experiment"].update(directory=str(tmp_path / "runs"), write_interval=0, checkpoint_interval=0)
    cfg["trainer"].update(timesteps=updates * cfg["agent"]["rollouts"], disable_progressbar=True, headless=True)
    return cfg


@pytest.mark.parametrize(("task", "algo", "kind"), CONFIGS, ids=IDS)
def test_isaaclab3_config_trains_through_our_runner(task, algo, kind, tmp_path):
    env = _env(task)
    cfg = _cfg(task, algo, kind, tmp_path)
    runner = Runner(env, cfg)
    agent = runner.agent
    assert type(agent) is {"mappo": MAPPO, "ippo": IPPO}[algo]
    assert_sized_as_yaml(env, cfg, agent.models)
    snapshot = snapshot_of(agent, env.possible_agents)
    runner.run("train")
    assert_trained(snapshot)
    assert env.unwrapped.episodes_ended > 0


@pytest.mark.parametrize(("task", "algo", "kind"), CONFIGS, ids=IDS)
def test_isaaclab3_config_trains_through_skrls_own_runner(task, algo, kind, tmp_path):
    # the same files and stand-in build and train skrl 2.1.1's own MAPPO/IPPO: the copies are faithful (kept cheap:
    # one update of one epoch)
    env = _env(task)
    cfg = _cfg(task, algo, kind, tmp_path, updates=1, learning_epochs=1)
    runner = SkrlRunner(env, cfg)
    agent = runner.agent
    assert type(agent) is {"mappo": SkrlMAPPO, "ippo": SkrlIPPO}[algo]
    assert_sized_as_yaml(env, cfg, agent.models)
    snapshot = snapshot_of(agent, env.possible_agents)
    runner.run("train")
    assert_trained(snapshot)


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
@pytest.mark.parametrize("task", list(STAND_IN))
def test_typed_config_builds_the_agent_its_yaml_file_builds(task, algo, tmp_path):
    # the typed config renames keys (lambda -> gae_lambda, clip_predicted_values -> value_clip) and adds fields at
    # their defaults: our Runner configures the same agent from both
    agents = [Runner(_env(task), _cfg(task, algo, kind, tmp_path)).agent for kind in ("", "_cfgclass")]
    assert agents[0].cfg == agents[1].cfg


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_fixed_log_std_of_a_typed_config_stays_fixed(algo, tmp_path):
    # SkrlGaussianModelCfg.fixed_log_std reaches skrl's instantiators through our Runner as through skrl's; the log
    # std stays put through training, in MAPPO's separate policy and in IPPO's shared policy/value module
    env = _env("handover")
    cfg = _cfg("handover", algo, "_cfgclass", tmp_path, updates=1, learning_epochs=1)
    cfg["models"]["policy"].update(fixed_log_std=True, initial_log_std=-0.5)
    runner = Runner(env, cfg)
    snapshot = snapshot_of(runner.agent, env.possible_agents)
    runner.run("train")
    assert_trained(snapshot)
    for uid in env.possible_agents:
        log_std = runner.agent.models[uid]["policy"].log_std_parameter
        assert not log_std.requires_grad
        assert torch.equal(log_std.detach(), torch.full_like(log_std, -0.5)), uid
