"""``cfg.n_step``: the off-policy agents' n-step critic targets (HARL's ``n_step``). The rows an agent samples against
a plain reference built step by step from what was recorded (episode ends, truncations, agents that did not act, the
newest step, a replay that wrapped around), and one public gradient step of each agent on n-step rows against the
same agent's one-step step on rows recorded already summed (its discount ``gamma^n``). Where HARL's code is in
``.harl/``, the rows against its replay buffer's ``sample``."""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_maddpg, one_thread, spread  # noqa: F401  (one_thread: autouse)
from sac_helpers import HASAC, MASAC, make_sac

from skrl_marl_ext import MADDPG
from skrl_marl_ext.keys import AGENT_MASK_KEY

E, T = 3, 9
"""Envs and recorded steps."""
HARL_DIR = Path(__file__).resolve().parents[1] / ".harl"


def recorded_steps(env, *, seed, ends=0.06, idle=0.08):
    """``T`` steps of random transitions for every agent: ``[{name: {agent: (E, size)}}]``, episode ends and
    truncations with probability ``ends`` each, agents that did not act with probability ``idle``."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    def flags(p):
        return {u: torch.rand(E, 1, generator=generator) < p for u in env.possible_agents}

    steps = []
    for _ in range(T):
        states = rand(E, env.state_space(env.possible_agents[0]).shape[0])
        next_states = rand(*states.shape)
        steps.append(
            {
                "observations": {u: rand(E, env.observation_space(u).shape[0]) for u in env.possible_agents},
                "states": dict.fromkeys(env.possible_agents, states),
                "actions": {u: rand(E, env.action_space(u).shape[0]).clamp(-1, 1) for u in env.possible_agents},
                "rewards": {u: rand(E, 1) for u in env.possible_agents},
                "next_observations": {u: rand(E, env.observation_space(u).shape[0]) for u in env.possible_agents},
                "next_states": dict.fromkeys(env.possible_agents, next_states),
                "terminated": flags(ends),
                "truncated": flags(ends),
                "acted": {u: ~m for u, m in flags(idle).items()},
            }
        )
    return steps


def record(agent, steps):
    """Store ``steps`` through the public ``record_transition`` (an agent that did not act: ``infos["agent_mask"]``)."""
    agent.init()
    agent.enable_training_mode(True)
    for t, step in enumerate(steps):
        data = {k: v for k, v in step.items() if k != "acted"}
        agent.record_transition(**data, infos={AGENT_MASK_KEY: step["acted"]}, timestep=t, timesteps=T)


def reference_rows(steps, stored, *, n_step, gammas, through_truncation):
    """The n-step rows of stored step ``t`` (``stored``: the recorded steps still in the replay, oldest first), env
    ``e``, built step by step: ``{(t, e): {agent: {name: tensor}}}``."""
    uids = list(gammas)
    newest = stored[-1]
    rows = {}
    for t in stored:
        for e in range(E):

            def any_(name, s, e=e):
                return any(bool(steps[s][name][u][e]) for u in uids)

            k = 1
            while k < n_step:
                s = t + k - 1  # the last step reached
                if s == newest or any_("terminated", s) or any_("truncated", s):
                    break
                if not all(bool(steps[s]["acted"][u][e]) and bool(steps[s + 1]["acted"][u][e]) for u in uids):
                    break
                if any_("truncated", s + 1) and not through_truncation:
                    break
                k += 1
            end = t + k - 1
            rows[(t, e)] = {
                u: {
                    "rewards": sum(gammas[u] ** j * float(steps[t + j]["rewards"][u][e]) for j in range(k)),
                    "scale": sum(abs(gammas[u] ** j * float(steps[t + j]["rewards"][u][e])) for j in range(k)),
                    "discount": gammas[u] ** k,
                    "next_observations": steps[end]["next_observations"][u][e],
                    "next_states": steps[end]["next_states"][u][e],
                    "terminated": bool(steps[end]["terminated"][u][e]),
                    "truncated": bool(steps[end]["truncated"][u][e]),
                    "observations": steps[t]["observations"][u][e],
                    "actions": steps[t]["actions"][u][e],
                }
                for u in uids
            }
    return rows


@pytest.mark.parametrize(("n_step", "through_truncation", "memory_size"), [(3, False, T), (4, True, T), (5, False, 6)])
def test_the_sampled_rows_are_the_n_step_transitions_built_step_by_step(n_step, through_truncation, memory_size):
    """Every stored row, sampled: the rewards summed with each agent's own discount up to the first end, the next
    observations, states and flags of the last step reached, and ``gamma^k``; with a replay that wrapped around
    (``memory_size`` 6 of 9 steps) the oldest steps are gone and the newest is where every transition stops."""
    env = spread(num_envs=E, num_agents=2, continuous=True, seed=1)
    gammas = {"agent_0": 0.9, "agent_1": 0.8}
    cfg = {"n_step": n_step, "discount_factor": gammas, "time_limit_bootstrap": through_truncation}
    agent = make_maddpg(env, cfg, memory_size=memory_size)
    steps = recorded_steps(env, seed=n_step)
    record(agent, steps)
    stored = list(range(T - memory_size, T))
    expected = reference_rows(steps, stored, n_step=n_step, gammas=gammas, through_truncation=through_truncation)
    indexes = torch.arange(memory_size * E)
    batch = agent.sample_batch(indexes)
    reached = []
    for row in indexes.tolist():
        t = stored[0] + (row // E - stored[0]) % memory_size  # the memory's position row // E holds step t
        for uid, want in expected[(t, row % E)].items():
            got = {name: batch[uid][name][row] for name in want if name != "scale"}
            # float32 products and a sum of n_step terms: each rounds by at most 2^-24 of the terms' size
            bound = 2 * n_step * 2.0**-24 * want["scale"]
            torch.testing.assert_close(got["rewards"], torch.tensor([want["rewards"]]), rtol=0.0, atol=bound)
            torch.testing.assert_close(got["discount"], torch.tensor([want["discount"]]), rtol=1e-6, atol=0.0)
            for name in ("next_observations", "next_states", "observations", "actions"):
                torch.testing.assert_close(got[name], want[name], rtol=0.0, atol=0.0)
            for name in ("terminated", "truncated"):
                assert bool(got[name]) == want[name], (t, row % E, uid, name)
        reached.append(round(float(batch["agent_0"]["discount"][row].log() / np.log(0.9))))
    assert min(reached) == 1 and max(reached) == n_step  # the data holds both ends and whole transitions


def test_one_step_rows_are_the_stored_rows():
    env = spread(num_envs=E, num_agents=2, continuous=True, seed=1)
    agent = make_maddpg(env, {}, memory_size=T)
    steps = recorded_steps(env, seed=0)
    record(agent, steps)
    batch = agent.sample_batch(torch.arange(T * E))
    for uid in env.possible_agents:
        assert "discount" not in batch[uid]
        for name in ("rewards", "next_observations"):
            stored = torch.cat([step[name][uid] for step in steps])
            torch.testing.assert_close(batch[uid][name], stored, rtol=0.0, atol=0.0)


AGENTS = {
    "maddpg": (MADDPG, {}),
    "maddpg-team": (MADDPG, {"team": True}),
    "masac": (MASAC, {}),
    "masac-team": (MASAC, {"team": True}),
    "hasac": (HASAC, {"team": True}),
}


def build(name, env, cfg):
    cls, kwargs = AGENTS[name]
    cfg = {"batch_size": 8, "gradient_steps": 1, "learning_starts": 10**9, **cfg}
    if cls is MADDPG:
        return make_maddpg(env, cfg, memory_size=T, **kwargs)
    return make_sac(env, cfg, cls=cls, memory_size=T, **kwargs)


@pytest.mark.parametrize("name", list(AGENTS))
def test_a_gradient_step_on_n_step_rows_is_the_one_step_update_of_the_summed_transitions(name, monkeypatch):
    """``n_step=3`` on steps where no episode ends takes the gradient step a one-step agent takes on transitions
    recorded as ``(o_t, a_t, r_t + gamma r_{t+1} + gamma^2 r_{t+2}, o'_{t+2})`` with discount ``gamma^3``: the agent
    reads the summed rewards, the last step's next observations and states, and the discount of the rows."""
    n, gamma = 3, 0.9
    env = spread(num_envs=E, num_agents=2, continuous=True, seed=1)
    steps = recorded_steps(env, seed=5, ends=0.0, idle=0.0)
    summed = []
    for t in range(T - n + 1):
        step = copy.deepcopy(steps[t])
        step["rewards"] = {u: steps[t]["rewards"][u].clone() for u in env.possible_agents}
        for j in range(1, n):
            for u in env.possible_agents:
                step["rewards"][u] = step["rewards"][u] + gamma**j * steps[t + j]["rewards"][u]
        for key in ("next_observations", "next_states"):
            step[key] = steps[t + n - 1][key]
        summed.append(step)
    torch.manual_seed(0)
    n_step = build(name, env, {"n_step": n, "discount_factor": gamma})
    torch.manual_seed(0)
    one_step = build(name, env, {"discount_factor": gamma**n})
    record(n_step, steps)
    record(one_step, summed)
    indexes = torch.arange(len(summed) * E)  # the steps whose transitions run n steps
    for agent in (n_step, one_step):
        agent.sample_indexes = lambda: indexes
    before = {u: copy.deepcopy(n_step.models[u]["policy"].state_dict()) for u in env.possible_agents}
    after, losses = [], []
    backward = torch.Tensor.backward
    for agent in (n_step, one_step):
        losses.append([])  # every backward pass's loss: the critics' first (their targets), then the policies'

        def recording(tensor, *args, seen=losses[-1], **kwargs):
            seen.append(float(tensor.detach()))
            return backward(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "backward", recording)
        torch.manual_seed(1)
        agent.update(timestep=0, timesteps=1, uid=env.possible_agents[0])
        monkeypatch.undo()
        after.append({u: {r: copy.deepcopy(m.state_dict()) for r, m in agent.models[u].items()} for u in agent.models})
    assert len(losses[0]) >= 2
    torch.testing.assert_close(torch.tensor(losses[0]), torch.tensor(losses[1]), rtol=1e-5, atol=1e-7)
    for uid, roles in after[0].items():
        for role, state in roles.items():
            torch.testing.assert_close(state, after[1][uid][role], rtol=1e-5, atol=1e-7)
    moved = after[0][env.possible_agents[0]]["policy"]
    assert any(not torch.equal(moved[k], v) for k, v in before[env.possible_agents[0]].items())


def harl_available() -> bool:
    return (HARL_DIR / "harl" / "common" / "buffers" / "off_policy_buffer_ep.py").is_file()


@pytest.mark.skipif(not harl_available(), reason="HARL's code is not in .harl/")
@pytest.mark.parametrize("memory_size", [T, 6])
def test_the_rows_are_those_of_harls_replay_buffer(memory_size):
    """HARL's ``OffPolicyBufferEP.sample`` (commit d539bad) on the same steps (the team's reward, its episode ends,
    every agent acting, ends where every agent's episode ended): the same summed rewards, ``gamma^k``, next states
    and terminations, with ``time_limit_bootstrap`` (HARL's ``use_proper_time_limits``)."""
    sys.modules.setdefault("setproctitle", types.ModuleType("setproctitle"))
    if str(HARL_DIR) not in sys.path:
        sys.path.insert(0, str(HARL_DIR))
    from harl.common.buffers.off_policy_buffer_ep import OffPolicyBufferEP

    n, gamma = 4, 0.9
    env = spread(num_envs=E, num_agents=2, continuous=True, seed=1)
    uids = env.possible_agents
    steps = recorded_steps(env, seed=11, idle=0.0)
    for step in steps:  # one team: the same reward and flags for every agent, as HARL's buffer stores them
        for key in ("rewards", "terminated", "truncated"):
            step[key] = dict.fromkeys(uids, step[key][uids[0]])
    agent = make_maddpg(
        env, {"n_step": n, "discount_factor": gamma, "time_limit_bootstrap": True}, team=True, memory_size=memory_size
    )
    record(agent, steps)
    args = {
        "buffer_size": memory_size * E,
        "batch_size": memory_size * E,
        "n_step": n,
        "n_rollout_threads": E,
        "gamma": gamma,
    }
    buffer = OffPolicyBufferEP(
        args,
        env.state_space(uids[0]),
        len(uids),
        [env.observation_space(u) for u in uids],
        [env.action_space(u) for u in uids],
    )
    for step in steps:
        ended = step["terminated"][uids[0]] | step["truncated"][uids[0]]
        buffer.insert(
            (
                step["states"][uids[0]].numpy(),
                [step["observations"][u].numpy() for u in uids],
                np.stack([step["actions"][u].numpy() for u in uids]),
                None,
                step["rewards"][uids[0]].numpy(),
                ended.numpy(),
                np.ones((len(uids), E, 1)),
                step["terminated"][uids[0]].numpy(),
                step["next_states"][uids[0]].numpy(),
                [step["next_observations"][u].numpy() for u in uids],
                None,
            )
        )
    torch.manual_seed(0)  # HARL draws its rows with torch.randperm
    indexes = torch.randperm(memory_size * E)
    torch.manual_seed(0)
    sampled = buffer.sample()
    ours = agent.sample_batch(indexes)
    _, _, _, _, rewards, _, _, term, next_states, _, _, gammas = sampled
    first = ours[uids[0]]
    torch.testing.assert_close(first["rewards"], torch.as_tensor(rewards, dtype=torch.float32), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(first["discount"], torch.as_tensor(gammas, dtype=torch.float32), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(first["next_states"], torch.as_tensor(next_states), rtol=0.0, atol=0.0)
    assert torch.equal(first["terminated"], torch.as_tensor(term).bool())
    reached = torch.round(first["discount"].log() / np.log(gamma))
    assert reached.min() == 1 and reached.max() == n  # the data holds both ends and whole transitions
