"""The YAML Runner: the example YAMLs build this package's MAPPO, IPPO and MADDPG (not skrl's), and they train."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from skrl.envs.wrappers.torch import wrap_env
from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO
from skrl.resources.noises.torch import GaussianNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext import IPPO, MAPPO, ValueNorm
from skrl_marl_ext.envs import EpisodeRecorder, SpreadEnv, make_pettingzoo_env, make_spread_env
from skrl_marl_ext.models import QMLP, CategoricalMLP, DeterministicMLP, GaussianMLP
from skrl_marl_ext.runner import Runner, load_algorithm

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")
CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "skrl_marl_ext", "configs")


def _cfg(path, timesteps=None, **agent):
    cfg = Runner.load_cfg_from_yaml(path)
    assert cfg, path
    cfg["agent"]["experiment"] = {"write_interval": 0, "checkpoint_interval": 0}
    cfg["agent"].update(agent)
    cfg["trainer"].update(disable_progressbar=True, headless=True)
    if timesteps is not None:
        cfg["trainer"]["timesteps"] = timesteps
    return cfg


def _params(module):
    return torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])


def test_isaaclab_style_mappo_yaml_builds_our_mappo_with_1x_keys_mapped():
    # examples/mappo.yaml is written as an Isaac Lab skrl_mappo_cfg.yaml (lambda, clip_predicted_values,
    # state_preprocessor, shared_state_preprocessor, random_timesteps), on an Isaac Lab stand-in env
    env = wrap_env(SpreadEnv(num_envs=16, num_agents=2, seed=0), wrapper="isaaclab")
    runner = Runner(env, _cfg(os.path.join(EXAMPLES, "mappo.yaml"), timesteps=130, rollouts=64))
    agent = runner.agent
    assert type(agent) is MAPPO and not isinstance(agent, SkrlMAPPO)
    cfg = agent.cfg
    assert cfg.gae_lambda == {"agent_0": 0.95, "agent_1": 0.95}  # from "lambda"
    assert cfg.value_clip == {"agent_0": 0.2, "agent_1": 0.2}  # from "clip_predicted_values: True"
    assert cfg.observation_preprocessor["agent_0"] is RunningStandardScaler  # from "state_preprocessor"
    assert cfg.state_preprocessor["agent_0"] is RunningStandardScaler  # from "shared_state_preprocessor"
    models = agent.models["agent_0"]
    assert models["policy"] is not agent.models["agent_1"]["policy"]  # share_across_agents not set
    # skrl's instantiator built the critic on the global state (4 x 2 agents)
    assert models["value"].state_space.shape == (8,)
    before = _params(models["policy"])
    runner.run("train")
    assert not torch.equal(before, _params(models["policy"]))  # two updates of 64 rollouts ran


def test_ippo_yaml_on_batched_mpe_shares_models_and_trains():
    pytest.importorskip("mpe2")
    env = EpisodeRecorder(make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=4, seed=0, N=3, max_cycles=25))
    runner = Runner(env, _cfg(os.path.join(EXAMPLES, "ippo.yaml"), timesteps=100))
    agent = runner.agent
    assert type(agent) is IPPO
    policies = {id(agent.models[uid]["policy"]) for uid in env.possible_agents}
    assert len(policies) == 1  # share_across_agents: True
    policy = agent.models["agent_0"]["policy"]
    assert isinstance(policy, CategoricalMLP)  # PolicyMLP on Discrete(5) actions
    assert agent.models["agent_0"]["value"].input == "observations"
    before = _params(policy)
    runner.run("train")
    assert not torch.equal(before, _params(policy))
    assert len(env.episodes) == 4 * 4  # 4 copies x 4 episodes of 25 steps


def test_value_norm_is_resolved_by_name_in_a_yaml(tmp_path):
    env = make_spread_env(num_envs=4, num_agents=2, continuous=True, seed=0)
    cfg = _cfg(os.path.join(CONFIGS, "mappo.yaml"))
    cfg["agent"].update(value_preprocessor="ValueNorm", value_preprocessor_kwargs=None)
    cfg["agent"]["experiment"].update(directory=str(tmp_path), write_interval=0, checkpoint_interval=0)
    cfg["trainer"].update(timesteps=2 * cfg["agent"]["rollouts"], disable_progressbar=True)
    runner = Runner(env, cfg)
    assert runner.agent.cfg.value_preprocessor["agent_0"] is ValueNorm
    runner.run("train")
    path = tmp_path / "agent.pt"
    runner.agent.save(str(path))
    norm = torch.load(path, weights_only=True)["agent_0"]["value_preprocessor"]
    assert set(norm) >= {"running_mean"} and float(norm["debiasing_term"]) > 0  # its statistics moved


def test_package_defaults_pick_policy_classes_by_action_space():
    env = make_spread_env(num_envs=4, num_agents=2, continuous=True, seed=0)
    runner = Runner(env, _cfg(os.path.join(CONFIGS, "mappo.yaml")))
    assert isinstance(runner.agent.models["agent_0"]["policy"], GaussianMLP)
    env = make_spread_env(num_envs=4, num_agents=2, continuous=False, seed=0)
    runner = Runner(env, _cfg(os.path.join(CONFIGS, "ippo.yaml")))
    assert isinstance(runner.agent.models["agent_0"]["policy"], CategoricalMLP)


def _maddpg_available():
    try:
        load_algorithm("maddpg")
    except ValueError:
        pytest.skip("MADDPG is not in this installation")


def test_maddpg_yaml_with_skrl_instantiators_on_batched_mpe():
    _maddpg_available()
    pytest.importorskip("mpe2")
    cls, _ = load_algorithm("maddpg")
    env = EpisodeRecorder(make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=4, seed=0, N=3, max_cycles=25))
    runner = Runner(env, _cfg(os.path.join(EXAMPLES, "maddpg.yaml"), timesteps=150, batch_size=64))
    agent = runner.agent
    assert type(agent) is cls
    models = agent.models["agent_0"]
    assert set(models) == {"policy", "target_policy", "critic", "target_critic"}
    assert all(agent.models[uid]["critic"] is models["critic"] for uid in env.possible_agents)  # shared
    assert models["target_critic"] is not models["critic"]
    # the critic reads the global state (3 x 18) and the joint one-hot action (3 x 5)
    assert models["critic"].state_space.shape == (54,) and models["critic"].action_space.shape == (15,)
    first_layer = next(m for m in models["critic"].modules() if isinstance(m, torch.nn.Linear))
    assert first_layer.in_features == 54 + 15
    before = _params(models["critic"])
    runner.run("train")
    assert not torch.equal(before, _params(models["critic"]))  # learning_starts 100 < 150 steps
    assert len(env.episodes) == 4 * 6  # 150 steps = 6 episodes of 25 steps per copy


def test_maddpg_defaults_on_continuous_env_and_env_without_state():
    _maddpg_available()

    class NoState(SpreadEnv):
        """An Isaac-style env without a global state: MADDPG's critics read the concatenated observations."""

        @property
        def state_space(self):
            raise AttributeError("state_space")

        @state_space.setter
        def state_space(self, value):
            pass

        def state(self):
            return None

    env = wrap_env(NoState(num_envs=8, num_agents=2, seed=0), wrapper="isaaclab")
    assert env.state_spaces == {"agent_0": None, "agent_1": None}
    cfg = _cfg(os.path.join(CONFIGS, "maddpg.yaml"), timesteps=80, batch_size=32, learning_starts=40)
    runner = Runner(env, cfg)
    models = runner.agent.models["agent_0"]
    assert isinstance(models["policy"], DeterministicMLP) and isinstance(models["target_policy"], DeterministicMLP)
    assert isinstance(models["critic"], QMLP)
    # twin critics by default (clipped double Q); "models.critic_2: null" (the CLI override) gives one critic
    assert isinstance(models["critic_2"], QMLP) and isinstance(models["target_critic_2"], QMLP)
    one = _cfg(os.path.join(CONFIGS, "maddpg.yaml"), timesteps=4)
    one["models"]["critic_2"] = None
    assert set(Runner(env, one).agent.models["agent_0"]) == {"policy", "target_policy", "critic", "target_critic"}
    obs_size = env.observation_space("agent_0").shape[0]
    assert models["critic"].state_space.shape == (2 * obs_size,) and models["critic"].action_space.shape == (4,)
    noise = runner.agent.cfg.exploration_noise
    assert isinstance(noise, GaussianNoise)  # class + kwargs in the YAML became an instance
    before = _params(models["policy"])
    runner.run("train")
    assert not torch.equal(before, _params(models["policy"]))


def test_maddpg_yaml_target_smoothing_noise_class_and_kwargs_become_an_instance():
    """skrl TD3's YAML keys: ``smooth_regularization_noise: GaussianNoise`` with its kwargs, as the exploration noise."""
    _maddpg_available()
    env = make_spread_env(num_envs=2, num_agents=2, seed=0)
    cfg = _cfg(
        os.path.join(CONFIGS, "maddpg.yaml"),
        timesteps=4,
        smooth_regularization_noise="GaussianNoise",
        smooth_regularization_noise_kwargs={"mean": 0.0, "std": 0.2},
        smooth_regularization_clip=0.4,
    )
    agent = Runner(env, cfg).agent
    noise = agent.cfg.smooth_regularization_noise
    assert isinstance(noise, GaussianNoise) and noise.distribution.scale.item() == pytest.approx(0.2)
    assert agent.cfg.smooth_regularization_clip == 0.4


def test_maddpg_yaml_critic_2_section_builds_twin_critics_and_trains():
    """A ``models: critic_2:`` section (TD3's clipped double Q): every agent gets ``critic_2`` and a
    ``target_critic_2`` copying it, sized as the first critic; ``policy_delay`` passes through to the config."""
    _maddpg_available()
    env = make_spread_env(num_envs=4, num_agents=2, seed=0)
    cfg = _cfg(os.path.join(CONFIGS, "maddpg.yaml"), timesteps=40, batch_size=16, learning_starts=20, policy_delay=2)
    cfg["models"]["critic_2"] = {"class": "QMLP", "hidden_sizes": [16], "activation": "relu"}
    runner = Runner(env, cfg)
    models = runner.agent.models["agent_0"]
    assert set(models) == {"policy", "target_policy", "critic", "target_critic", "critic_2", "target_critic_2"}
    assert isinstance(models["critic_2"], QMLP) and models["target_critic_2"] is not models["critic_2"]
    assert models["critic_2"].action_space.shape == models["critic"].action_space.shape
    assert runner.agent.cfg.policy_delay == 2
    before = _params(models["critic_2"])
    runner.run("train")
    assert not torch.equal(before, _params(models["critic_2"]))
    cfg["models"]["critic_2"] = {"hidden_sizes": [16]}
    with pytest.raises(ValueError, match="needs a 'models: critic_2:' section with a 'class'"):
        Runner(env, cfg)


def test_runner_errors_name_the_fix():
    env = make_spread_env(num_envs=2, num_agents=2, seed=0)
    cfg = _cfg(os.path.join(CONFIGS, "mappo.yaml"))
    cfg["agent"]["class"] = "PPO"
    with pytest.raises(ValueError, match="use one of MAPPO, IPPO, MADDPG"):
        Runner(env, cfg)
    try:
        load_algorithm("maddpg")
    except ValueError:
        return
    cfg = _cfg(os.path.join(CONFIGS, "maddpg.yaml"))
    cfg["memory"]["memory_size"] = -1
    with pytest.raises(ValueError, match="MADDPG needs memory.memory_size"):
        Runner(env, cfg)
    cfg = _cfg(os.path.join(CONFIGS, "maddpg.yaml"))
    cfg["models"]["value"] = {"class": "ValueMLP"}
    with pytest.raises(ValueError, match=r"got also \['value'\]"):
        Runner(env, cfg)


def test_every_yaml_names_our_agent():
    for folder, names in ((EXAMPLES, ("mappo", "ippo", "maddpg")), (CONFIGS, ("mappo", "ippo", "maddpg", "happo"))):
        for name in names:
            cfg = Runner.load_cfg_from_yaml(os.path.join(folder, f"{name}.yaml"))
            assert cfg["agent"]["class"].lower() == name
