"""MaMuJoCo (``mamujoco:<scenario>-<agent_conf>``): float32 spaces, the env's state, training through the command."""

from __future__ import annotations

import csv

import gymnasium
import numpy as np
import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)

from skrl_marl_ext import cli
from skrl_marl_ext.envs import make_env, make_mamujoco_env
from skrl_marl_ext.keys import FINAL_STATES_KEY

pytest.importorskip(
    "gymnasium_robotics", reason="MaMuJoCo needs gymnasium-robotics: pip install 'skrl-marl-ext[mamujoco]'"
)
import mujoco  # noqa: E402  (installed with gymnasium-robotics)
from gymnasium_robotics.envs.multiagent_mujoco import mamujoco_v1  # noqa: E402


@pytest.fixture
def mujoco_default_log():
    """MuJoCo's log settings as a fresh process has them (a log file ``MUJOCO_LOG.TXT`` in the working directory),
    restored afterwards: the settings are per process, and an earlier test may have changed them."""
    if not hasattr(mujoco, "MjLogConfig"):
        yield
        return
    before = mujoco.MjLogConfig.get()
    config = mujoco.MjLogConfig.get()
    config.logto_file, config.logfile = True, "MUJOCO_LOG.TXT"
    config.set()
    yield
    before.set()


def test_spaces_are_float32_and_the_state_is_the_envs_state():
    env = make_env("mamujoco:HalfCheetah-2x3", num_envs=2, seed=0)
    raw = mamujoco_v1.parallel_env("HalfCheetah", "2x3")  # float64 Box observations, state() without state_space
    assert not hasattr(raw, "state_space")
    assert env.possible_agents == ["agent_0", "agent_1"] and env.num_envs == 2
    for uid in env.possible_agents:
        assert env.observation_spaces[uid] == gymnasium.spaces.Box(-np.inf, np.inf, (12,), np.float32)
        assert env.action_spaces[uid] == gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
        assert env.state_spaces[uid] == gymnasium.spaces.Box(-np.inf, np.inf, (17,), np.float32)

    observations, _ = env.reset()
    raw_observations, _ = raw.reset(seed=0)  # copy 0 is seeded 0
    state = env.state()["agent_0"]
    assert state.dtype == torch.float32 and state.shape == (2, 17)
    assert torch.equal(state[0], torch.as_tensor(raw.state(), dtype=torch.float32))
    actions = {uid: torch.full((2, 3), 0.5) for uid in env.possible_agents}
    observations, rewards, *_ = env.step(actions)
    raw_observations, raw_rewards, *_ = raw.step({uid: np.full(3, 0.5, np.float32) for uid in raw.possible_agents})
    for uid in env.possible_agents:
        assert observations[uid].dtype == torch.float32 and observations[uid].shape == (2, 12)
        assert torch.equal(observations[uid][0], torch.as_tensor(raw_observations[uid], dtype=torch.float32))
        assert rewards[uid][0].item() == pytest.approx(raw_rewards[uid])
    env.close()


def test_env_arguments_pass_through_and_episodes_end_per_copy():
    env = make_mamujoco_env("Walker2d", "2x3", num_envs=3, seed=1, agent_obsk=0, max_episode_steps=4)
    own_joints_only = mamujoco_v1.parallel_env("Walker2d", "2x3", agent_obsk=0).observation_space("agent_0").shape
    one_hop_further = mamujoco_v1.parallel_env("Walker2d", "2x3").observation_space("agent_0").shape  # agent_obsk=1
    assert env.observation_spaces["agent_0"].shape == own_joints_only != one_hop_further
    env.reset()
    actions = {uid: torch.zeros(3, 3) for uid in env.possible_agents}
    steps = [env.step(actions) for _ in range(4)]
    assert [step[3]["agent_1"].view(-1).tolist() for step in steps] == [[False] * 3] * 3 + [[True] * 3]
    assert steps[3][4][FINAL_STATES_KEY]["agent_0"].shape == (3, 17)  # the ended episodes' last states
    env.close()


def test_unknown_scenario_or_agent_configuration_is_one_clear_error():
    with pytest.raises(ValueError, match=r"unknown MaMuJoCo scenario 'Cheetah'.*HalfCheetah"):
        make_env("mamujoco:Cheetah-2x3", num_envs=1)
    with pytest.raises(ValueError, match=r"HalfCheetah has no agent configuration '2x4'"):
        make_env("mamujoco:HalfCheetah-2x4", num_envs=1)


@pytest.mark.parametrize(
    ("algo", "overrides"),
    [
        ("mappo", ["agent.rollouts=8", "agent.mini_batches=2"]),
        ("ippo", ["agent.rollouts=8", "agent.mini_batches=2"]),
        ("maddpg", ["agent.learning_starts=4", "agent.batch_size=8"]),
    ],
)
def test_the_command_trains_on_mamujoco_and_writes_nothing_into_the_working_directory(
    algo, overrides, tmp_path, monkeypatch, mujoco_default_log
):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--algo", algo, "--env", "mamujoco:HalfCheetah-2x3", "--env-arg", "max_episode_steps=8"]
    argv += ["--num-envs", "2", "--timesteps", "16", "--no-progress", "--out", str(tmp_path), *overrides]
    assert cli.main(argv) == 0
    assert not list(tmp_path.rglob("MUJOCO_LOG.TXT"))
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    with open(run_dir / "episodes.csv") as f:
        assert len(list(csv.DictReader(f))) == 4  # 2 envs x 2 episodes of 8 steps
    assert (run_dir / "checkpoints" / "final.pt").is_file()


def _shipped(name, *, num_envs=2, **env_kwargs):
    """The package's config ``name`` through our Runner on HalfCheetah 2x3 (HARL's agent_obsk=0), quiet."""
    from skrl_marl_ext.cli.config import load_config
    from skrl_marl_ext.runner import Runner

    env = make_env("mamujoco:HalfCheetah-2x3", num_envs=num_envs, seed=0, agent_obsk=0, **env_kwargs)
    cfg = load_config(name)
    cfg["agent"]["experiment"] = {"write_interval": 0, "checkpoint_interval": 0}
    cfg["trainer"].update(timesteps=4, disable_progressbar=True)
    return Runner(env, cfg)


def test_the_shipped_mamujoco_configs_build_harls_agents():
    happo = _shipped("happo_mamujoco").agent
    uids = happo.possible_agents
    assert type(happo).__name__ == "HAPPO" and happo.cfg.update_order == "random"
    assert happo.team_critic is happo.models[uids[0]]["value"] is happo.models[uids[1]]["value"]  # one critic
    assert happo.models[uids[0]]["policy"] is not happo.models[uids[1]]["policy"]  # a policy per agent
    for uid in uids:  # HARL's tuned values, in this package's fields
        assert happo.cfg.value_for("learning_epochs", uid) == 15 and happo.cfg.value_for("mini_batches", uid) == 1
        assert happo.cfg.value_for("ratio_clip", uid) == 0.05 and happo.cfg.value_for("optimizer_eps", uid) == 1e-5
        assert happo.cfg.value_for("grad_norm_clip_mode", uid) == "separate"
    layers = [m for m in happo.models[uids[0]]["policy"].net if isinstance(m, torch.nn.Linear)]
    assert [layer.out_features for layer in layers] == [128, 128, 128, 3]
    assert isinstance(happo.models[uids[0]]["policy"].net[1], torch.nn.ReLU)

    mappo = _shipped("mappo_mamujoco").agent
    assert type(mappo).__name__ == "MAPPO" and len(mappo.groups) == 1  # one policy and critic for both agents
    assert mappo.models[uids[0]]["policy"] is mappo.models[uids[1]]["policy"]

    maddpg = _shipped("maddpg_mamujoco").agent
    assert type(maddpg).__name__ == "MADDPG" and "critic_2" not in maddpg.models[uids[0]]  # MADDPG, not MATD3
    assert maddpg.cfg.batch_size == 1000 and maddpg.cfg.gradient_steps == 1


def test_the_command_trains_with_a_shipped_config_by_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--env", "mamujoco:HalfCheetah-2x3", "--env-arg", "agent_obsk=0", "--config", "happo_mamujoco"]
    argv += ["--env-arg", "max_episode_steps=8", "--num-envs", "2", "--timesteps", "16", "--no-progress"]
    argv += ["--out", str(tmp_path), "agent.rollouts=8", "agent.learning_epochs=2"]
    assert cli.main(argv) == 0
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert (run_dir / "checkpoints" / "final.pt").is_file()
