"""MASAC and HASAC through the front doors: the YAML Runner (its models, a team critic, the shipped configs) and the
``skrl-marl`` command (train, eval, resume)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from skrl.envs.wrappers.torch import wrap_env

from skrl_marl_ext import HASAC, MASAC, cli
from skrl_marl_ext.envs import SpreadEnv, make_spread_env
from skrl_marl_ext.models import QMLP, CategoricalMLP, SquashedGaussianMLP
from skrl_marl_ext.runner import ALGORITHM_NAMES, Runner

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "skrl_marl_ext", "configs")


def _cfg(name, timesteps, **agent):
    cfg = Runner.load_cfg_from_yaml(os.path.join(CONFIGS, f"{name}.yaml"))
    cfg["agent"]["experiment"] = {"write_interval": 0, "checkpoint_interval": 0}
    cfg["agent"].update(agent)
    cfg["trainer"].update(disable_progressbar=True, headless=True, timesteps=timesteps)
    return cfg


def test_the_runner_table_names_masac_and_hasac():
    assert {"masac", "hasac"} <= set(ALGORITHM_NAMES)


@pytest.mark.parametrize(("name", "cls", "continuous"), [("masac", MASAC, True), ("hasac", HASAC, False)])
def test_the_default_configs_build_the_agents_with_their_models_and_train(name, cls, continuous):
    env = make_spread_env(num_envs=8, num_agents=2, continuous=continuous, seed=0)
    runner = Runner(env, _cfg(name, 30, batch_size=16, learning_starts=10))
    agent = runner.agent
    assert type(agent) is cls
    models = agent.models["agent_0"]
    assert isinstance(models["policy"], SquashedGaussianMLP if continuous else CategoricalMLP)
    assert set(models) == {"policy", "critic", "critic_2", "target_critic", "target_critic_2"}
    assert isinstance(models["critic_2"], QMLP) and models["critic_2"] is not models["critic"]
    team = models["critic"] is agent.models["agent_1"]["critic"]
    assert team == (name == "hasac")  # HASAC's default: one team critic; MASAC's: each agent its own
    before = torch.cat([p.detach().reshape(-1).clone() for p in models["policy"].parameters()])
    runner.run("train")
    assert not torch.equal(before, torch.cat([p.detach().reshape(-1) for p in models["policy"].parameters()]))


class NoState(SpreadEnv):
    """An Isaac-style env without a global state: the critics read the concatenated observations."""

    @property
    def state_space(self):
        raise AttributeError("state_space")

    @state_space.setter
    def state_space(self, value):
        pass

    def state(self):
        return None


def test_a_team_critic_from_the_yaml_on_an_env_without_a_state():
    env = wrap_env(NoState(num_envs=8, num_agents=2, continuous=True, seed=0), wrapper="isaaclab")
    cfg = _cfg("masac", 20, batch_size=16, learning_starts=10)
    cfg["models"]["team_critic"] = True
    runner = Runner(env, cfg)
    agent = runner.agent
    assert agent.team_critic is not None and not agent.env_states
    assert agent.models["agent_0"]["target_critic_2"] is agent.models["agent_1"]["target_critic_2"]
    obs_size = env.observation_space("agent_0").shape[0]
    assert agent.models["agent_0"]["critic"].state_space.shape == (2 * obs_size,)
    runner.run("train")
    assert len(agent.tracking_data["Loss / Critic loss (team)"]) > 0


def test_a_target_policy_section_is_refused_for_masac():
    env = make_spread_env(num_envs=4, num_agents=2, continuous=True)
    cfg = _cfg("masac", 10)
    cfg["models"]["target_policy"] = dict(cfg["models"]["policy"])
    with pytest.raises(ValueError, match=r"MASAC models are policy, critic, target_critic, critic_2, target_critic_2"):
        Runner(env, cfg)


def test_the_shipped_mamujoco_config_builds_harls_hasac():
    pytest.importorskip("gymnasium_robotics")
    from skrl_marl_ext.envs import make_env

    env = make_env("mamujoco:HalfCheetah-2x3", num_envs=2, agent_obsk=0)
    agent = Runner(env, _cfg("hasac_mamujoco", 4)).agent
    policy = agent.models["agent_0"]["policy"]
    assert type(agent) is HASAC and agent.team_critic is not None
    assert isinstance(policy.net[-1], torch.nn.Tanh)  # HARL's final_activation_func after the last hidden layer
    assert agent.cfg.batch_size == 1000 and agent.cfg.temperature_learning_rate == 3e-4
    assert agent.groups[0].target_entropy == -3.0


@pytest.mark.parametrize("algo", ["masac", "hasac"])
def test_train_eval_and_resume_from_the_command_line(tmp_path, capsys, algo):
    argv = ["train", "--algo", algo, "--env", "builtin:spread", "--timesteps", "60", "--num-envs", "4"]
    argv += ["--out", str(tmp_path), "--no-progress", "agent.batch_size=16", "agent.learning_starts=20"]
    assert cli.main(argv) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["agent"]["class"] == algo.upper()
    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", str(run_dir), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"skrl-marl: 2 deterministic episodes of {algo} on builtin:spread")
    assert cli.main(["train", "--resume", str(run_dir), "--timesteps", "80", "--no-progress"]) == 0
    assert json.loads((run_dir / "run.json").read_text())["timesteps"] == 80
