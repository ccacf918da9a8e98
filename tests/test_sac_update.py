"""MASAC's and HASAC's gradient step as behaviour: stacked agents train as one by one, a masked agent does not learn,
the temperatures follow their target entropies (or stay fixed), HASAC's orders, a team critic trained once,
truncated rows."""

import itertools

import pytest
import torch
from helpers import drive, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import NEVER
from sac_helpers import CRITICS, HASAC, MASAC, make_sac, policy_params, temperatures


def _run(cls, *, batched, team, steps=8, seed=3):
    torch.manual_seed(seed)
    env = spread(num_envs=8, num_agents=2, continuous=True, seed=seed)  # 8 envs x 2 dims: draws of whole blocks
    cfg = {"batch_size": 16, "learning_starts": 2, "gradient_steps": 1, "batch_agent_models": batched}
    return drive(make_sac(env, cfg, cls=cls, team=team), env, steps)


@pytest.mark.parametrize(("cls", "team"), itertools.product([MASAC, HASAC], [False, True]))
def test_stacked_agents_train_as_the_agents_one_by_one(cls, team):
    stacked, loop = _run(cls, batched=True, team=team), _run(cls, batched=False, team=team)
    assert stacked.groups[0].batched and not loop.groups[0].batched
    for uid, params in policy_params(stacked).items():
        torch.testing.assert_close(params, policy_params(loop)[uid], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        torch.tensor(list(temperatures(stacked).values())), torch.tensor(list(temperatures(loop).values()))
    )
    for role in CRITICS:
        for uid in stacked.possible_agents:
            a = torch.cat([p.reshape(-1) for p in stacked.models[uid][role].parameters()])
            b = torch.cat([p.reshape(-1) for p in loop.models[uid][role].parameters()])
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("cls", "team"), itertools.product([MASAC, HASAC], [False, True]))
def test_a_masked_agent_neither_learns_nor_changes_its_temperature(cls, team):
    torch.manual_seed(0)
    env = spread(num_envs=8, num_agents=2, continuous=True)
    agent = make_sac(env, {"batch_size": 16, "learning_starts": NEVER, "gradient_steps": 1}, cls=cls, team=team)
    before, alphas = policy_params(agent), temperatures(agent)

    def dead_agent_1(t, infos):
        infos["agent_mask"] = {
            "agent_0": torch.ones(8, 1, dtype=torch.bool),
            "agent_1": torch.zeros(8, 1, dtype=torch.bool),
        }
        return infos

    drive(agent, env, 6, infos_fn=dead_agent_1)
    for _ in range(3):
        agent.update(timestep=0, timesteps=1, uid="agent_0")
    after = policy_params(agent)
    assert torch.equal(after["agent_1"], before["agent_1"]) and temperatures(agent)["agent_1"] == alphas["agent_1"]
    assert not torch.equal(after["agent_0"], before["agent_0"]) and temperatures(agent)["agent_0"] != alphas["agent_0"]


@pytest.mark.parametrize("cls", [MASAC, HASAC])
def test_fixed_temperatures_stay_at_their_value(cls):
    env = spread(num_envs=8, num_agents=2, continuous=True)
    cfg = {"batch_size": 16, "learning_starts": 2, "learn_temperature": False, "initial_temperature": 0.2}
    agent = drive(make_sac(env, cfg, cls=cls), env, 6)
    assert all(abs(alpha - 0.2) < 1e-7 for alpha in temperatures(agent).values())
    assert all(abs(v - 0.2) < 1e-7 for v in agent.tracking_data["Coefficient / Critic temperature"])
    assert "temperature_optimizer" not in agent.checkpoint_modules["agent_0"]


@pytest.mark.parametrize(("target", "rises"), [(10.0, True), (-100.0, False)])
def test_each_temperature_and_the_critics_follow_the_target_entropy(target, rises):
    env = spread(num_envs=8, num_agents=2, continuous=True)
    cfg = {"batch_size": 16, "learning_starts": 2, "target_entropy": target, "temperature_learning_rate": 0.05}
    agent = drive(make_sac(env, cfg, cls=HASAC, team=True), env, 10)
    start = agent.cfg.initial_temperature
    for alpha in temperatures(agent).values():
        assert (alpha > start) == rises
    critic_alpha = float(agent.checkpoint_modules["agent_0"]["critic_temperature"].log_temperature.detach().exp())
    assert (critic_alpha > start) == rises


def test_own_entropy_critics_have_no_temperature_of_their_own():
    env = spread(num_envs=8, num_agents=2, continuous=True)
    agent = drive(make_sac(env, {"batch_size": 16, "learning_starts": 2, "critic_entropy": "own"}), env, 5)
    assert "Coefficient / Critic temperature" not in agent.tracking_data
    assert "critic_temperature_optimizer" not in agent.checkpoint_modules["agent_0"]


def test_hasac_draws_a_reproducible_order_every_step_and_a_fixed_one_on_request():
    env = spread(num_envs=4, num_agents=4, continuous=True)

    def orders(update_order, seed):
        torch.manual_seed(seed)
        agent = make_sac(env, {"update_order": update_order, "batch_size": 8, "learning_starts": NEVER}, cls=HASAC)
        drive(agent, env, 3)
        seen = []
        for _ in range(6):
            seen.append([group.uids[agents][0] for group, agents in agent.update_units()])
            agent.update(timestep=0, timesteps=1, uid="agent_0")
        return seen

    random = orders("random", 0)
    assert random == orders("random", 0) and random != orders("random", 1)
    assert len({tuple(o) for o in random}) > 1 and all(sorted(o) == env.possible_agents for o in random)
    assert orders("fixed", 0) == [env.possible_agents] * 6


def test_a_team_critic_is_one_model_trained_by_one_optimiser():
    env = spread(num_envs=8, num_agents=3, continuous=True)
    agent = make_sac(env, {"batch_size": 16, "learning_starts": 2}, cls=HASAC, team=True)
    critic = agent.models["agent_0"]["critic"]
    before = torch.cat([p.detach().reshape(-1).clone() for p in critic.parameters()])
    drive(agent, env, 5)
    assert all(agent.models[u]["critic"] is critic for u in env.possible_agents)
    assert not torch.equal(before, torch.cat([p.detach().reshape(-1) for p in critic.parameters()]))
    optimizers = {id(agent.checkpoint_modules[u]["critic_optimizer"]) for u in env.possible_agents}
    assert len(optimizers) == 1
    assert len(agent.tracking_data["Loss / Critic loss (team)"]) == 3 * 2  # 3 steps of 2 gradient steps
    assert "Loss / Critic loss (agent_0)" not in agent.tracking_data


@pytest.mark.parametrize("bootstrap", [False, True])
def test_truncated_rows_train_the_critics_only_with_the_time_limit_bootstrap(bootstrap):
    torch.manual_seed(0)
    env = spread(num_envs=8, num_agents=2, continuous=True)
    cfg = {"batch_size": 16, "learning_starts": NEVER, "time_limit_bootstrap": bootstrap}
    agent = make_sac(env, cfg, team=True)

    drive(agent, env, 4)
    for uid in env.possible_agents:  # every stored row truncated
        agent.memories[uid].get_tensor_by_name("truncated").fill_(True)
    critic = agent.models["agent_0"]["critic"]
    before = torch.cat([p.detach().reshape(-1).clone() for p in critic.parameters()])
    agent.update(timestep=0, timesteps=1, uid="agent_0")
    moved = not torch.equal(before, torch.cat([p.detach().reshape(-1) for p in critic.parameters()]))
    assert moved == bootstrap
