"""The options that reproduce the MAPPO paper's code (on-policy) and HARL where they differ from skrl: Adam's eps, the
policy's and value's gradients clipped apart, advantages standardised over the agents of a shared policy, and HAPPO's
team critic (docs/paper_code.md). Each is off by default; each is checked where the agent uses it."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import QUIET, drive, make_agent, make_models, one_thread, spread  # noqa: F401

from skrl_marl_ext import HAPPO, ValueNorm
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent
from skrl_marl_ext.models import ValueMLP

ONE_STEP = {"rollouts": 4, "learning_epochs": 1, "mini_batches": 1}


def _checkpoint(agent, tmp_path):
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    return torch.load(path, weights_only=True)


def _norm(tensors):
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors])).item()


# ---------------------------------------------------------------- Adam's eps


@pytest.mark.parametrize("eps", [None, 1e-5])
def test_optimizer_eps_is_the_eps_of_the_agents_adam_in_its_checkpoint(tmp_path, eps):
    torch.manual_seed(0)
    env = spread(num_envs=4)
    agent = make_agent(env, cfg={**ONE_STEP, "optimizer_eps": eps})
    drive(agent, env, 4)
    state = _checkpoint(agent, tmp_path)
    for uid in env.possible_agents:
        assert state[uid]["optimizer"]["param_groups"][0]["eps"] == (1e-8 if eps is None else eps)


@pytest.mark.parametrize("eps", [0.0, -1e-5, "1e-5"])
def test_a_bad_optimizer_eps_is_refused(eps):
    with pytest.raises(ValueError, match="optimizer_eps"):
        make_agent(spread(num_envs=2), cfg={"optimizer_eps": eps})


# ---------------------------------------------------------------- gradient-norm clipping


def _clip_agent(mode, layout):
    """One update (one mini-batch) with a clip that binds, for agents sharing models, with models of their own one by
    one, or with models of their own stacked; the gradients of that step stay on the parameters."""
    torch.manual_seed(0)
    env = spread(num_envs=4)
    cfg = {**ONE_STEP, "grad_norm_clip": 1e-3, "grad_norm_clip_mode": mode, "batch_agent_models": layout == "stacked"}
    agent = make_agent(env, shared=layout == "shared", cfg=cfg)
    drive(agent, env, 4)
    return agent


@pytest.mark.parametrize("layout", ["shared", "one_by_one", "stacked"])
@pytest.mark.parametrize("mode", ["joint", "separate"])
def test_the_clip_bounds_the_policy_and_value_gradients_together_or_apart(mode, layout):
    agent = _clip_agent(mode, layout)
    assert all(group.batched == (layout == "stacked") for group in agent.groups)
    for group in agent.groups:
        rows = range(group.size) if group.batched else [None]  # a stacked group: each agent's own slice
        for i in rows:
            policy = [p.grad if i is None else p.grad[i] for p in group.parameters("policy")]
            value = [p.grad if i is None else p.grad[i] for p in group.parameters("value")]
            if mode == "joint":  # skrl's: one norm over both models
                assert _norm(policy + value) == pytest.approx(1e-3, rel=1e-3)
                assert _norm(policy) < 1e-3 * 0.999
            else:  # the MAPPO paper's code and HARL: each model's own norm
                assert _norm(policy) == pytest.approx(1e-3, rel=1e-3)
                assert _norm(value) == pytest.approx(1e-3, rel=1e-3)


def test_separate_clipping_refuses_a_policy_and_value_that_share_parameters():
    env = spread(num_envs=2)
    models = make_models(env, algo="ippo")
    for uid in env.possible_agents:
        models[uid]["value"].net[0] = models[uid]["policy"].net[0]  # a shared first layer
    make_agent(env, algo="ippo", models=models)  # joint: fine
    with pytest.raises(ValueError, match="grad_norm_clip_mode='separate'.*share parameters"):
        make_agent(env, algo="ippo", models=models, cfg={"grad_norm_clip_mode": "separate"})


def test_a_bad_grad_norm_clip_mode_is_refused():
    with pytest.raises(ValueError, match="grad_norm_clip_mode"):
        make_agent(spread(num_envs=2), cfg={"grad_norm_clip_mode": "policy"})


# ---------------------------------------------------------------- advantage standardisation


class LossSpy:
    """The advantages of every ``ppo_loss`` call (one per mini-batch)."""

    def __init__(self, monkeypatch):
        self.advantages = []
        original = OnPolicyAgent.ppo_loss

        def spy(**kwargs):
            self.advantages.append(kwargs["advantages"].detach().clone())
            return original(**kwargs)

        monkeypatch.setattr(OnPolicyAgent, "ppo_loss", staticmethod(spy))


def _agents_apart(rewards, timestep, timesteps):
    """The team reward plus the agent's position in its group (a group's rewards come stacked ``(G, N, 1)``)."""
    return rewards + torch.arange(rewards.shape[0], dtype=rewards.dtype).view(-1, 1, 1)


def _standardised(monkeypatch, mode, *, shared=True, batched=False):
    torch.manual_seed(0)
    env = spread(num_envs=4)
    spy = LossSpy(monkeypatch)
    cfg = {**ONE_STEP, "rollouts": 8, "advantage_standardization": mode, "batch_agent_models": batched}
    cfg["rewards_shaper"] = _agents_apart
    # critics on each agent's observation, and rewards shaped per agent: the agents' advantages differ
    agent = drive(make_agent(env, cfg=cfg, models=make_models(env, "ippo", shared=shared)), env, 8)
    losses = [agent.tracking_data[f"Loss / Policy loss ({uid})"][-1] for uid in env.possible_agents]
    return torch.cat(spy.advantages), losses  # (agents, samples, 1)


def test_pooled_advantages_are_standardised_over_the_agents_of_a_shared_policy(monkeypatch):
    per_agent, per_agent_losses = _standardised(monkeypatch, "per_agent")
    pooled, pooled_losses = _standardised(monkeypatch, "pooled")
    assert per_agent.shape == pooled.shape == (3, 32, 1)
    # per agent: every agent's advantages have mean 0 and std 1 (skrl's, HARL's)
    assert per_agent.mean(dim=(1, 2)).abs().max() < 1e-5
    assert per_agent.std(dim=(1, 2), unbiased=False).sub(1).abs().max() < 1e-4
    # pooled: the group's do (the MAPPO paper's code), each agent's alone do not
    assert pooled.mean().abs() < 1e-5 and abs(pooled.std(unbiased=False).item() - 1) < 1e-4
    assert pooled.mean(dim=(1, 2)).abs().max() > 1e-2
    # the same raw advantages under two standardisations: an affine map of each agent's pooled onto its own
    for i in range(3):
        z = (pooled[i] - pooled[i].mean()) / pooled[i].std(unbiased=False)
        torch.testing.assert_close(z, per_agent[i], atol=1e-4, rtol=1e-4)
    # the first mini-batch's surrogate at ratio 1 is -mean(A): 0 per agent, summing to 0 over a pooled group
    assert max(abs(x) for x in per_agent_losses) < 1e-5
    assert abs(sum(pooled_losses)) < 1e-4 and max(abs(x) for x in pooled_losses) > 1e-2


def test_pooled_leaves_agents_with_policies_of_their_own_per_agent(monkeypatch):
    for batched in (False, True):
        per_agent, _ = _standardised(monkeypatch, "per_agent", shared=False, batched=batched)
        pooled, _ = _standardised(monkeypatch, "pooled", shared=False, batched=batched)
        torch.testing.assert_close(pooled, per_agent)


def test_a_bad_advantage_standardization_is_refused():
    with pytest.raises(ValueError, match="advantage_standardization"):
        make_agent(spread(num_envs=2), cfg={"advantage_standardization": "global"})


# ---------------------------------------------------------------- HAPPO's team critic


def _team(env, critic=None):
    models = make_models(env)
    critic = critic or ValueMLP(state_space=env.state_space("agent_0"), input="states", hidden_sizes=(32, 32))
    for uid in env.possible_agents:
        models[uid]["value"] = critic
    return models, critic


def _happo(env, models, cfg=None):
    return HAPPO(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={"experiment": QUIET, **(cfg or {})},
    )


def test_one_value_model_for_every_agent_is_happos_team_critic():
    torch.manual_seed(0)
    env = spread(num_envs=4)
    models, critic = _team(env)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "agents share their models" warning: each policy is its own
        agent = _happo(env, models)
    assert agent.team_critic is critic
    assert [group.uids for group in agent.groups] == [[uid] for uid in env.possible_agents]
    critic_ids = {id(p) for p in critic.parameters()}
    for group in agent.groups:  # each agent's optimiser steps its policy alone
        assert not critic_ids & {id(p) for g in group.optimizer.param_groups for p in g["params"]}
    # MAPPO (agents updated together) keeps refusing a value model shared by agents with policies of their own
    with pytest.raises(ValueError, match="share the value model but not the others.*HAPPO"):
        make_agent(env, models=models)


def test_the_team_critic_is_trained_once_per_update_on_every_agents_samples(tmp_path):
    torch.manual_seed(0)
    env = spread(num_envs=4)
    models, critic = _team(env)
    cfg = {"rollouts": 4, "learning_epochs": 2, "mini_batches": 2, "value_preprocessor": ValueNorm}
    agent = _happo(env, models, cfg)
    policies = {uid: [p.clone() for p in models[uid]["policy"].parameters()] for uid in env.possible_agents}
    before = [p.clone() for p in critic.parameters()]
    drive(agent, env, 4)
    assert all(not torch.equal(a, b) for a, b in zip(before, critic.parameters(), strict=True))
    for uid in env.possible_agents:
        assert any(
            not torch.equal(a, b) for a, b in zip(policies[uid], models[uid]["policy"].parameters(), strict=True)
        )
    state = _checkpoint(agent, tmp_path)
    for uid in env.possible_agents:
        # one critic optimiser, shared: epochs x mini-batches steps per update, not that many per agent
        critic_steps = {int(s["step"]) for s in state[uid]["value_optimizer"]["state"].values()}
        assert critic_steps == {2 * 2}
        assert {int(s["step"]) for s in state[uid]["optimizer"]["state"].values()} == {2 * 2}
        # one value normaliser whose statistics took in the rollout's returns once: d = 1 - beta after one fold
        debiasing = state[uid]["value_preprocessor"]["debiasing_term"].item()
        assert debiasing == pytest.approx(1 - ValueNorm(1).beta, rel=1e-6)
    assert len(agent.tracking_data["Loss / Value loss (team critic)"]) == 1
    assert not any(key.startswith("Loss / Value loss (agent") for key in agent.tracking_data)


def test_the_team_critic_loss_is_the_mean_value_loss_of_every_agents_samples(monkeypatch):
    """One epoch of one mini-batch: the critic's step is one Adam step on HARL's critic loss (``value_loss_coef`` x the
    mean of ``(R - V)^2 / 2``, i.e. ``value_loss_scale`` x the mean squared error) over every agent's samples."""

    torch.manual_seed(0)
    env = spread(num_envs=4)
    models, critic = _team(env)
    cfg = {**ONE_STEP, "mini_batch_order": "sequential", "value_clip": 0.0, "grad_norm_clip": 0.0}
    agent = _happo(env, models, {**cfg, "value_loss_scale": 0.5, "learning_rate": 1e-3})
    reference = ValueMLP(state_space=env.state_space("agent_0"), input="states", hidden_sizes=(32, 32))
    reference.load_state_dict(critic.state_dict())
    returns, states = [], []
    original_loss, original_act = agent.value_loss, agent.act

    def loss_spy(**kwargs):
        returns.append(kwargs["returns"].detach().clone().view(-1, 1))
        return original_loss(**kwargs)

    def act_spy(observations, step_states, **kwargs):
        states.append(step_states["agent_0"].clone())
        return original_act(observations, step_states, **kwargs)

    monkeypatch.setattr(agent, "value_loss", loss_spy)
    monkeypatch.setattr(agent, "act", act_spy)
    drive(agent, env, 4)
    assert len(returns) == 3  # one per agent, in the one mini-batch
    # the reference: the critic on the rollout's states, (step, env) order, every agent reading the env's one state
    predicted = reference.act({"states": torch.cat(states)}, role="value")[0]
    loss = 0.5 * torch.cat([(r - predicted) ** 2 for r in returns]).mean()
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    for ours, theirs in zip(critic.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_a_team_critic_needs_one_value_of_its_update_fields():
    env = spread(num_envs=2)
    models, _ = _team(env)
    epochs = {uid: 2 for uid in env.possible_agents} | {"agent_2": 3}
    with pytest.raises(ValueError, match="team critic.*learning_epochs differs"):
        _happo(env, models, {"learning_epochs": epochs})


def _runner_cfg(algo, **models):
    from skrl_marl_ext.cli.config import default_config

    cfg = default_config(algo)
    cfg["models"].update(models)
    cfg["agent"].update(experiment=QUIET, rollouts=4)
    cfg["trainer"].update(timesteps=8, disable_progressbar=True)
    return cfg


def test_the_runners_team_critic_flag_gives_every_agent_one_value_model():
    from skrl_marl_ext.runner import Runner

    torch.manual_seed(0)
    env = spread(num_envs=4)
    runner = Runner(env, _runner_cfg("happo", team_critic=True))
    agent = runner.agent
    assert agent.team_critic is not None
    assert all(agent.models[uid]["value"] is agent.team_critic for uid in env.possible_agents)
    assert len({id(agent.models[uid]["policy"]) for uid in env.possible_agents}) == len(env.possible_agents)
    runner.run("train")
    assert agent.progress.updates == 2
    # MAPPO and IPPO train a shared value model only with a shared policy: the flag is refused, naming the way
    for algo in ("mappo", "ippo"):
        with pytest.raises(ValueError, match="team_critic is HAPPO's, MADDPG's.*share_across_agents"):
            Runner(env, _runner_cfg(algo, team_critic=True))


def test_a_team_critic_round_trips_through_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    env = spread(num_envs=4)
    agent = _happo(env, _team(env)[0], {**ONE_STEP, "optimizer_eps": 1e-5})
    drive(agent, env, 4)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    fresh_models, fresh_critic = _team(env)
    fresh = _happo(env, fresh_models, {**ONE_STEP, "optimizer_eps": 1e-5})
    fresh.load(str(path))
    for ours, theirs in zip(agent.team_critic.parameters(), fresh_critic.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
    uid = env.possible_agents[0]  # every agent's checkpoint entry holds the team critic's optimiser
    loaded, saved = (a.checkpoint_modules[uid]["value_optimizer"].state_dict() for a in (fresh, agent))
    assert loaded["param_groups"][0]["eps"] == 1e-5
    torch.testing.assert_close(loaded["state"][0]["exp_avg"], saved["state"][0]["exp_avg"])


def test_mappo_with_defaults_is_unchanged_by_the_new_fields():
    """Every new field at its default is skrl's behaviour: the same parameters after an update as with the fields
    named explicitly at their defaults."""
    results = []
    for cfg in ({}, {"grad_norm_clip_mode": "joint", "optimizer_eps": None, "advantage_standardization": "per_agent"}):
        torch.manual_seed(0)
        env = spread(num_envs=4)
        agent = drive(make_agent(env, cfg={**ONE_STEP, **cfg}), env, 4)
        results.append(torch.cat([p.detach().reshape(-1) for g in agent.groups for p in g.trainable]))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
