"""``skrl-marl isaaclab train|play`` (:mod:`skrl_marl_ext.isaaclab`) without Isaac Lab: the configs it registers, the
Runner it hands Isaac Lab's backends, and how it fails on an Isaac Lab it does not know.

Isaac Lab's module layout is stood in by a fake ``isaaclab_rl`` package written under ``tmp_path`` (the names
``skrl-marl isaaclab`` imports, patches and calls, nothing else), run in a subprocess with it first on the path. The
real Isaac Lab 3.0 runs the same command in ``tests/test_isaaclab_real.py`` (slow). The package's configs train on
:class:`isaaclab_standin.DirectMARLEnvStandIn` with each task's agents and sizes, wrapped by skrl's Isaac Lab wrapper.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from isaaclab_standin import TASKS, DirectMARLEnvStandIn
from skrl.envs.wrappers.torch import wrap_env

from skrl_marl_ext import HAPPO, HASAC, MADDPG, MASAC
from skrl_marl_ext.cli import main as cli_main
from skrl_marl_ext.isaaclab import OFF_POLICY, TASK_CONFIGS, config_path, import_runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")
ISAACLAB3 = os.path.join(TESTS, "data", "isaaclab3")
STAND_IN = {"Isaac-Pendulum-MARL-Direct": "pendulum_marl", "Isaac-Shadow-Handover-Direct": "shadow_hand_over"}
"""The stand-in (``isaaclab_standin.TASKS``) of each task."""
ISAACLAB_MAPPO = {
    "Isaac-Pendulum-MARL-Direct": "pendulum_marl_mappo.yaml",
    "Isaac-Shadow-Handover-Direct": "handover_mappo.yaml",
}
"""Isaac Lab 3.0.0's MAPPO file of each task, verbatim (``tests/data/isaaclab3/``)."""
NUM_ENVS = 4


def _env(task: str):
    standin = DirectMARLEnvStandIn(**TASKS[STAND_IN[task]], num_envs=NUM_ENVS, episode_length=10)
    return wrap_env(standin, wrapper="isaaclab-multi-agent")


def _cfg(task: str, algorithm: str, tmp_path, updates: int = 2) -> dict:
    """The package's config as Isaac Lab reads a YAML file; overridden only what keeps the run short: two rollouts of
    16 steps (the off-policy agents: 32 steps, learning after 8, mini-batches of 32), no TensorBoard or checkpoints."""
    with open(config_path(task, algorithm)) as file:
        cfg = yaml.safe_load(file)
    cfg["agent"]["experiment"].update(directory=str(tmp_path), write_interval=0, checkpoint_interval=0)
    cfg["trainer"].update(timesteps=updates * cfg["agent"]["rollouts"], disable_progressbar=True, headless=True)
    if algorithm in OFF_POLICY:
        cfg["agent"].update(learning_starts=8, batch_size=32)
    return cfg


def _parameters(agent) -> list[torch.Tensor]:
    return [p.detach().clone() for uid in agent.possible_agents for p in agent.models[uid]["policy"].parameters()]


# ----------------------------------------------------------------------------------------------------- the configs


@pytest.mark.parametrize("task", list(TASK_CONFIGS))
def test_happo_config_is_isaac_labs_mappo_file_with_class_happo(task):
    # every value of Isaac Lab's own MAPPO file for the task, HAPPO's update order added, and the two keys no
    # on-policy agent reads left out
    with open(os.path.join(ISAACLAB3, ISAACLAB_MAPPO[task])) as file:
        theirs = yaml.safe_load(file)
    with open(config_path(task, "happo")) as file:
        ours = yaml.safe_load(file)
    for key in ("random_timesteps", "learning_starts"):
        del theirs["agent"][key]
    theirs["agent"].update({"class": "HAPPO", "update_order": "random"})
    assert ours == theirs


@pytest.mark.parametrize("algorithm", ["happo", "maddpg", "masac", "hasac"])
@pytest.mark.parametrize("task", list(TASK_CONFIGS))
def test_the_package_config_trains_on_the_task_through_the_runner_isaac_lab_gets(task, algorithm, tmp_path):
    env = _env(task)
    cfg = _cfg(task, algorithm, tmp_path)
    runner = import_runner("torch")(env, cfg)  # what the patched import_skrl_runner("torch") returns, given the config
    assert type(runner.agent) is {"happo": HAPPO, "maddpg": MADDPG, "masac": MASAC, "hasac": HASAC}[algorithm]
    before = _parameters(runner.agent)
    runner.run("train")
    after = _parameters(runner.agent)
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert all(torch.isfinite(a).all() for a in after)


@pytest.mark.parametrize("algorithm", ["happo", "maddpg", "masac", "hasac"])
def test_evaluation_acts_with_the_mean_action_isaac_lab_play_reads(algorithm, tmp_path):
    # Isaac Lab's play backend steps the env with outputs[-1][uid]["mean_actions"] after enable_training_mode(False)
    task = "Isaac-Pendulum-MARL-Direct"
    env = _env(task)
    agent = import_runner("torch")(env, _cfg(task, algorithm, tmp_path)).agent
    agent.enable_training_mode(False, apply_to_models=True)
    observations, _ = env.reset()
    states = env.state()
    first = agent.act(observations, states, timestep=0, timesteps=0)
    second = agent.act(observations, states, timestep=0, timesteps=0)
    for uid in env.possible_agents:
        # play_skrl.py's own expression: the mean action where the agent gives one, else the action it took
        played = [outputs[-1][uid].get("mean_actions", outputs[0][uid]) for outputs in (first, second)]
        assert played[0].shape == (NUM_ENVS, 1) and torch.isfinite(played[0]).all(), uid
        assert torch.equal(played[0], played[1]), uid  # the policy's mean: no draw, no exploration noise in it
    if algorithm == "happo":  # a Gaussian policy: the action it draws is not the one played (the off-policy agents
        # act with their policies' means in evaluation)
        assert not torch.equal(first[0]["cart"], first[-1]["cart"]["mean_actions"])


def test_maddpg_config_keeps_rollouts_for_isaac_labs_max_iterations(tmp_path):
    # Isaac Lab's train backend sets trainer.timesteps = --max_iterations x agent.rollouts; our Runner refuses the
    # key for MADDPG, which the Runner handed to Isaac Lab leaves out
    from skrl_marl_ext.runner import Runner

    task = "Isaac-Pendulum-MARL-Direct"
    cfg = _cfg(task, "maddpg", tmp_path)
    assert cfg["agent"]["rollouts"] > 0
    with pytest.raises(ValueError, match="rollouts"):
        Runner(_env(task), cfg)
    assert type(import_runner("torch")(_env(task), cfg).agent) is MADDPG
    assert "rollouts" in cfg["agent"]  # the caller's config is left as it was


def test_our_agents_refuse_jax_in_one_line(tmp_path):
    from skrl_marl_ext.isaaclab import IsaacLabError

    task = "Isaac-Pendulum-MARL-Direct"
    with pytest.raises(IsaacLabError, match="--ml_framework jax: .* use --ml_framework torch"):
        import_runner("jax")(_env(task), _cfg(task, "happo", tmp_path))


# ----------------------------------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["isaaclab", "frobnicate"], "unknown command 'frobnicate'; use train or play"),
        (["isaaclab", "train", "--rl_library", "rsl_rl"], "--rl_library rsl_rl: this command runs the skrl backend"),
    ],
)
def test_the_command_refuses_what_it_cannot_run_in_one_line(argv, message, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("skrl-marl isaaclab: error: ") and message in err


FAKE_SKRL = """
def import_skrl_runner(ml_framework):
    from skrl.utils.runner.torch import Runner
    return Runner

def resolve_skrl_agent_cfg_entry_point(agent, algorithm):
    if agent is not None:
        return agent
    if algorithm is None or algorithm.lower() == "ppo":
        return "skrl_cfg_entry_point"
    return f"skrl_{algorithm.lower()}_cfg_entry_point"
"""

FAKE_CLI_ARGS = """
def add_skrl_args(parser):
    group = parser.add_argument_group("skrl")
    group.add_argument("--ml_framework", default="torch", choices=["torch", "jax"])
    group.add_argument("--algorithm", default=None, choices=["AMP", "PPO", "IPPO", "MAPPO"])
"""

FAKE_DISPATCH = """
import importlib

def run_cli(action, argv):
    assert argv[:2] == ["--rl_library", "skrl"], argv
    module = importlib.import_module(f"isaaclab_rl.entrypoints.backends.{action}_skrl")
    return module.run(argv[2:])
"""

# Isaac Lab 3.0's train backend, cut to what touches the names the command replaces: parse with cli_args, resolve the
# config entry point from the task's gym kwargs, build import_skrl_runner(ml_framework)(env, agent_cfg), train
FAKE_TRAIN = """
import argparse, json, os, yaml
import gymnasium as gym
import isaaclab_tasks  # noqa: F401  (registers the tasks)
from skrl.envs.wrappers.torch import wrap_env
from isaaclab_standin import TASKS, DirectMARLEnvStandIn
from ...skrl import import_skrl_runner, resolve_skrl_agent_cfg_entry_point
from . import cli_args_skrl as cli_args

def run(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--task")
    parser.add_argument("--agent", default=None)
    parser.add_argument("--max_iterations", type=int, default=None)
    cli_args.add_skrl_args(parser)
    args = parser.parse_args(argv)
    entry_point = resolve_skrl_agent_cfg_entry_point(args.agent, args.algorithm)
    path = gym.spec(args.task).kwargs[entry_point]
    with open(path) as file:
        agent_cfg = yaml.safe_load(file)
    if args.max_iterations:
        agent_cfg["trainer"]["timesteps"] = args.max_iterations * agent_cfg["agent"]["rollouts"]
    agent_cfg["agent"]["experiment"].update(directory=os.environ["RUN_DIR"], write_interval=0, checkpoint_interval=0)
    agent_cfg["trainer"]["disable_progressbar"] = True
    if agent_cfg["agent"]["class"] in ("MADDPG", "MASAC", "HASAC"):
        agent_cfg["agent"].update(learning_starts=8, batch_size=32)
    if agent_cfg["agent"]["class"] == "PPO":  # a single-agent task
        env = wrap_env(gym.make("Pendulum-v1"))
    else:
        standin = TASKS["pendulum_marl" if "Pendulum" in args.task else "shadow_hand_over"]
        env = wrap_env(DirectMARLEnvStandIn(**standin, num_envs=4), wrapper="isaaclab-multi-agent")
    runner = import_skrl_runner(args.ml_framework)(env, agent_cfg)
    runner.run()
    agent = type(runner.agent)
    with open(os.environ["REPORT"], "w") as file:
        json.dump({"config": path, "agent": f"{agent.__module__}.{agent.__name__}",
                   "timesteps": agent_cfg["trainer"]["timesteps"]}, file)
    return 0
"""

FAKE_TASKS = """
import gymnasium as gym
DATA = {data!r}
gym.register(id="Isaac-Pendulum-MARL-Direct", entry_point="gymnasium.envs.classic_control:CartPoleEnv", kwargs={{
    "skrl_cfg_entry_point": DATA + "/pendulum_marl_mappo.yaml",  # a config of skrl's own: class PPO below
    "skrl_mappo_cfg_entry_point": DATA + "/pendulum_marl_mappo.yaml",
    "skrl_ippo_cfg_entry_point": DATA + "/pendulum_marl_ippo.yaml",
}})
gym.register(id="Isaac-Shadow-Handover-Direct", entry_point="gymnasium.envs.classic_control:CartPoleEnv", kwargs={{
    "skrl_mappo_cfg_entry_point": DATA + "/handover_mappo.yaml",
    "skrl_ippo_cfg_entry_point": DATA + "/handover_ippo.yaml",
}})
"""


PPO_CFG = {
    "models": {
        "separate": True,
        "policy": {"class": "GaussianMixin", "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [8]}],
                   "output": "ACTIONS"},
        "value": {"class": "DeterministicMixin", "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [8]}],
                  "output": "ONE"},
    },
    "memory": {"class": "RandomMemory", "memory_size": -1},
    "agent": {"class": "PPO", "rollouts": 8, "experiment": {}},
    "trainer": {"class": "SequentialTrainer", "timesteps": 16},
}  # fmt: skip
"""A config of skrl's own single-agent PPO."""


def _fake_isaaclab(root) -> None:
    """Isaac Lab 3.0's module layout, as far as ``skrl-marl isaaclab`` reaches into it, under ``root``."""
    files = {
        "isaaclab_rl/__init__.py": "",
        "isaaclab_rl/skrl.py": FAKE_SKRL,
        "isaaclab_rl/entrypoints/__init__.py": "",
        "isaaclab_rl/entrypoints/dispatch.py": FAKE_DISPATCH,
        "isaaclab_rl/entrypoints/backends/__init__.py": "",
        "isaaclab_rl/entrypoints/backends/cli_args_skrl.py": FAKE_CLI_ARGS,
        "isaaclab_rl/entrypoints/backends/train_skrl.py": FAKE_TRAIN,
        "isaaclab_tasks/__init__.py": FAKE_TASKS.format(data=ISAACLAB3),
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _command(args: list[str], fake, tmp_path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), TESTS, REPO]),
        "RUN_DIR": str(tmp_path / "runs"),
        "REPORT": str(tmp_path / "report.json"),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "skrl_marl_ext.isaaclab", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)


@pytest.mark.parametrize(
    ("algorithm", "config", "agent"),
    [
        ("HAPPO", "pendulum_happo.yaml", "skrl_marl_ext.algorithms.happo.HAPPO"),
        ("MADDPG", "pendulum_maddpg.yaml", "skrl_marl_ext.algorithms.maddpg.MADDPG"),
        ("HASAC", "pendulum_hasac.yaml", "skrl_marl_ext.algorithms.hasac.HASAC"),
        ("MAPPO", "pendulum_marl_mappo.yaml", "skrl_marl_ext.algorithms.mappo.MAPPO"),
    ],
)
def test_train_runs_isaac_labs_backend_with_our_runner_and_configs(algorithm, config, agent, tmp_path):
    fake = tmp_path / "fake"
    _fake_isaaclab(fake)
    args = ["train", "--task", "Isaac-Pendulum-MARL-Direct", "--algorithm", algorithm, "--max_iterations", "2"]
    done = _command(args, fake, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert os.path.basename(report["config"]) == config  # HAPPO/MADDPG: the package's, registered at start
    assert report["agent"] == agent
    assert report["timesteps"] == 2 * 16  # --max_iterations counted in the config's rollouts (MADDPG's too)


def test_a_config_of_skrls_own_agent_builds_skrls_runner(tmp_path):
    # --agent names a recipe outright; a class not ours (skrl's single-agent PPO here) gets skrl's Runner, as in
    # isaaclab train
    fake = tmp_path / "fake"
    _fake_isaaclab(fake)
    ppo = tmp_path / "ppo.yaml"
    ppo.write_text(yaml.safe_dump(PPO_CFG))
    tasks = fake / "isaaclab_tasks" / "__init__.py"
    tasks.write_text(tasks.read_text() + f"\ngym.spec('Isaac-Pendulum-MARL-Direct').kwargs['own'] = {str(ppo)!r}\n")
    done = _command(["train", "--task", "Isaac-Pendulum-MARL-Direct", "--agent", "own"], fake, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "report.json").read_text())["agent"] == "skrl.agents.torch.ppo.ppo.PPO"


@pytest.mark.parametrize(
    ("layout", "names"),
    [
        ("without-name", "isaaclab_rl.entrypoints.backends.train_skrl.import_skrl_runner"),
        ("without-module", "module isaaclab_rl.entrypoints.backends.train_skrl"),
        ("not-installed", "Isaac Lab is not installed in this Python"),
    ],
)
def test_an_isaac_lab_that_moved_what_the_command_replaces_gets_one_line(layout, names, tmp_path):
    # a later release that moves these names: one line naming what is missing and the version supported
    fake = tmp_path / "fake"
    _fake_isaaclab(fake)
    backend = fake / "isaaclab_rl" / "entrypoints" / "backends" / "train_skrl.py"
    if layout == "without-name":
        backend.write_text(backend.read_text() + "\ndel import_skrl_runner\n")
    elif layout == "without-module":
        backend.unlink()
    else:
        (fake / "isaaclab_rl" / "__init__.py").unlink()
        (fake / "isaaclab_rl").rename(fake / "elsewhere")
    done = _command(["train", "--task", "Isaac-Pendulum-MARL-Direct", "--algorithm", "HAPPO"], fake, tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("skrl-marl isaaclab: error: "), done.stderr
    assert names in done.stderr
    if layout != "not-installed":
        assert "supports Isaac Lab 3.0" in done.stderr
