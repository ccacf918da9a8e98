"""Env wrappers: VMAS, batched PettingZoo, the Isaac Lab path, and the episode recorder."""

from __future__ import annotations

import faulty_env
import gymnasium
import numpy as np
import pytest
import torch
from dying_env import DyingEnv
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)
from skrl.envs.wrappers.torch import wrap_env
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import AGENT_MASK_KEY, IPPO, MAPPO, cli
from skrl_marl_ext.envs import BatchedParallelEnvWrapper, EpisodeRecorder, SpreadEnv, make_pettingzoo_env
from skrl_marl_ext.keys import FINAL_STATES_KEY
from skrl_marl_ext.models import ACTION_MASK_KEY, CategoricalMLP, GaussianMLP, ValueMLP

QUIET = {"write_interval": 0, "checkpoint_interval": 0}


# ------------------------------------------------------------------------------------------------ VMAS


def test_vmas_shapes_spaces_and_state():
    pytest.importorskip("vmas")
    from skrl_marl_ext.envs import make_vmas_env

    env = make_vmas_env("balance", num_envs=6, max_steps=10, seed=0)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"] and env.num_envs == 6
    for uid in env.possible_agents:
        assert type(env.observation_spaces[uid]) is gymnasium.spaces.Box  # gym spaces converted
        assert env.observation_spaces[uid].shape == (16,)
        assert type(env.action_spaces[uid]) is gymnasium.spaces.Box and env.action_spaces[uid].shape == (2,)
        assert env.state_spaces[uid].shape == (48,)
    observations, _ = env.reset()
    state = env.state()["agent_0"]
    assert state.shape == (6, 48)
    assert torch.equal(state, torch.cat([observations[u] for u in env.possible_agents], dim=-1))
    observations, rewards, terminated, truncated, _ = env.step({u: torch.zeros(6, 2) for u in env.possible_agents})
    for uid in env.possible_agents:
        assert observations[uid].shape == (6, 16) and observations[uid].dtype == torch.float32
        assert rewards[uid].shape == (6, 1) and rewards[uid].dtype == torch.float32
        assert terminated[uid].shape == (6, 1) and terminated[uid].dtype == torch.bool
        assert truncated[uid].shape == (6, 1) and truncated[uid].dtype == torch.bool


def test_vmas_truncates_at_max_steps_with_one_batched_reset():
    pytest.importorskip("vmas")
    from skrl_marl_ext.envs import make_vmas_env

    env = make_vmas_env("balance", num_envs=4, max_steps=3, seed=0)
    env.reset()
    still = {u: torch.zeros(4, 2) for u in env.possible_agents}
    flags = [env.step(still)[3]["agent_0"].view(-1).tolist() for _ in range(6)]
    assert flags == [[False] * 4, [False] * 4, [True] * 4] * 2
    assert env.reset_calls == {"batched": 3, "per_index": 0}  # reset() + two synchronous episode ends


def test_vmas_env_ending_mid_batch_restarts_alone():
    pytest.importorskip("vmas")
    from skrl_marl_ext.envs import make_vmas_env

    env = make_vmas_env("balance", num_envs=4, max_steps=5, seed=0)
    env.reset()
    push = {u: torch.ones(4, 2) for u in env.possible_agents}
    before, *_ = env.step(push)
    env.unwrapped.steps[1] = 4  # env 1 reaches max_steps on the next step, the others do not
    after, _, terminated, truncated, _ = env.step(push)
    assert truncated["agent_0"].view(-1).tolist() == [False, True, False, False]
    assert not terminated["agent_0"].any()
    assert env.unwrapped.steps.tolist() == [2, 0, 2, 2]
    assert env.reset_calls == {"batched": 1, "per_index": 1}
    # the reset env starts a new episode: agents at rest (velocity entries 2:4 of the observation are 0),
    # the others keep moving
    for uid in env.possible_agents:
        assert torch.all(after[uid][1, 2:4] == 0)
        assert torch.all(after[uid][[0, 2, 3], 2:4].abs().sum(dim=-1) > 0)


def test_vmas_discrete_actions():
    pytest.importorskip("vmas")
    from skrl_marl_ext.envs import make_vmas_env

    env = make_vmas_env("balance", num_envs=3, continuous_actions=False, seed=0)
    assert all(type(space) is gymnasium.spaces.Discrete and space.n == 9 for space in env.action_spaces.values())
    env.reset()
    # the 9 actions are 3 x-forces (0, -, +) times 3 y-forces (0, -, +); one step from rest gives vx = 0, -0.07, +0.07
    actions = torch.tensor([[0], [3], [6]])
    observations, *_ = env.step({u: actions for u in env.possible_agents})
    assert torch.allclose(observations["agent_0"][:, 2], torch.tensor([0.0, -0.07, 0.07]))


def test_missing_vmas_is_one_clear_error(monkeypatch):
    import importlib.util

    from skrl_marl_ext.envs import make_vmas_env

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vmas" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'skrl-marl-ext\[vmas\]'"):
        make_vmas_env("balance")


# ------------------------------------------------------------------------------------------------ PettingZoo


def _dying_batch(lengths):
    made = iter(lengths)
    return BatchedParallelEnvWrapper(lambda: DyingEnv(next(made)), num_envs=len(lengths))


def test_batched_pettingzoo_agent_masks_zero_observations_and_per_copy_reset():
    env = _dying_batch([3, 5])
    assert env.observation_spaces["dier"] == env.observation_spaces["runner"]  # the mask is split off
    observations, infos = env.reset()
    assert observations["dier"].tolist() == [[0, 1, 1], [0, 1, 1]]
    assert infos[ACTION_MASK_KEY]["dier"].tolist() == [[False, False, True]] * 2
    actions = {"runner": torch.ones(2, 1, dtype=torch.long), "dier": torch.full((2, 1), 2)}
    log = [env.step(actions) for _ in range(4)]
    acted = [step[4][AGENT_MASK_KEY]["dier"].view(-1).tolist() for step in log]
    assert acted == [[True, True], [True, True], [False, False], [True, False]]  # copy 0 restarted after step 3
    assert [step[4][AGENT_MASK_KEY]["runner"].view(-1).tolist() for step in log] == [[True, True]] * 4
    assert log[1][2]["dier"].view(-1).tolist() == [True, True]  # dies: terminated
    assert log[1][0]["dier"].tolist() == [[0, 0, 0], [0, 0, 0]]  # absent after dying: zeros
    assert log[2][0]["dier"].tolist() == [[0, 1, 1], [0, 0, 0]]  # copy 0 restarted: dier is back
    assert log[2][1]["dier"].view(-1).tolist() == [0.0, 0.0]  # absent: no reward
    assert log[2][1]["runner"].view(-1).tolist() == [1.0, 1.0]
    # copy 0 ends at step 3 (runner truncated, dier gone) and restarts; copy 1 runs on
    assert log[2][3]["runner"].view(-1).tolist() == [True, False]
    assert log[2][0]["runner"].tolist() == [[0, 0, 1], [3, 0, 1]]
    assert log[3][0]["runner"][:, 0].tolist() == [1, 4]


def test_batched_pettingzoo_action_masks_reach_the_policy():
    env = _dying_batch([6, 6, 6, 6])
    seen = []

    class Spy(EpisodeRecorder):
        def step(self, actions):
            seen.append(actions["dier"].clone())
            return super().step(actions)

    spy = Spy(env)
    models = {
        uid: {
            "policy": CategoricalMLP(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
            "value": ValueMLP(observation_space=env.observation_space(uid), input="observations"),
        }
        for uid in env.possible_agents
    }
    agent = IPPO(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg={"rollouts": 8, "mini_batches": 1, "experiment": QUIET},
    )
    SequentialTrainer(
        env=spy, agents=agent, cfg={"timesteps": 40, "disable_progressbar": True, "headless": True}
    ).train()
    # the step after reset has no infos in skrl's trainer; from then on every sampled action of "dier" is allowed
    # (where "dier" is alive; where it is absent its action is ignored and its mask all-True)
    alive = [
        torch.tensor([(t % 6) < 2 for _ in range(4)]) for t in range(1, 40)
    ]  # copies run in lockstep: dier acts at steps 0 and 1 of each 6-step episode
    for actions, live in zip(seen[1:], alive, strict=True):
        assert torch.all(actions.view(-1)[live] == 2)
    assert sum(int(live.sum()) for live in alive) > 20


class StateOnlyEnv:
    """A ParallelEnv as MaMuJoCo is: float64 Box spaces, a ``state()`` but no ``state_space``; episodes of 3 steps."""

    metadata = {"name": "state_only_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["left", "right"]
        self.agents: list[str] = []
        self.received: list[dict[str, np.dtype]] = []

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-1e300, 1e300, (2,), dtype=np.float64)  # bounds beyond float32's range

    def action_space(self, agent):
        return gymnasium.spaces.Box(-1.0, 1.0, (1,), dtype=np.float64)

    def state(self):
        return np.array([self.t, 0.5, 0.25])

    def _obs(self):
        return {uid: np.array([self.t, i + 0.1]) for i, uid in enumerate(self.possible_agents)}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {uid: {} for uid in self.agents}

    def step(self, actions):
        self.received.append({uid: action.dtype for uid, action in actions.items()})
        self.t += 1
        ended = self.t == 3
        self.agents = [] if ended else self.agents
        done = dict.fromkeys(self.possible_agents, ended)
        return self._obs(), dict.fromkeys(self.possible_agents, 1.0), dict.fromkeys(done, False), done, {}


def test_batched_pettingzoo_float64_spaces_and_a_state_without_state_space():
    copies = []

    def make():
        copies.append(StateOnlyEnv())
        return copies[-1]

    env = BatchedParallelEnvWrapper(make, num_envs=2)
    box = gymnasium.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32)
    assert env.observation_spaces == {"left": box, "right": box}
    assert env.action_spaces["left"] == gymnasium.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    assert env.state_spaces["left"] == gymnasium.spaces.Box(-np.inf, np.inf, (3,), dtype=np.float32)
    observations, _ = env.reset()
    assert observations["right"].dtype == torch.float32
    assert env.state()["right"].tolist() == [[0, 0.5, 0.25]] * 2 and env.state()["right"].dtype == torch.float32
    steps = [env.step({uid: torch.zeros(2, 1) for uid in env.possible_agents}) for _ in range(3)]
    assert steps[2][4][FINAL_STATES_KEY]["left"].tolist() == [[3, 0.5, 0.25]] * 2  # before the reset
    assert env.state()["left"].tolist() == [[0, 0.5, 0.25]] * 2  # after it
    assert copies[0].received[0] == {"left": np.float64, "right": np.float64}  # actions in the env's dtype
    assert _dying_batch([4]).state_spaces == {"runner": None, "dier": None}  # no state(): no state


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("short_observation", r"observation of agent 'right' \(copy 1\) has shape \(3,\), expected \(4,\)"),
        ("two_rewards", r"reward of agent 'right' \(copy 0\) has shape \(2,\), expected one number"),
        ("long_state", r"state\(\) \(copy 0\) has shape \(9,\), expected \(8,\)"),
        ("wide_mask", r"action mask of agent 'right' \(copy 0\) has shape \(4,\), expected \(3,\)"),
    ],
)
def test_pettingzoo_env_breaking_its_contract_is_one_line_naming_agent_input_and_shapes(fault, expected):
    # copy 1 breaks it at its first step, copy 0 (and every copy, for the other faults) too
    faults = iter([None if fault == "short_observation" else fault, fault])
    env = BatchedParallelEnvWrapper(lambda: faulty_env.parallel_env(next(faults)), num_envs=2)
    env.reset()
    actions = {uid: torch.zeros(2, 1, dtype=torch.long) for uid in env.possible_agents}
    with pytest.raises(ValueError, match=r"^PettingZoo env faulty_v0: " + expected) as error:
        env.step(actions)
        env.state()
    assert "\n" not in str(error.value) and "; make " in str(error.value)  # one line, with the fix


def test_pettingzoo_contract_error_reaches_the_command_line_as_one_line(tmp_path, capsys):
    argv = ["train", "--env", "pettingzoo:faulty_env", "--env-arg", "fault=two_rewards", "--out", str(tmp_path)]
    assert cli.main([*argv, "--num-envs", "2", "--timesteps", "4", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "reward of agent 'right' (copy 0) has shape (2,), expected one number" in err


def test_pettingzoo_integer_box_observations_are_float32_and_integer_box_actions_are_rounded_into_bounds(tmp_path):
    env = make_pettingzoo_env("faulty_env", num_envs=2, dtype="uint8", int_actions=True)
    box = gymnasium.spaces.Box(0.0, 255.0, (4,), dtype=np.float32)
    assert env.observation_spaces == {"left": box, "right": box}
    assert env.state_spaces["left"] == gymnasium.spaces.Box(0.0, 255.0, (8,), dtype=np.float32)
    assert env.action_spaces["left"] == gymnasium.spaces.Box(-5.0, 5.0, (2,), dtype=np.float32)
    observations, _ = env.reset()
    assert observations["right"].dtype == torch.float32 and observations["right"].tolist() == [[1.0] * 4] * 2
    env.step({uid: torch.tensor([[-7.2, 1.6], [2.4, 300.0]]) for uid in env.possible_agents})
    received = env.envs[1].received[0]["left"]
    assert received.dtype == np.int16 and received.tolist() == [2, 5]  # rounded, clipped, in the env's dtype


def test_pettingzoo_uint8_observations_train_through_the_command_line(tmp_path, capsys):
    argv = ["train", "--env", "pettingzoo:faulty_env", "--env-arg", "dtype=uint8", "--out", str(tmp_path)]
    assert cli.main([*argv, "--num-envs", "2", "--timesteps", "12", "--no-progress", "agent.rollouts=4"]) == 0
    assert len(list(tmp_path.glob("*/checkpoints/final.pt"))) == 1


def _write_package(root, name: str) -> None:
    """``name`` with ``envs/tag_v1.py`` (re-exported as ``name.tag_v1``) and ``broken_v0.py`` (a missing import)."""
    (root / name / "envs").mkdir(parents=True)
    (root / name / "__init__.py").write_text(f"from {name}.envs import tag_v1\n")
    (root / name / "envs" / "__init__.py").write_text("")
    (root / name / "envs" / "tag_v1.py").write_text("from dying_env import parallel_env  # noqa: F401\n")
    (root / name / "broken_v0.py").write_text("import no_such_dependency_xyz  # noqa: F401\n")


def test_pettingzoo_import_errors_tell_a_missing_package_from_a_wrong_module_path(tmp_path, monkeypatch):
    with pytest.raises(ImportError, match=r"no package 'no_such_zoo_xyz'; install it: pip install no_such_zoo_xyz$"):
        make_pettingzoo_env("no_such_zoo_xyz.tag_v1")
    _write_package(tmp_path / "site", "zoo_xyz")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert make_pettingzoo_env("zoo_xyz.tag_v1", num_envs=1).possible_agents == ["runner", "dier"]  # a re-export
    with pytest.raises(ImportError, match=r"^package 'zoo_xyz' is installed but has no module 'zoo_xyz.envs.tag_v2'; "):
        make_pettingzoo_env("zoo_xyz.envs.tag_v2")
    with pytest.raises(ImportError, match=r"did you mean zoo_xyz.envs.tag_v1\?$"):
        make_pettingzoo_env("zoo_xyz.tag_v2")
    with pytest.raises(ImportError, match=r"'zoo_xyz.broken_v0'.*install it: pip install no_such_dependency_xyz$"):
        make_pettingzoo_env("zoo_xyz.broken_v0")


def test_missing_gymnasium_robotics_is_one_clear_error(monkeypatch):
    import importlib.util

    from skrl_marl_ext.envs import make_env

    real = importlib.util.find_spec
    hidden = lambda name, *a: None if name == "gymnasium_robotics" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hidden)
    with pytest.raises(ImportError, match=r"pip install 'skrl-marl-ext\[mamujoco\]'"):
        make_env("mamujoco:HalfCheetah-2x3", num_envs=1)


def test_mpe_misspelled_module_names_the_right_one():
    pytest.importorskip("mpe2")
    with pytest.raises(ImportError, match=r"^package 'mpe2' is installed .* did you mean mpe2.simple_spread_v3"):
        make_pettingzoo_env("mpe2.simple_sprad_v3")


def test_mpe_simple_spread_and_speaker_listener():
    pytest.importorskip("mpe2")
    env = make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=3, seed=0, N=3, max_cycles=4)
    observations, _ = env.reset()
    assert {u: tuple(o.shape) for u, o in observations.items()} == {f"agent_{i}": (3, 18) for i in range(3)}
    assert env.state()["agent_0"].shape == (3, 54) and env.state_spaces["agent_0"].shape == (54,)
    ends = [env.step({u: torch.zeros(3, 1, dtype=torch.long) for u in env.possible_agents})[3] for _ in range(5)]
    assert [e["agent_1"].view(-1).tolist() for e in ends] == [[False] * 3] * 3 + [[True] * 3, [False] * 3]

    env = make_pettingzoo_env("mpe2.simple_speaker_listener_v4", num_envs=2, seed=0, continuous_actions=True)
    observations, _ = env.reset()
    assert observations["speaker_0"].shape == (2, 3) and observations["listener_0"].shape == (2, 11)
    assert env.action_spaces["listener_0"].shape == (5,)
    out = env.step({u: torch.full((2, env.action_spaces[u].shape[0]), 0.5) for u in env.possible_agents})
    assert out[1]["listener_0"].shape == (2, 1) and env.state()["listener_0"].shape == (2, 14)


def test_mpe_trains_with_ippo_and_num_envs_above_one():
    pytest.importorskip("mpe2")
    env = EpisodeRecorder(make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=4, seed=0, N=2, max_cycles=10))
    shared = {
        "policy": CategoricalMLP(
            observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0")
        ),
        "value": ValueMLP(observation_space=env.observation_space("agent_0"), input="observations"),
    }
    agent = IPPO(
        possible_agents=env.possible_agents,
        models={uid: shared for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg={"rollouts": 10, "experiment": QUIET},
    )
    before = [p.clone() for p in shared["policy"].parameters()]
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 30, "disable_progressbar": True, "headless": True}
    ).train()
    assert len(env.episodes) == 12  # 4 copies x 3 episodes of 10 steps
    assert any(not torch.equal(a, b) for a, b in zip(before, shared["policy"].parameters(), strict=True))


# ------------------------------------------------------------------------------------------------ Isaac Lab


class DirectMARLStandIn(SpreadEnv):
    """What a DirectMARLEnv shows skrl: the SpreadEnv, behind ``unwrapped`` like a gymnasium-registered env."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cfg = object()  # Isaac Lab envs carry a cfg; skrl's wrapper ignores it


def test_isaaclab_path_detects_multi_agent_and_mappo_learns():
    env = wrap_env(DirectMARLStandIn(num_envs=64, num_agents=2, seed=0), wrapper="isaaclab")
    assert isinstance(env, IsaacLabMultiAgentWrapper)
    assert env.state_spaces["agent_0"].shape == (8,)
    shared = {
        "policy": GaussianMLP(
            observation_space=env.observation_space("agent_0"),
            action_space=env.action_space("agent_0"),
            initial_log_std=-0.5,
        ),
        "value": ValueMLP(observation_space=env.observation_space("agent_0"), state_space=env.state_space("agent_0")),
    }
    recorder = EpisodeRecorder(env)
    agent = MAPPO(
        possible_agents=env.possible_agents,
        models={uid: shared for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg={"rollouts": 25, "mini_batches": 2, "learning_rate": 3e-3, "experiment": QUIET},
    )
    SequentialTrainer(
        env=recorder, agents=agent, cfg={"timesteps": 1000, "disable_progressbar": True, "headless": True}
    ).train()
    returns = [r["agent_0"] for _, r in recorder.episodes]
    first, last = np.mean(returns[:64]), np.mean(returns[-64:])
    # module docstring of spread.py: random about -26, straight to the goal about -6
    assert first < -20 and last > -15 and last > first + 12, (first, last)


def test_episode_recorder_keeps_counting_through_isaaclab_cached_reset():
    # skrl's Isaac Lab wrapper resets the env only at its first reset(); a later reset() (skrl's trainers call it
    # again for evaluation) returns the last observations and the episode goes on
    env = EpisodeRecorder(wrap_env(SpreadEnv(num_envs=2, num_agents=2, episode_length=4, seed=0), wrapper="isaaclab"))
    env.reset()
    total = torch.zeros(2)
    for step in range(4):
        if step == 2:
            env.reset()
        _, rewards, *_ = env.step({u: torch.zeros(2, 2) for u in env.possible_agents})
        total += rewards["agent_0"].view(-1)
    assert [r["agent_0"] for _, r in env.episodes] == pytest.approx(total.tolist())


def test_episode_recorder_counts_returns():
    env = EpisodeRecorder(wrap_env(SpreadEnv(num_envs=3, num_agents=2, episode_length=4, seed=0), wrapper="isaaclab"))
    env.reset()
    total = torch.zeros(3)
    for _ in range(8):
        _, rewards, *_ = env.step({u: torch.zeros(3, 2) for u in env.possible_agents})
        total += rewards["agent_0"].view(-1)
    assert [step for step, _ in env.episodes] == [4, 4, 4, 8, 8, 8]
    assert np.isclose(sum(r["agent_1"] for _, r in env.episodes), float(total.sum()), atol=1e-4)


def test_episode_recorder_keeps_the_newest_or_none_and_hands_every_episode_on():
    handed = []
    spread_env = wrap_env(SpreadEnv(num_envs=3, num_agents=2, episode_length=4, seed=0), wrapper="isaaclab")
    env = EpisodeRecorder(spread_env, keep=2, on_episodes=lambda step, returns: handed.append((step, returns)))
    env.reset()
    total = torch.zeros(3, 2)
    for _ in range(8):
        _, rewards, *_ = env.step({u: torch.zeros(3, 2) for u in env.possible_agents})
        total += torch.cat([rewards[u].view(-1, 1) for u in env.possible_agents], dim=1)
    assert [step for step, _ in handed] == [4, 8] and env.finished == 6
    assert [len(returns) for _, returns in handed] == [3, 3]
    assert np.allclose(np.sum([r for _, returns in handed for r in returns], axis=0), total.sum(dim=0), atol=1e-4)
    assert [step for step, _ in env.episodes] == [8, 8]  # the newest two
    assert env.episodes[-1][1] == dict(zip(env.possible_agents, handed[-1][1][-1], strict=True))

    none = EpisodeRecorder(wrap_env(SpreadEnv(num_envs=3, num_agents=2, episode_length=4), wrapper="isaaclab"), keep=0)
    none.reset()
    for _ in range(8):
        none.step({u: torch.zeros(3, 2) for u in none.possible_agents})
    assert none.episodes == [] and none.finished == 6
