"""MASAC and HASAC: what they are built from and refuse (one line naming the fix), and how they act."""

import itertools

import pytest
import torch
from helpers import drive, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import MASKED_CFG, RandomMaskSpread
from sac_helpers import CRITICS, HASAC, MASAC, make_sac, make_sac_models, temperatures

from skrl_marl_ext.models import GaussianMLP


@pytest.mark.parametrize(
    ("cls", "continuous", "team", "batched"),
    itertools.product([MASAC, HASAC], [True, False], [False, True], [True, False]),
)
def test_builds_and_trains_for_each_kind_of_actions_critics_and_batching(cls, continuous, team, batched):
    env = spread(num_envs=8, num_agents=3, continuous=continuous)
    cfg = {"batch_size": 16, "learning_starts": 2, "gradient_steps": 1, "batch_agent_models": batched}
    agent = drive(make_sac(env, cfg, cls=cls, team=team), env, 6)
    assert [g.batched for g in agent.groups] == ([True] if batched else [False] * 3)
    assert (agent.team_critic is not None) == team
    labels = ["team"] if team else env.possible_agents
    for label in labels:
        assert len(agent.tracking_data[f"Loss / Critic loss ({label})"]) == 4
    for uid in env.possible_agents:
        assert len(agent.tracking_data[f"Coefficient / Temperature ({uid})"]) == 4
    assert all(t != agent.cfg.initial_temperature for t in temperatures(agent).values())  # learned


def test_agents_sharing_models_form_one_group_with_one_temperature():
    env = spread(num_envs=8, num_agents=3, continuous=True)
    agent = drive(make_sac(env, {"batch_size": 16, "learning_starts": 2}, shared=True), env, 4)
    assert len(agent.groups) == 1 and agent.groups[0].size == 3 and not agent.groups[0].batched
    assert len(set(temperatures(agent).values())) == 1


def test_a_gaussian_policy_for_box_actions_is_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_sac_models(env)
    for uid in env.possible_agents:
        models[uid]["policy"] = GaussianMLP(
            observation_space=env.observation_space(uid), action_space=env.action_space(uid)
        )
    with pytest.raises(ValueError, match="must be a squashed Gaussian .*SquashedGaussianMLP.*clipped sample") as error:
        make_sac(env, models=models)
    assert "\n" not in str(error.value)


def test_an_unbounded_box_needs_action_bound_and_is_squashed_onto_it():
    # Isaac Lab's tasks declare Box(-inf, inf) actions; the squashed policy refuses them in one line naming
    # action_bound, and with it acts inside [-action_bound, action_bound]
    import gymnasium
    import numpy as np

    from skrl_marl_ext.models import SquashedGaussianMLP

    unbounded = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    observations = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(ValueError, match="finite bounds.*action_bound") as error:
        SquashedGaussianMLP(observation_space=observations, action_space=unbounded)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="has \\[-1.0, 1.0\\]: leave action_bound out"):
        SquashedGaussianMLP(observation_space=observations, action_space=observations, action_bound=1.0)
    with pytest.raises(ValueError, match="above 0"):
        SquashedGaussianMLP(observation_space=observations, action_space=unbounded, action_bound=0.0)

    policy = SquashedGaussianMLP(observation_space=observations, action_space=unbounded, action_bound=0.5)
    with torch.no_grad():
        policy.mean_layer.bias.fill_(3.0)  # means far out: the samples crowd the bound
    actions, outputs = policy.act({"observations": torch.rand(4096, 3)})
    assert actions.abs().max() <= 0.5 and actions.abs().max() > 0.49
    assert outputs["mean_actions"].abs().max() <= 0.5
    assert torch.isfinite(outputs["log_prob"]).all()


def test_a_missing_twin_critic_is_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_sac_models(env)
    for uid in env.possible_agents:
        del models[uid]["critic_2"]
    with pytest.raises(ValueError, match="critic_2"):
        make_sac(env, models=models)


def test_a_critic_of_the_wrong_size_is_refused_with_the_sizes_to_build():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_sac_models(env, team=True)
    wrong = make_sac_models(spread(num_envs=4, num_agents=3, continuous=True), team=True)
    for uid in env.possible_agents:
        models[uid].update({role: wrong["agent_0"][role] for role in CRITICS})
    with pytest.raises(ValueError, match=r"joint action size 4 .*joint_action_space"):
        make_sac(env, models=models)


def test_a_partly_shared_critic_is_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_sac_models(env)
    models["agent_1"]["critic"] = models["agent_0"]["critic"]
    with pytest.raises(ValueError, match="team critic is the same critic, critic_2, target_critic and target_critic_2"):
        make_sac(env, models=models)


def test_a_team_critic_with_each_agents_own_entropy_is_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match="critic_entropy='own' .* set critic_entropy='joint'"):
        make_sac(env, {"critic_entropy": "own"}, team=True)


def test_a_team_critic_needs_one_value_of_its_fields():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match="cfg.discount_factor differs between agents"):
        make_sac(env, {"discount_factor": {"agent_0": 0.9, "agent_1": 0.99}}, team=True)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"initial_temperature": 0.0}, "cfg.initial_temperature must be > 0"),
        ({"temperature_learning_rate": -1.0}, "cfg.temperature_learning_rate must be > 0"),
        ({"learn_temperature": "yes"}, "cfg.learn_temperature must be True or False"),
        ({"critic_entropy": "agent"}, r"cfg.critic_entropy must be one of \['joint', 'own'\]"),
        ({"target_entropy": "auto"}, "cfg.target_entropy must be a number"),
        ({"gumbel_temperature": 0.0}, "cfg.gumbel_temperature must be > 0"),
        ({"batch_size": 0}, "cfg.batch_size must be a positive integer"),
        ({"temperature": 0.1}, "unknown"),
    ],
)
def test_bad_config_values_are_refused(cfg, message):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match=message):
        make_sac(env, cfg)


def test_hasac_refuses_an_unknown_update_order():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match=r"HASAC: cfg.update_order must be one of \['random', 'fixed'\]"):
        make_sac(env, {"update_order": "sorted"}, cls=HASAC)


def test_recurrent_models_are_refused():
    from rnn_doc_models import DocGaussianRNN  # noqa: PLC0415

    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_sac_models(env)
    for uid in env.possible_agents:
        models[uid]["policy"] = DocGaussianRNN(
            env.observation_space(uid), None, env.action_space(uid), "cpu", num_envs=4
        )
    with pytest.raises(ValueError, match="recurrent"):
        make_sac(env, models=models)


# ---------------------------------------------------------------- acting


def test_acting_samples_in_training_and_gives_the_squashed_mean_in_evaluation():
    env = spread(num_envs=64, num_agents=2, continuous=True)
    agent = make_sac(env)
    agent.init()
    obs, _ = env.reset()
    agent.enable_training_mode(True)
    first, _ = agent.act(obs, env.state(), timestep=0, timesteps=10)
    second, outputs = agent.act(obs, env.state(), timestep=0, timesteps=10)
    low, high = torch.as_tensor(env.action_space("agent_0").low), torch.as_tensor(env.action_space("agent_0").high)
    for uid in env.possible_agents:
        assert (first[uid] >= low).all() and (first[uid] <= high).all()
        assert not torch.equal(first[uid], second[uid])
        assert outputs[uid]["log_prob"].shape == (64, 1)
    agent.enable_training_mode(False)
    a, out = agent.act(obs, env.state(), timestep=0, timesteps=10)
    b, _ = agent.act(obs, env.state(), timestep=0, timesteps=10)
    for uid in env.possible_agents:
        assert torch.equal(a[uid], b[uid])
        assert torch.equal(a[uid], out["mean_actions"][uid])


def test_random_timesteps_act_uniformly_over_the_action_space():
    env = spread(num_envs=512, num_agents=2, continuous=True)
    agent = make_sac(env, {"random_timesteps": 5})
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    actions, _ = agent.act(obs, env.state(), timestep=0, timesteps=10)
    low, high = env.action_space("agent_0").low, env.action_space("agent_0").high
    a = actions["agent_0"]
    assert float(a.min()) < low[0] + 0.05 and float(a.max()) > high[0] - 0.05  # a policy's samples would be narrow
    assert abs(float(a.mean()) - float((low + high).mean() / 2)) < 0.1


@pytest.mark.parametrize("cls", [MASAC, HASAC])
def test_discrete_agents_honour_action_masks(cls):
    env = RandomMaskSpread(num_envs=16)
    agent = drive(make_sac(env, MASKED_CFG, cls=cls, memory_size=64), env, 12)
    assert env.taken > 0 and env.violations == 0
    agent.enable_training_mode(False)
    obs, infos = env.reset()
    agent.record_transition(
        observations=obs,
        states=env.state(),
        actions={u: torch.zeros(16, 1) for u in obs},
        rewards={u: torch.zeros(16, 1) for u in obs},
        next_observations=obs,
        next_states=env.state(),
        terminated={u: torch.zeros(16, 1, dtype=torch.bool) for u in obs},
        truncated={u: torch.zeros(16, 1, dtype=torch.bool) for u in obs},
        infos={"action_mask": env.masks},
        timestep=0,
        timesteps=1,
    )
    actions, _ = agent.act(obs, env.state(), timestep=0, timesteps=1)
    for uid in env.possible_agents:
        assert env.masks[uid].gather(1, actions[uid].long()).all()  # greedy among the allowed actions
