"""Misuse table: each wrong use of MAPPO, IPPO or MADDPG is refused with an error that names the argument and the fix.

Every case raises at construction, except the two that need the env's ``num_envs`` (which skrl's constructor never
sees): those raise on the first step, before anything is learned.
"""

from __future__ import annotations

import gymnasium
import pytest
import torch
from helpers import drive, make_agent, make_maddpg, make_maddpg_models, make_models, spread
from skrl.memories.torch import RandomMemory

from skrl_marl_ext import MADDPG, MAPPO
from skrl_marl_ext.models import CategoricalMLP, GaussianMLP, ValueMLP

CASES = {}


def case(match):
    def register(build):
        CASES[build.__name__] = (build, match)
        return build

    return register


env = spread(num_envs=4)


@case("state_spaces.*use IPPO")
def mappo_no_states():
    return MAPPO(
        possible_agents=env.possible_agents,
        models=make_models(env),
        observation_spaces=env.observation_spaces,
        state_spaces=None,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},
    )


@case("models\\['agent_1'\\] has no 'policy'")
def ippo_no_policy():
    m = make_models(env, "ippo")
    del m["agent_1"]["policy"]
    return make_agent(env, "ippo", models=m)


@case("action space.*size the policy's output")
def mappo_policy_wrong_action_size():
    m = make_models(env)
    m["agent_0"]["policy"] = GaussianMLP(
        observation_space=env.observation_space("agent_0"), action_space=gymnasium.spaces.Box(-1, 1, (5,))
    )
    return make_agent(env, models=m)


@case("CategoricalMLP.*use GaussianMixin")
def mappo_categorical_on_box():
    m = make_models(env)
    m["agent_0"]["policy"] = CategoricalMLP(
        observation_space=env.observation_space("agent_0"), action_space=gymnasium.spaces.Discrete(5)
    )
    return make_agent(env, models=m)


@case("num_envs=7.*num_envs=env.num_envs")
def ippo_memories_wrong_num_envs():
    return make_agent(env, "ippo", memories={u: RandomMemory(memory_size=16, num_envs=7) for u in env.possible_agents})


@case("memory_size is 3 but cfg.rollouts is 16")
def mappo_memory_wrong_size():
    return make_agent(env, "mappo", memories={u: RandomMemory(memory_size=3, num_envs=4) for u in env.possible_agents})


@case("'agent_2'.*has no models")
def mappo_missing_agent_models():
    m = make_models(env)
    del m["agent_2"]
    return make_agent(env, models=m)


@case("cfg.rollouts must be a positive integer")
def ippo_neg_rollouts():
    return make_agent(env, "ippo", cfg={"rollouts": -1})


@case("cfg.learning_rate must be > 0")
def mappo_zero_lr():
    return make_agent(env, cfg={"learning_rate": 0.0})


@case("value model.*Size the model")
def mappo_value_wrong_input_size():
    m = make_models(env)
    m["agent_0"]["value"] = ValueMLP(state_space=env.observation_space("agent_0"), input="states")
    return make_agent(env, models=m)


@case("cfg.ratio_clip")
def mappo_ratio_clip_neg():
    return make_agent(env, cfg={"ratio_clip": -0.1})


@case("cfg.discount_factor")
def mappo_gamma_gt1():
    return make_agent(env, cfg={"discount_factor": 1.5})


@case("no 'target_critic'")
def maddpg_no_target_critic():
    m = make_maddpg_models(env)
    del m["agent_0"]["target_critic"]
    return make_maddpg(env, models=m)


@case("models\\['agent_1'\\] has no 'critic'")
def maddpg_no_critic():
    m = make_maddpg_models(env)
    del m["agent_1"]["critic"]
    return make_maddpg(env, models=m)


@case("critic.*taken_actions")
def maddpg_critic_one_agent_action():
    return make_maddpg(env, models=make_maddpg_models(env, joint=env.action_space("agent_0")))


@case("cfg.batch_size must be a positive integer")
def maddpg_zero_batch():
    return make_maddpg(env, cfg={"batch_size": 0})


@case("cfg.actor_learning_rate must be > 0")
def maddpg_neg_actor_lr():
    return make_maddpg(env, cfg={"actor_learning_rate": -1e-3})


@case("unknown config key 'batchsize'. Did you mean 'batch_size'")
def maddpg_unknown_key():
    return make_maddpg(env, cfg={"batchsize": 3})


@case("keys \\['bob'\\] are not agents")
def maddpg_unknown_agent():
    return make_maddpg(env, cfg={"discount_factor": {"agent_0": 0.9, "agent_1": 0.9, "agent_2": 0.9, "bob": 0.9}})


@case("num_envs=3.*num_envs=env.num_envs")
def maddpg_memories_wrong_num_envs():
    a = make_maddpg(env, memories={u: RandomMemory(memory_size=100, num_envs=3) for u in env.possible_agents})
    return a


@case("Discrete.*CategoricalMixin")
def maddpg_gaussian_on_discrete():
    denv = spread(num_envs=4, continuous=False)
    m = make_maddpg_models(denv)
    m["agent_0"]["policy"] = GaussianMLP(
        observation_space=denv.observation_space("agent_0"), action_space=gymnasium.spaces.Box(-1, 1, (1,))
    )
    return make_maddpg(denv, models=m)


@case("replay memory per agent")
def maddpg_no_memories():
    return MADDPG(
        possible_agents=env.possible_agents,
        models=make_maddpg_models(env),
        memories=None,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},
    )


@case("policy.*failed on inputs.*Size the model")
def mappo_agent_id_unsized():
    return make_agent(env, shared=True, cfg={"agent_id_input": True})


@case("cfg.polyak")
def maddpg_polyak_gt1():
    return make_maddpg(env, cfg={"polyak": 2.0})


LATE = {"ippo_memories_wrong_num_envs", "maddpg_memories_wrong_num_envs"}


def test_the_table_covers_all_three_algorithms():
    assert len(CASES) >= 20
    assert {name.split("_")[0] for name in CASES} == {"mappo", "ippo", "maddpg"}


def test_mini_batches_larger_than_a_rollout_warn_at_construction_and_train_finite():
    # skrl accepts it (and trains on the NaN of empty mini-batches): accepted, said, and run with one sample each
    memories = {uid: RandomMemory(memory_size=2, num_envs=4) for uid in env.possible_agents}
    with pytest.warns(UserWarning, match=r"cfg.mini_batches \(100\).*larger than the 8 samples.*using 8"):
        agent = make_agent(env, cfg={"rollouts": 2, "mini_batches": 100}, memories=memories)
    drive(agent, env, 2)
    assert all(group.mini_batches == 8 for group in agent.groups)
    assert all(torch.isfinite(p).all() for uid in env.possible_agents for p in agent.policies[uid].parameters())


@pytest.mark.parametrize("name", sorted(CASES))
def test_misuse_is_refused_with_a_clear_error(name):
    build, match = CASES[name]
    with pytest.raises(ValueError, match=match):
        agent = build()
        if name in LATE:
            drive(agent, env, 1)
        else:
            pytest.fail(f"{name}: no error at construction")
