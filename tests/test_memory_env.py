"""The built-in memory task (cue recall): spaces, what each step shows, rewards, episode ends, seeding, arguments."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

from skrl_marl_ext.envs import MemoryEnv, make_env, make_memory_env
from skrl_marl_ext.keys import FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY


def _make(num_envs=8, num_agents=2, num_cues=4, delay=3, seed=0):
    return make_env(
        "builtin:memory", num_envs=num_envs, seed=seed, num_agents=num_agents, num_cues=num_cues, delay=delay
    )


def _constant(env, action):
    return {uid: torch.full((env.num_envs, 1), action, dtype=torch.long) for uid in env.possible_agents}


def _cues(observations):
    """Each agent's cue read from a first-step observation, ``{agent: (num_envs,)}``, with its one-hot checked."""
    cues = {}
    for uid, obs in observations.items():
        one_hot = obs[:, :-2]
        assert torch.all(one_hot.sum(dim=-1) == 1), "a first-step observation shows exactly one cue"
        cues[uid] = one_hot.argmax(dim=-1)
    return cues


def test_spaces_and_shapes_through_make_env():
    env = _make(num_envs=5, num_agents=3, num_cues=4, delay=3)
    assert isinstance(env, IsaacLabMultiAgentWrapper) and isinstance(env.unwrapped, MemoryEnv)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"] and env.num_envs == 5
    for uid in env.possible_agents:
        assert type(env.observation_spaces[uid]) is gymnasium.spaces.Box and env.observation_spaces[uid].shape == (6,)
        assert type(env.action_spaces[uid]) is gymnasium.spaces.Discrete and env.action_spaces[uid].n == 4
        assert env.state_spaces[uid].shape == (18,)
    observations, infos = env.reset()
    assert infos == {}
    state = env.state()["agent_0"]
    assert state.shape == (5, 18)
    assert torch.equal(state, torch.cat([observations[u] for u in env.possible_agents], dim=-1))
    observations, rewards, terminated, truncated, _ = env.step(_constant(env, 0))
    for uid in env.possible_agents:
        assert observations[uid].shape == (5, 6) and observations[uid].dtype == torch.float32
        assert env.observation_spaces[uid].contains(observations[uid][0].numpy())
        assert rewards[uid].shape == (5, 1) and rewards[uid].dtype == torch.float32
        assert terminated[uid].shape == (5, 1) and terminated[uid].dtype == torch.bool
        assert truncated[uid].shape == (5, 1) and truncated[uid].dtype == torch.bool
    assert torch.equal(env.state()["agent_1"], torch.cat([observations[u] for u in env.possible_agents], dim=-1))


def test_cue_only_at_the_first_step_and_query_only_at_the_last():
    delay = 4
    env = _make(num_envs=16, delay=delay)
    observations, _ = env.reset()
    for t in range(2 * (delay + 1)):  # two episodes
        step = t % (delay + 1)
        for obs in observations.values():
            cue, query, elapsed = obs[:, :-2], obs[:, -2], obs[:, -1]
            if step == 0:
                assert torch.all(cue.sum(dim=-1) == 1) and torch.all((cue == 0) | (cue == 1))
            else:
                assert torch.all(cue == 0), f"the cue shows at step {step}"
            assert torch.all(query == float(step == delay)), f"query flag wrong at step {step}"
            assert torch.allclose(elapsed, torch.full_like(elapsed, step / delay))
        observations, *_ = env.step(_constant(env, 0))


def test_oracle_that_remembers_the_cue_always_succeeds():
    delay = 3
    env = _make(num_envs=64, num_agents=3, num_cues=5, delay=delay)
    observations, _ = env.reset()
    for _ in range(2):  # two episodes: the oracle must read the new cues after the in-place reset
        cues = _cues(observations)
        returns = {uid: torch.zeros(env.num_envs) for uid in env.possible_agents}
        for step in range(delay + 1):
            answer = step == delay
            actions = {uid: (cues[uid] if answer else torch.zeros_like(cues[uid])).view(-1, 1) for uid in cues}
            observations, rewards, *_ = env.step(actions)
            for uid in env.possible_agents:
                if not answer:
                    assert torch.all(rewards[uid] == 0), "reward before the query step"
                returns[uid] += rewards[uid].view(-1)
        for uid in env.possible_agents:
            assert torch.all(returns[uid] == 1.0)


def test_a_wrong_answer_gets_nothing_and_agents_are_rewarded_separately():
    delay = 2
    env = _make(num_envs=32, num_agents=2, num_cues=3, delay=delay)
    observations, _ = env.reset()
    cues = _cues(observations)
    for _ in range(delay):
        env.step(_constant(env, 0))
    # agent_0 answers right, agent_1 answers wrong
    actions = {"agent_0": cues["agent_0"].view(-1, 1), "agent_1": ((cues["agent_1"] + 1) % 3).view(-1, 1)}
    _, rewards, *_ = env.step(actions)
    assert torch.all(rewards["agent_0"] == 1.0) and torch.all(rewards["agent_1"] == 0.0)


def test_constant_action_is_at_chance():
    num_cues, delay = 4, 2
    env = _make(num_envs=4096, num_cues=num_cues, delay=delay, seed=1)
    env.reset()
    for _ in range(delay):
        env.step(_constant(env, 2))
    _, rewards, *_ = env.step(_constant(env, 2))
    for uid in env.possible_agents:
        assert abs(rewards[uid].mean().item() - 1 / num_cues) < 0.03


def test_terminates_after_delay_plus_one_steps_and_resets_in_place_with_new_cues():
    delay = 5
    env = _make(num_envs=64, delay=delay)
    observations, _ = env.reset()
    first = _cues(observations)
    log = []
    for t in range(2 * (delay + 1)):
        log.append(env.step(_constant(env, 0)))
        if t == delay:  # the first episode ended here: every env restarted in place with new cues
            assert env.unwrapped.steps.tolist() == [0] * 64
            second = _cues(log[-1][0])  # the observation returned with the ending step is the new episode's first
            assert torch.equal(torch.stack([second[u] for u in env.possible_agents], dim=1), env.unwrapped.cues)
            assert all(not torch.equal(first[uid], second[uid]) for uid in env.possible_agents)
    for t, (_, _, terminated, truncated, _) in enumerate(log):
        for uid in env.possible_agents:
            assert torch.all(terminated[uid] == (t % (delay + 1) == delay)), f"terminated wrong at step {t}"
            assert not truncated[uid].any()


def test_final_observations_and_states_only_at_the_ending_step():
    delay = 2
    env = _make(num_envs=4, num_agents=2, num_cues=3, delay=delay)
    env.reset()
    for _ in range(delay):
        *_, extras = env.step(_constant(env, 0))
        assert FINAL_OBSERVATIONS_KEY not in extras and FINAL_STATES_KEY not in extras
    observations, *_, extras = env.step(_constant(env, 0))
    terminal = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])  # no cue, no query, the whole episode elapsed
    for uid in env.possible_agents:
        final = extras[FINAL_OBSERVATIONS_KEY][uid]
        assert torch.equal(final, terminal.expand(4, -1))
        assert not torch.equal(final, observations[uid])  # the returned observations are the new episode's
        assert torch.equal(extras[FINAL_STATES_KEY][uid], torch.cat([final, final], dim=-1))


def test_same_seed_same_cues_other_seed_other_cues():
    def cues(seed, episodes=3):
        env = MemoryEnv(num_envs=32, num_agents=2, num_cues=4, delay=1, seed=seed)
        env.reset()
        seen = []
        for _ in range(episodes):
            seen.append(env.cues.clone())
            for _ in range(2):  # delay + 1 steps
                env.step({uid: torch.zeros(32, 1, dtype=torch.long) for uid in env.possible_agents})
        return torch.stack(seen)

    assert torch.equal(cues(3), cues(3))
    assert not torch.equal(cues(3), cues(4))
    # reset(seed=...) reseeds, as skrl's wrapper does at its first reset
    env = MemoryEnv(num_envs=32, seed=9)
    env.reset(seed=3)
    assert torch.equal(env.cues, cues(3)[0])
    # skrl's wrapper reseeds the env from skrl's own seed at its first reset (the seed argument does not reach it):
    # two wrapped envs built alike draw the same cues
    wrapped = make_memory_env(num_envs=32, seed=5)
    wrapped.reset()
    again = make_memory_env(num_envs=32, seed=5)
    again.reset()
    assert torch.equal(wrapped.unwrapped.cues, again.unwrapped.cues)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"num_cues": 1}, "num_cues"),
        ({"delay": 0}, "delay"),
        ({"num_agents": 0}, "num_agents"),
        ({"num_envs": 0}, "num_envs"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MemoryEnv(**kwargs)
    args = {"num_envs": 2, **kwargs}
    num_envs = args.pop("num_envs")
    with pytest.raises(ValueError, match=name):
        make_env("builtin:memory", num_envs=num_envs, **args)
