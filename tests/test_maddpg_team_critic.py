"""MADDPG with one team critic (the same critic objects given to every agent, each agent its own policy: HARL's
MADDPG): its gradient step against the team's losses built by hand, stacked policies as one by one, one critic and
one optimiser in every agent's checkpoint, a resumed run, the refusals, and the Runner's ``models: team_critic``."""

import copy
import os

import pytest
import torch
from helpers import drive, make_maddpg, make_maddpg_models, one_thread, params, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import NEVER, fix_indexes, record_grads, record_role_grads, step

from skrl_marl_ext.functional import actor_loss, critic_loss, critic_target, joint_with_own_actions
from skrl_marl_ext.runner import Runner

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "skrl_marl_ext", "configs")


def _hand_gradients(agent, models, b, *, twin, regularization):
    """One gradient step's gradients from the functional losses on the batch ``b``: the team critic's on the team's
    rows (the agents' mean reward, ended where every agent's episode ended), each policy's through the team critic as
    its step left it, only the agent's own action from its policy.

    :return: ``{role: [gradient of each parameter]}`` of the critics, ``{uid: [...]}`` of the policies.
    """
    uids = agent.possible_agents
    first = uids[0]
    stack = lambda key: torch.stack([b[u][key] for u in uids])  # noqa: E731
    joint_taken = torch.cat([b[u]["actions"] for u in uids], dim=-1)
    rewards = stack("rewards").mean(dim=0, keepdim=True)  # every agent alive in this env
    terminated, truncated = stack("terminated").all(dim=0, keepdim=True), stack("truncated").all(dim=0, keepdim=True)
    critic_roles = ("critic", "critic_2") if twin else ("critic",)
    with torch.no_grad():
        joint_next = torch.cat([models[u]["target_policy"].net(b[u]["next_observations"]).tanh() for u in uids], -1)
        next_inputs = torch.cat([b[first]["next_states"], joint_next], dim=-1)
        next_q = [models[first][f"target_{r}"].net(next_inputs).unsqueeze(0) for r in critic_roles]
        y = critic_target(rewards=rewards, next_q_values=next_q, terminated=terminated, discount_factor=0.9)
    q = [models[first][r].net(torch.cat([b[first]["states"], joint_taken], -1)).unsqueeze(0) for r in critic_roles]
    loss = critic_loss(q_values=q, targets=y, mask=~truncated, per_agent=False)["loss"]
    parameters = [p for r in critic_roles for p in models[first][r].parameters()]
    flat = iter(torch.autograd.grad(loss, parameters))
    critics = {r: [next(flat) for _ in models[first][r].parameters()] for r in critic_roles}

    policies, width = {}, b[first]["actions"].shape[-1]
    for i, uid in enumerate(uids):
        pre_tanh = models[uid]["policy"].net(b[uid]["observations"]).unsqueeze(0)
        columns = (i * width + torch.arange(width)).unsqueeze(0)
        joint = joint_with_own_actions(joint_actions=joint_taken, own_actions=pre_tanh.tanh(), columns=columns)
        q_pi = agent.models[uid]["critic"].net(torch.cat([b[first]["states"], joint[0]], -1)).unsqueeze(0)
        mask = b[uid]["agent_mask"].unsqueeze(0)
        loss = actor_loss(q_values=q_pi, mask=mask, pre_tanh=pre_tanh, regularization=regularization, per_agent=False)
        policies[uid] = list(torch.autograd.grad(loss["loss"], list(models[uid]["policy"].parameters())))
    return critics, policies


@pytest.mark.parametrize(("batched", "twin"), [(False, False), (True, False), (True, True)])
def test_a_team_critic_step_takes_the_gradients_of_the_team_losses(batched, twin):
    """One public gradient step: the team critic's gradient (one backward pass: it is frozen while the policies step)
    and every policy's are those of the functional losses built by hand on the sampled rows."""
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=9)
    cfg = {"batch_size": 32, "discount_factor": 0.9, "learning_starts": NEVER, "gradient_steps": 1}
    cfg.update(batch_agent_models=batched, policy_regularization=0.01)
    agent = make_maddpg(env, cfg, team=True, twin=twin)
    assert agent.team_critic is not None and agent.groups[0].batched == batched
    drive(agent, env, 20)
    generator = torch.Generator().manual_seed(0)
    for i, uid in enumerate(env.possible_agents):  # the agents' rows differ: the team's are their mean and their "all"
        memory = agent.memories[uid]
        memory.get_tensor_by_name("rewards").mul_(i + 1)
        for name, p in (("terminated", 0.5), ("truncated", 0.7)):
            flags = memory.get_tensor_by_name(name)
            flags.copy_(torch.rand(flags.shape, generator=generator) < p)
    batch = fix_indexes(agent)
    models = copy.deepcopy({uid: agent.models[uid] for uid in env.possible_agents})
    critic_roles = ("critic", "critic_2") if twin else ("critic",)
    first = env.possible_agents[0]
    critic_grads = {role: record_grads(list(agent.models[first][role].parameters())) for role in critic_roles}
    policy_grads = record_role_grads(agent, "policy")
    step(agent)
    critics, policies = _hand_gradients(agent, models, batch, twin=twin, regularization=0.01)
    for role in critic_roles:
        for got, expected in zip(critic_grads[role], critics[role], strict=True):
            assert len(got) == 1, role
            torch.testing.assert_close(got[0], expected, rtol=1e-5, atol=1e-7)
    for uid, per_parameter in policy_grads().items():
        for got, expected in zip(per_parameter, policies[uid], strict=True):
            assert len(got) == 1, uid
            torch.testing.assert_close(got[0], expected, rtol=1e-5, atol=1e-7)


def _trained(batched, *, steps=8):
    torch.manual_seed(3)
    env = spread(num_envs=8, num_agents=3, continuous=True, seed=3)
    cfg = {"batch_size": 16, "learning_starts": 2, "gradient_steps": 1, "batch_agent_models": batched}
    return drive(make_maddpg(env, cfg, team=True, twin=True), env, steps)


def test_stacked_policies_train_under_a_team_critic_as_one_by_one():
    stacked, loop = _trained(True), _trained(False)
    assert stacked.groups[0].batched and len(loop.groups) == 3
    for uid in stacked.possible_agents:
        for role in ("policy", "target_policy", "critic", "critic_2", "target_critic"):
            torch.testing.assert_close(
                params(stacked.models[uid][role]), params(loop.models[uid][role]), rtol=1e-4, atol=1e-5
            )


def test_a_team_critic_is_one_model_trained_by_one_optimiser_and_tracked_as_the_team():
    env = spread(num_envs=8, num_agents=3, continuous=True)
    agent = make_maddpg(env, {"batch_size": 16, "learning_starts": 2, "gradient_steps": 2}, team=True)
    critic = agent.models["agent_0"]["critic"]
    before = params(critic)
    drive(agent, env, 5)
    assert all(agent.models[u]["critic"] is critic for u in env.possible_agents)
    assert not torch.equal(before, params(critic))
    assert len({id(agent.checkpoint_modules[u]["critic_optimizer"]) for u in env.possible_agents}) == 1
    assert len({id(agent.checkpoint_modules[u]["policy"]) for u in env.possible_agents}) == 3
    assert len(agent.tracking_data["Loss / Critic loss (team)"]) == 3 * 2  # 3 steps of 2 gradient steps
    assert "Loss / Critic loss (agent_0)" not in agent.tracking_data
    assert all(len(agent.tracking_data[f"Loss / Policy loss ({u})"]) == 6 for u in env.possible_agents)


def test_a_resumed_team_critic_agent_takes_the_steps_of_the_uninterrupted_one(tmp_path):
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=0)
    cfg = {"batch_size": 16, "learning_starts": NEVER, "gradient_steps": 1, "checkpoint_replay": True}
    torch.manual_seed(0)
    agent = drive(make_maddpg(env, cfg, team=True, twin=True), env, 6)
    fix_indexes(agent)
    indexes = agent.sample_indexes()
    for _ in range(2):
        step(agent)
    middle = str(tmp_path / "middle.pt")
    agent.save(middle)
    rng_middle = torch.get_rng_state()
    for _ in range(2):
        step(agent)

    torch.manual_seed(123)  # other initial weights: everything comes from the file
    resumed = make_maddpg(env, cfg, team=True, twin=True)
    resumed.load(middle)
    resumed.sample_indexes = lambda: indexes
    torch.set_rng_state(rng_middle)
    for _ in range(2):
        step(resumed)
    for uid in env.possible_agents:
        for role in ("policy", "target_policy", "critic", "target_critic", "critic_2", "target_critic_2"):
            assert torch.equal(params(agent.models[uid][role]), params(resumed.models[uid][role])), (uid, role)


def test_a_partly_shared_critic_and_differing_critic_fields_are_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    models = make_maddpg_models(env)
    models["agent_1"]["critic"] = models["agent_0"]["critic"]
    with pytest.raises(ValueError, match="a team critic is the same critic and target_critic objects"):
        make_maddpg(env, models=models)
    with pytest.raises(ValueError, match="cfg.critic_learning_rate differs between agents"):
        make_maddpg(env, {"critic_learning_rate": {"agent_0": 1e-3, "agent_1": 3e-3}}, team=True)


def test_the_runner_builds_a_team_critic_for_maddpg_and_trains_it():
    env = spread(num_envs=8, num_agents=2, continuous=True, seed=0)
    cfg = Runner.load_cfg_from_yaml(os.path.join(CONFIGS, "maddpg.yaml"))
    cfg["models"]["team_critic"] = True
    cfg["agent"].update(batch_size=16, learning_starts=10, experiment={"write_interval": 0, "checkpoint_interval": 0})
    cfg["trainer"].update(disable_progressbar=True, headless=True, timesteps=20)
    runner = Runner(env, cfg)
    agent = runner.agent
    assert agent.team_critic is not None
    assert agent.models["agent_0"]["critic_2"] is agent.models["agent_1"]["critic_2"]
    assert agent.models["agent_0"]["policy"] is not agent.models["agent_1"]["policy"]
    runner.run("train")
    assert len(agent.tracking_data["Loss / Critic loss (team)"]) > 0
