"""MADDPG's configuration: the defaults train through skrl's trainers; bad configs, models and memories are refused
with errors that name the fix."""

import copy

import pytest
import torch
from helpers import drive, make_maddpg, make_maddpg_models, one_thread, params, spread  # noqa: F401  (autouse)
from maddpg_helpers import RandomMaskSpread, plain_policies
from skrl.memories.torch import RandomMemory
from skrl.resources.noises.torch import GaussianNoise
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MADDPG, MADDPG_CFG
from skrl_marl_ext.models import QMLP, DeterministicMLP, GaussianMLP
from skrl_marl_ext.trainers import StepTrainer


@pytest.mark.parametrize("continuous", [True, False])
@pytest.mark.parametrize("trainer_cls", [SequentialTrainer, StepTrainer])
def test_default_config_trains_and_evaluates_through_trainers(trainer_cls, continuous):
    env = spread(num_envs=4, num_agents=2, continuous=continuous)
    models = make_maddpg_models(env)
    agent = MADDPG(  # the constructor itself, as a user calls it: cfg={} (make_maddpg would quiet the experiment)
        possible_agents=env.possible_agents,
        models=models,
        memories={uid: RandomMemory(memory_size=64, num_envs=env.num_envs) for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},
    )
    assert agent.cfg.batch_size == MADDPG_CFG().batch_size
    before = params(models["agent_0"]["policy"])
    trainer = trainer_cls(env=env, agents=agent, cfg={"timesteps": 12, "headless": True, "disable_progressbar": True})
    if trainer_cls is StepTrainer:
        for _ in range(12):
            trainer.train()
        for _ in range(3):
            trainer.eval()
    else:
        trainer.train()
        trainer.eval()
    assert not torch.equal(params(models["agent_0"]["policy"]), before)
    assert len(agent.memories["agent_0"]) == 12 * env.num_envs  # evaluation stores nothing


def _bad_critic(env):
    models = make_maddpg_models(env)
    for uid in env.possible_agents:  # sized with the agent's own action space instead of the joint one
        for role in ("critic", "target_critic"):
            models[uid][role] = QMLP(state_space=env.state_space(uid), action_space=env.action_space(uid))
    return models


def _gaussian_policy(env):
    models = make_maddpg_models(env)
    space = env.action_space("agent_0")
    models["agent_0"]["policy"] = GaussianMLP(observation_space=env.observation_space("agent_0"), action_space=space)
    return models


def _without(env, role):
    models = make_maddpg_models(env)
    del models["agent_1"][role]
    return models


def _same_target(env):
    models = make_maddpg_models(env)
    models["agent_0"]["target_policy"] = models["agent_0"]["policy"]
    return models


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda env: {"cfg": {"batch_szie": 8}}, "unknown config key 'batch_szie'. Did you mean 'batch_size'"),
        (lambda env: {"cfg": {"batch_size": 0}}, "cfg.batch_size must be a positive integer"),
        (lambda env: {"cfg": {"actor_learning_rate": 0.0}}, "cfg.actor_learning_rate must be > 0"),
        (lambda env: {"cfg": {"critic_learning_rate": -1.0}}, "cfg.critic_learning_rate must be > 0"),
        (lambda env: {"cfg": {"polyak": 1.5}}, "cfg.polyak must be >= 0.0 and <= 1.0"),
        (lambda env: {"cfg": {"gumbel_temperature": 0}}, "cfg.gumbel_temperature must be > 0"),
        (lambda env: {"cfg": {"exploration_noise": GaussianNoise}}, "must be a noise instance"),
        (lambda env: {"models": _without(env, "target_critic")}, "models\\['agent_1'\\] has no 'target_critic' model"),
        (lambda env: {"models": _bad_critic(env)}, "joint action size 4"),
        (lambda env: {"models": _gaussian_policy(env)}, "must be a DeterministicMixin model"),
        (lambda env: {"models": _same_target(env)}, "one object as policy and target_policy"),
        (lambda env: {"memories": None}, "replay memory per agent"),
        (lambda env: {"memories": dict.fromkeys(env.possible_agents, RandomMemory(memory_size=8))}, "same memory"),
    ],
)
def test_bad_input_is_refused_at_construction(build, match):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    kwargs = build(env)
    if "memories" in kwargs and kwargs["memories"] is None:
        kwargs["memories"] = {}
    with pytest.raises(ValueError, match=match):
        make_maddpg(env, **kwargs)


def test_memories_with_the_wrong_num_envs_are_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = make_maddpg(env, memories={uid: RandomMemory(memory_size=8, num_envs=3) for uid in env.possible_agents})
    with pytest.raises(ValueError, match="num_envs=3 but the env gives 4"):
        drive(agent, env, 1)


def test_policy_regularization_refuses_or_skips_a_policy_without_the_pre_tanh_output():
    class NoPreTanh(DeterministicMLP):
        def compute(self, inputs, role=""):
            actions, _ = super().compute(inputs, role)
            return actions, {}

    env = spread(num_envs=2, num_agents=2, continuous=True)
    models = make_maddpg_models(env, hidden=(32, 32))
    for uid in env.possible_agents:
        models[uid]["policy"] = NoPreTanh(
            observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=(32, 32)
        )
    with pytest.raises(ValueError, match="policy_regularization is 0.001 but the policy of agents .* gives no"):
        make_maddpg(env, {"policy_regularization": 1e-3}, models=models)
    agent = make_maddpg(env, {"policy_regularization": 0.0}, models=copy.deepcopy(models))  # off: any policy
    assert [g.policy_regularization for g in agent.groups] == [0.0]
    with pytest.warns(UserWarning, match="default pre-tanh penalty .* is off for them"):  # None: where given
        agent = make_maddpg(env, {"policy_regularization": None}, models=copy.deepcopy(models))
    assert [g.policy_regularization for g in agent.groups] == [0.0]
    agent = make_maddpg(env, {"policy_regularization": None})  # DeterministicMLP policies: the paper code's weight
    assert [g.policy_regularization for g in agent.groups] == [1e-3]
    assert [g.policy_regularization for g in make_maddpg(env).groups] == [0.0]  # the default: off


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"policy_regularization": -1.0}, "policy_regularization"),
        ({"smooth_regularization_clip": -0.1}, "smooth_regularization_clip"),
        ({"smooth_regularization_noise": GaussianNoise}, "smooth_regularization_noise must be a noise instance"),
    ],
)
def test_smoothing_and_penalty_config_is_checked(cfg, match):
    env = spread(num_envs=2, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match=match):
        make_maddpg(env, cfg)


def test_twin_critics_bad_models_are_refused():
    env = spread(num_envs=2, num_agents=2, continuous=True)
    models = make_maddpg_models(env, twin=True)
    del models["agent_1"]["critic_2"], models["agent_1"]["target_critic_2"]
    with pytest.raises(ValueError, match=r"agents \['agent_1'\] lack \['critic_2', 'target_critic_2'\]"):
        make_maddpg(env, models=models)
    models = make_maddpg_models(env, twin=True)
    for uid in env.possible_agents:
        del models[uid]["target_critic_2"]
    with pytest.raises(ValueError, match="target_critic_2"):
        make_maddpg(env, models=models)
    models = make_maddpg_models(env, twin=True)
    for uid in env.possible_agents:
        models[uid]["critic_2"] = models[uid]["critic"]
    with pytest.raises(ValueError, match="critic and critic_2|serves"):
        make_maddpg(env, models=models)
    with pytest.raises(ValueError, match="policy_delay must be a positive integer"):
        make_maddpg(env, {"policy_delay": 0})


UNMASKED_POLICY = (
    r"agents \['agent_0'(, 'agent_1')?\] receive action masks \({}\) but their policy \(PlainCategorical\) "
    r"ignores them .*"
    r"skrl_marl_ext\.models\.MaskedCategoricalMixin .*skrl_marl_ext\.models\.CategoricalMLP"
)


def test_unmasked_policy_is_refused_at_construction_for_a_dict_mask():
    env = RandomMaskSpread(num_envs=4, dict_obs=True)
    match = UNMASKED_POLICY.format('the "action_mask" entry of their Dict observation space')
    with pytest.raises(ValueError, match=match):
        make_maddpg(env, models=plain_policies(env))


@pytest.mark.parametrize("training", [True, False])
def test_unmasked_policy_is_refused_at_the_first_masked_infos(training):
    env = RandomMaskSpread(num_envs=4)
    agent = make_maddpg(env, models=plain_policies(env))  # no mask in the spaces: accepted
    with pytest.raises(ValueError, match=UNMASKED_POLICY.format(r'infos\["action_mask"\]')):
        drive(agent, env, 3, training=training)
    assert env.taken == 4 * 2  # refused at the first step, whose infos carry the masks
    # an env without masks trains such a policy as before
    drive(agent, spread(num_envs=4, num_agents=2, continuous=False), 3)


def test_constructor_names_skrls_keyword_only_arguments():
    """help(), IDEs and the API page list MADDPG's arguments: skrl's MultiAgent's, keyword-only, as MAPPO's."""
    import inspect

    from skrl_marl_ext import MADDPG, MAPPO

    maddpg, mappo = inspect.signature(MADDPG).parameters, inspect.signature(MAPPO).parameters
    assert list(maddpg) == list(mappo)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in maddpg.values())
