"""Recurrent models in MAPPO and IPPO (skrl's RNN convention): acting, storage, sequence mini-batches, checkpoints.

The central check: re-evaluating the stored sequences from their stored initial hidden states gives the log-probs that
acting gave, so the first mini-batch's ratio is exactly 1, through episode ends, truncations and masked agents inside
sequences, for our GRU/LSTM models and for skrl's documented ones alike.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from helpers import QUIET, drive, make_agent, one_thread, spread  # noqa: F401
from rnn_doc_models import DocGaussianRNN, DocValueRNN
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext.algorithms.mappo import OnPolicyAgent
from skrl_marl_ext.models import GaussianMLP, ValueMLP
from skrl_marl_ext.models.rnn import CategoricalRNN, GaussianRNN, ValueRNN
from skrl_marl_ext.storage.rollout import RESET_KEY, mini_batch_indexes

CFG = {"rollouts": 16, "mini_batches": 2, "learning_epochs": 2, "experiment": QUIET}


def rnn_models(env, *, cell="gru", shared=False, algo="mappo", length=4, doc=False, value_rnn=True, policy_rnn=True):
    def build(uid):
        obs, act, state = env.observation_space(uid), env.action_space(uid), env.state_space(uid)
        value_space = state if algo == "mappo" else obs
        if doc:
            kw = {"lstm": cell == "lstm", "sequence_length": length, "num_envs": env.num_envs}
            return {
                "policy": DocGaussianRNN(obs, None, act, env.device, **kw),
                "value": DocValueRNN(obs, value_space, act, env.device, **kw),
            }
        kw = {"cell": cell, "hidden_size": 16, "sequence_length": length, "hidden_sizes": (16,)}
        if policy_rnn:
            policy_cls = CategoricalRNN if hasattr(act, "n") else GaussianRNN
            policy = policy_cls(observation_space=obs, action_space=act, **kw)
        else:
            policy = GaussianMLP(observation_space=obs, action_space=act, hidden_sizes=(16,))
        source = "states" if algo == "mappo" else "observations"
        if value_rnn:
            value = ValueRNN(observation_space=obs, state_space=state, input=source, **kw)
        else:
            value = ValueMLP(observation_space=obs, state_space=state, input=source, hidden_sizes=(16,))
        return {"policy": policy, "value": value}

    if shared:
        models = build(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    return {uid: build(uid) for uid in env.possible_agents}


def first_mini_batch_log_probs(agent, monkeypatch):
    """Spy on the agent's PPO loss: ``(new log-prob, old log-prob)`` of the first mini-batch of each update (before
    that update's first optimiser step, the re-evaluation of the acting log-probabilities)."""
    seen, original = [], OnPolicyAgent.ppo_loss
    count = {"n": 0}

    def spy(**kwargs):
        group = agent.groups[0]  # every group of these tests has the same epochs and mini-batches
        if count["n"] % (group.cfg.learning_epochs * group.mini_batches) == 0:
            seen.append((kwargs["log_prob"].detach().reshape(-1), kwargs["old_log_prob"].reshape(-1)))
        count["n"] += 1
        return original(**kwargs)

    monkeypatch.setattr(agent, "ppo_loss", spy)
    return seen


@pytest.mark.parametrize(
    "cell, shared, algo, doc",
    [
        ("gru", False, "mappo", False),
        ("lstm", True, "mappo", False),
        ("gru", True, "ippo", False),
        ("lstm", False, "ippo", False),
        ("gru", False, "mappo", True),
        ("lstm", True, "mappo", True),
    ],
)
def test_re_evaluation_matches_acting(cell, shared, algo, doc, monkeypatch):
    """Episodes end (25-step spread episodes, rollouts of 16, sequences of 4) and agents are masked inside sequences;
    the first mini-batch of every update re-evaluates the acting log-probs exactly (ratio 1)."""
    torch.manual_seed(0)
    env = spread(num_envs=6, num_agents=3, agent_masks=True)
    agent = make_agent(env, algo, cfg=CFG, models=rnn_models(env, cell=cell, shared=shared, algo=algo, doc=doc))
    assert all(g.recurrent.sequence_length == 4 for g in agent.groups)
    seen = first_mini_batch_log_probs(agent, monkeypatch)
    drive(agent, env, 64)
    assert len(seen) == 4 * len(agent.groups)
    resets = sum(int(g.rollout[RESET_KEY].sum()) for g in agent.groups)
    assert resets > 0  # episode ends and masked agents happened inside the rollouts
    for new, old in seen:
        assert torch.allclose(new, old, atol=1e-6, rtol=0), (new - old).abs().max()


def test_hidden_states_reset_where_episodes_end_and_agents_are_masked():
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2, agent_masks=True, episode_length=5)
    agent = make_agent(env, "mappo", cfg=CFG, models=rnn_models(env))
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    states = env.state()
    from skrl_marl_ext.trainers import interact

    checked = 0
    for t in range(12):
        step = interact(agent, env, obs, states, timestep=t, timesteps=12)
        for group in agent.groups:
            ended = group.stack(step.terminated).bool() | group.stack(step.truncated).bool()
            reset = group.rollout[RESET_KEY][t % CFG["rollouts"]]  # (G, N, 1)
            assert bool((reset >= ended).all())
            for h in group.recurrent.current["policy"] + group.recurrent.current["value"]:
                rows = h.view(h.shape[0], group.size, -1, h.shape[-1])
                zero = (rows == 0).all(dim=-1).all(dim=0)  # (G, N)
                assert bool(zero[reset[..., 0]].all())
                assert bool((~zero[~reset[..., 0]]).all())  # the others carry on
            checked += int(reset.sum())
        obs, states = step.next_observations, step.next_states
    assert checked > 0


def test_bootstrap_uses_the_hidden_state_after_the_last_step(monkeypatch):
    """The last value of GAE is V(next observation | hidden state after the rollout's last step), replayed by hand."""
    torch.manual_seed(0)
    env = spread(num_envs=3, num_agents=2, episode_length=6)
    cfg = {**CFG, "rollouts": 8}
    agent = make_agent(env, "ippo", cfg=cfg, models=rnn_models(env, algo="ippo", length=8))
    captured = {}
    original = OnPolicyAgent.compute_gae

    def spy(**kwargs):  # groups are updated in order; the value model as GAE saw it (the update changes it next)
        group = agent.groups[len(captured)]
        captured[group.index] = (kwargs["next_values"][-1].clone(), copy.deepcopy(group.value))
        return original(**kwargs)

    monkeypatch.setattr(agent, "compute_gae", spy)
    record, last = agent.record_transition, {}

    def recording(**kwargs):  # the observations after the last step: what the bootstrap reads
        last["next_observations"] = kwargs["next_observations"]
        return record(**kwargs)

    agent.record_transition = recording
    drive(agent, env, 8)
    for group in agent.groups:
        b, (last_values, value) = group.rollout, captured[group.index]
        G, N = group.size, b.num_envs
        h = [torch.zeros(1, G * N, 16)]
        value.train(False)
        with torch.no_grad():
            for t in range(8):
                obs = b["observations"][t].reshape(G * N, -1)
                _, out = value.act({"observations": obs, "states": obs, "rnn": h}, role="value")
                keep = (~b[RESET_KEY][t].reshape(1, G * N, 1)).float()
                h = [x * keep for x in out["rnn"]]
            next_obs = group.stack(last["next_observations"]).reshape(G * N, -1)
            expected, _ = value.act({"observations": next_obs, "states": next_obs, "rnn": h}, role="value")
        assert torch.allclose(last_values.reshape(-1), expected.reshape(-1), atol=1e-6)


def test_sequence_mini_batches_cut_each_env_into_consecutive_steps():
    # sample i is step i // 2 of env i % 2: each env's 6 steps are 2 sequences of 3
    sequences = [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11]]
    torch.manual_seed(0)
    batches = list(mini_batch_indexes(6, 2, 2, sequence_length=3, device="cpu"))
    assert sorted(torch.cat(batches).tolist()) == list(range(12))
    for batch in batches:
        assert all(row in sequences for row in batch.view(-1, 3).tolist())  # whole sequences only


def test_sequence_length_one_draws_skrls_mini_batches():
    """Without sequences, a shuffled epoch is a random permutation split as np.array_split splits it (skrl's)."""
    torch.manual_seed(3)
    got = list(mini_batch_indexes(5, 4, 3, device="cpu"))
    torch.manual_seed(3)
    order = torch.randperm(20)
    assert [b.tolist() for b in got] == [b.tolist() for b in torch.tensor_split(order, 3)]
    assert [len(b) for b in got] == [len(b) for b in np.array_split(range(20), 3)]


def test_bad_recurrent_configs_are_refused_at_construction():
    env = spread(num_envs=2, num_agents=2)
    with pytest.raises(ValueError, match=r"cfg.rollouts \(10\) is not a multiple of the sequence_length \(4\)"):
        make_agent(env, cfg={**CFG, "rollouts": 10}, models=rnn_models(env))
    models = rnn_models(env)
    for uid in env.possible_agents:
        models[uid]["value"] = ValueRNN(state_space=env.state_space(uid), sequence_length=8, hidden_size=16)
    with pytest.raises(ValueError, match="different sequence lengths"):
        make_agent(env, cfg=CFG, models=models)


def test_recurrent_policy_with_mlp_critic_and_the_reverse(monkeypatch):
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2)
    for policy_rnn, value_rnn in ((True, False), (False, True)):
        agent = make_agent(env, cfg=CFG, models=rnn_models(env, policy_rnn=policy_rnn, value_rnn=value_rnn))
        seen = first_mini_batch_log_probs(agent, monkeypatch)
        drive(agent, env, 32)
        for new, old in seen:
            assert torch.allclose(new, old, atol=1e-6, rtol=0)


def test_per_agent_recurrent_models_run_as_groups_of_one_shared_as_one_group():
    env = spread(num_envs=2, num_agents=3)
    own = make_agent(env, cfg=CFG, models=rnn_models(env))
    assert [g.size for g in own.groups] == [1, 1, 1] and not any(g.batched for g in own.groups)
    shared = make_agent(env, cfg=CFG, models=rnn_models(env, shared=True))
    assert [g.size for g in shared.groups] == [3]
    drive(shared, env, 2)
    rows = shared.groups[0].recurrent.current["policy"][0].shape
    assert rows == (1, 3 * 2, 16)  # (layers, G * num_envs, hidden)


def test_checkpoint_restores_models_and_starts_hidden_states_from_zero(tmp_path):
    torch.manual_seed(0)
    env = spread(num_envs=3, num_agents=2)
    agent = make_agent(env, cfg=CFG, models=rnn_models(env, cell="lstm"))
    drive(agent, env, 20)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    other = make_agent(env, cfg=CFG, models=rnn_models(env, cell="lstm"))
    other.load(str(path))
    agent.load(str(path))  # the same checkpoint: hidden states back to zero
    assert all(g.recurrent.current is None for g in agent.groups)
    obs, _ = env.reset()
    for a in (agent, other):
        a.enable_training_mode(False)
    out_a = agent.act(obs, env.state(), timestep=0, timesteps=1)[1]["mean_actions"]
    out_b = other.act(obs, env.state(), timestep=0, timesteps=1)[1]["mean_actions"]
    for uid in env.possible_agents:
        assert torch.equal(out_a[uid], out_b[uid])


def test_mixed_precision_recurrent_update_is_finite(monkeypatch):
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2)
    agent = make_agent(env, cfg={**CFG, "mixed_precision": True}, models=rnn_models(env))
    seen = first_mini_batch_log_probs(agent, monkeypatch)
    drive(agent, env, 32)
    assert seen and all(torch.isfinite(new).all() for new, _ in seen)
    assert all(torch.isfinite(p).all() for g in agent.groups for p in g.parameters())


@pytest.mark.parametrize("lstm", [False, True])
def test_skrl_documented_models_train_through_skrls_sequential_trainer(lstm, monkeypatch):
    """skrl's docs' GRU/LSTM models (tests/rnn_doc_models.py), unchanged, in our MAPPO under skrl's trainer."""
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2)
    agent = make_agent(env, cfg=CFG, models=rnn_models(env, cell="lstm" if lstm else "gru", doc=True))
    before = [p.detach().clone() for g in agent.groups for p in g.parameters()]
    seen = first_mini_batch_log_probs(agent, monkeypatch)
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 48, "headless": True, "disable_progressbar": True}
    ).train()
    after = [p.detach() for g in agent.groups for p in g.parameters()]
    assert len(seen) == 3 * len(agent.groups)  # three rollouts of 16 steps, one update each
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    for new, old in seen:
        assert torch.allclose(new, old, atol=1e-6, rtol=0)


def test_maddpg_refuses_recurrent_models():
    from helpers import make_maddpg, make_maddpg_models

    env = spread(num_envs=2, num_agents=2)
    models = make_maddpg_models(env)
    models["agent_1"]["policy"] = GaussianRNN(
        observation_space=env.observation_space("agent_1"), action_space=env.action_space("agent_1")
    )
    with pytest.raises(ValueError, match="the policy model of agent 'agent_1' is recurrent"):
        make_maddpg(env, models=models)


def test_time_limit_bootstrap_with_a_recurrent_critic_replays_exactly(monkeypatch):
    """Truncated episodes inside the rollout: V(final observation) is taken with the critic's hidden state of the
    episode; acting and re-evaluation still agree."""
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2, episode_length=6)
    agent = make_agent(env, "ippo", cfg={**CFG, "time_limit_bootstrap": True}, models=rnn_models(env, algo="ippo"))
    seen = first_mini_batch_log_probs(agent, monkeypatch)
    drive(agent, env, 32)
    for group in agent.groups:
        b = group.rollout
        assert bool(b["truncated"].any())
        changed = (b["final_values"] != b["values"]) & b["truncated"]
        assert bool(changed.any())  # V(final observation), not V(s_t)
    for new, old in seen:
        assert torch.allclose(new, old, atol=1e-6, rtol=0)


def test_sequential_sequence_mini_batches_keep_the_sequences_in_order():
    batches = list(mini_batch_indexes(6, 2, 2, sequence_length=3, device="cpu", shuffle=False))
    assert [b.tolist() for b in batches] == [[0, 2, 4, 1, 3, 5], [6, 8, 10, 7, 9, 11]]
