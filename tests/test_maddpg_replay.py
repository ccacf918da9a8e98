"""MADDPG's joint replay: one index set for every agent's memory, rows as skrl's memories store them, one storage per
width, NaN/inf refused or skipped, memories shared by two agents."""

import gymnasium
import pytest
import torch
from helpers import drive, make_maddpg, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import NEVER, spy, step
from skrl.memories.torch import RandomMemory

from skrl_marl_ext.storage.replay import JointReplay

UIDS = ["agent_0", "agent_1", "agent_2"]
WIDTHS = {"observations": 4, "rewards": 1, "agent_mask": 1}


def _consistent(states, obs_size):
    """Rows of the concatenated observations that are one joint transition of the spread env.

    Agent 0 sees its position p0 and p1 - p0; agent 1 sees its position p1: they agree only within one (step, env).
    """
    obs0, obs1 = states[:, :obs_size], states[:, obs_size : 2 * obs_size]
    return torch.isclose(obs0[:, 0:2] + obs0[:, 4:6], obs1[:, 0:2], atol=1e-5).all(dim=-1)


def _memories(size, num_envs=3, **kwargs):
    return {uid: RandomMemory(memory_size=size, num_envs=num_envs, **kwargs) for uid in UIDS}


def _replay(memories):
    """A replay of observations, rewards and agent masks (bool) over ``memories``."""
    replay = JointReplay(memories, owner="test", possible_agents=UIDS)
    for name, width in WIDTHS.items():
        dtype = torch.bool if name == "agent_mask" else torch.float32
        replay.create_tensor(name, sizes=dict.fromkeys(UIDS, width), dtype=dtype)
    return replay


def _rows(generator, num_envs=3):
    return {
        uid: {
            "observations": torch.randn(num_envs, 4, generator=generator),
            "rewards": torch.randn(num_envs, 1, generator=generator),
            "agent_mask": torch.rand(num_envs, 1, generator=generator) < 0.8,
        }
        for uid in UIDS
    }


def test_one_index_set_is_drawn_for_every_memory():
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=0)
    # the loop: agent_0's critic alone sees the sampled rows (batched, its compute would run inside torch.vmap)
    cfg = {"batch_size": 128, "learning_starts": NEVER, "gradient_steps": 1, "batch_agent_models": False}
    agent = make_maddpg(env, cfg, env_states=False)
    drive(agent, env, 40)
    obs_size = env.observation_space("agent_0").shape[0]

    seen = spy(agent.models["agent_0"]["critic"], "states")
    step(agent)  # a public gradient step: the critic reads the joint observation of the sampled rows
    assert seen and all(_consistent(states.detach(), obs_size).all() for states in seen)

    # the check has teeth: memories sampled independently break the joint transitions
    independent = {
        uid: agent.memories[uid].sample(["observations"], batch_size=128)[0][0] for uid in env.possible_agents
    }
    mixed = torch.cat([independent[uid] for uid in env.possible_agents], dim=-1)
    assert not _consistent(mixed, obs_size).all()


def test_replay_rows_match_skrls_add_samples_and_live_in_one_storage_per_width():
    """After wrapping around, every agent's memory holds what skrl's own add_samples of the same rows gives, with the
    same indexes and flags; its tensors are slices of one storage per (name, width); a sampled batch is skrl's rows."""
    memories, reference = _memories(5), _memories(5)
    replay = _replay(memories)
    for uid in UIDS:
        for name, width in WIDTHS.items():
            reference[uid].create_tensor(name, size=width, dtype=memories[uid].get_tensor_by_name(name).dtype)
    generator = torch.Generator().manual_seed(0)
    for _ in range(7):  # 5 rows, then 2 overwritten
        rows = _rows(generator)
        replay.add(rows, skip_non_finite=False)
        for uid in UIDS:
            reference[uid].add_samples(**rows[uid])
    for uid in UIDS:
        memory, expected = memories[uid], reference[uid]
        assert (memory.memory_index, memory.env_index, memory.filled) == (2, 0, True)
        assert (expected.memory_index, expected.env_index, expected.filled) == (2, 0, True)
        for name in WIDTHS:
            torch.testing.assert_close(memory.tensors[name], expected.tensors[name], rtol=0, atol=0)
            assert memory.tensors_view[name].data_ptr() == memory.tensors[name].data_ptr()
    for name, parts in replay.parts.items():
        assert len(parts) == 1 and parts[0][0] == UIDS  # equal widths: one storage
        for k, uid in enumerate(UIDS):
            assert memories[uid].tensors[name].data_ptr() == parts[0][1][k].data_ptr()
    indexes = torch.tensor([0, 4, 14, 7])
    batch = replay.sample(indexes, device="cpu")
    for uid in UIDS:
        for name in WIDTHS:
            torch.testing.assert_close(batch[uid][name], reference[uid].tensors_view[name][indexes], rtol=0, atol=0)


def test_agents_of_other_widths_get_storages_of_their_own():
    """Agents whose rows differ in width (a bigger observation here) are stored apart; rows stay aligned."""
    env = spread(num_envs=2, num_agents=3, continuous=True, seed=3)
    spaces = dict(env.observation_spaces)
    spaces["agent_2"] = gymnasium.spaces.Box(-float("inf"), float("inf"), (spaces["agent_2"].shape[0] + 3,))
    replay = JointReplay(_memories(4, num_envs=2), owner="test", possible_agents=UIDS)
    replay.create_tensor("observations", sizes={u: s.shape[0] for u, s in spaces.items()}, dtype=torch.float32)
    assert [uids for uids, _ in replay.parts["observations"]] == [["agent_0", "agent_1"], ["agent_2"]]
    rows = {u: {"observations": torch.full((2, s.shape[0]), float(i))} for i, (u, s) in enumerate(spaces.items())}
    replay.add(rows, skip_non_finite=False)
    batch = replay.sample(torch.tensor([1, 0]), device="cpu")
    for i, uid in enumerate(UIDS):
        assert batch[uid]["observations"].shape == (2, spaces[uid].shape[0])
        assert (batch[uid]["observations"] == i).all()


def test_non_finite_rows_are_refused_unstored_or_stored_zeroed_and_masked():
    """Refused: an error naming the agent, the tensor and the env, and nothing stored. Skipped: the row is stored with
    its NaN/inf zeroed and its agent mask False, the others as given, and the caller's tensors are left alone."""
    generator = torch.Generator().manual_seed(1)
    replay = _replay(_memories(4))
    replay.add(_rows(generator), skip_non_finite=False)
    rows = _rows(generator)
    rows["agent_1"]["rewards"][2] = float("nan")
    rows["agent_2"]["observations"][0, 1] = float("inf")
    given = {uid: {name: row.clone() for name, row in rows[uid].items()} for uid in UIDS}
    with pytest.raises(ValueError, match=r"non-finite observations \(NaN or inf\) for agent 'agent_2' in env 0"):
        replay.add(rows, skip_non_finite=False)
    assert len(replay) == 3 and replay.memories["agent_0"].memory_index == 1

    skipped = replay.add(rows, skip_non_finite=True)
    assert int(skipped) == 2 and len(replay) == 6
    for uid in UIDS:
        for name in WIDTHS:
            torch.testing.assert_close(rows[uid][name], given[uid][name], equal_nan=True)  # untouched
        stored = {name: replay.memories[uid].tensors[name][1] for name in WIDTHS}
        bad = {"agent_1": 2, "agent_2": 0}.get(uid)
        for env in range(3):
            if env == bad:
                assert (
                    torch.isfinite(stored["observations"][env]).all() and torch.isfinite(stored["rewards"][env]).all()
                )
                assert not stored["agent_mask"][env]
            else:
                assert torch.equal(stored["observations"][env], given[uid]["observations"][env])
                assert torch.equal(stored["agent_mask"][env], given[uid]["agent_mask"][env])


def test_two_replays_on_the_same_memories_share_their_rows():
    """A second agent built on the same memories (as when comparing two agents on one replay) reads what the first
    writes: the storage is found again, not replaced."""
    memories = _memories(4)
    first, second = _replay(memories), _replay(memories)
    first.add(_rows(torch.Generator().manual_seed(2)), skip_non_finite=False)
    assert len(second) == 3
    indexes = torch.tensor([0, 2])
    for uid in UIDS:
        for name in WIDTHS:
            assert torch.equal(
                second.sample(indexes, device="cpu")[uid][name], first.sample(indexes, device="cpu")[uid][name]
            )
        assert first.parts["observations"][0][1] is second.parts["observations"][0][1]


def test_a_full_memory_is_exported_as_skrls_add_samples_exports_it(tmp_path):
    memories = _memories(2, export=True, export_directory=str(tmp_path))
    replay = _replay(memories)
    generator = torch.Generator().manual_seed(3)
    replay.add(_rows(generator), skip_non_finite=False)
    assert not (tmp_path / "memories").exists()
    replay.add(_rows(generator), skip_non_finite=False)
    exported = sorted((tmp_path / "memories").iterdir())
    assert len(exported) == len(UIDS)
    saved = torch.load(exported[0], weights_only=True)
    assert set(saved) == set(WIDTHS) and saved["observations"].shape == (2, 3, 4)
