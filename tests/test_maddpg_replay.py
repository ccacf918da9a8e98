"""MADDPG's joint replay: one index set for every agent's memory, rows as skrl's memories store them, one storage per
width."""

import gymnasium
import torch
from helpers import drive, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import NEVER, make_agent, make_memories, spy, step
from skrl.memories.torch import RandomMemory

from skrl_marl_ext.storage.replay import JointReplay


def _consistent(states, obs_size):
    """Rows of the concatenated observations that are one joint transition of the spread env.

    Agent 0 sees its position p0 and p1 - p0; agent 1 sees its position p1: they agree only within one (step, env).
    """
    obs0, obs1 = states[:, :obs_size], states[:, obs_size : 2 * obs_size]
    return torch.isclose(obs0[:, 0:2] + obs0[:, 4:6], obs1[:, 0:2], atol=1e-5).all(dim=-1)


def test_one_index_set_is_drawn_for_every_memory():
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=0)
    # the loop: agent_0's critic alone sees the sampled rows (batched, its compute would run inside torch.vmap)
    cfg = {"batch_size": 128, "learning_starts": NEVER, "gradient_steps": 1, "batch_agent_models": False}
    agent = make_agent(env, cfg, env_states=False)
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
    """The memories' tensors are slices of one storage tensor per (name, width); after wrapping around, every agent's
    memory holds what skrl's own add_samples of the same rows gives, with the same indexes and flags."""
    env = spread(num_envs=3, num_agents=3, continuous=True, seed=2)
    agent = make_agent(env, {"learning_starts": NEVER}, memories=make_memories(env, size=5))
    reference = {uid: RandomMemory(memory_size=5, num_envs=3) for uid in env.possible_agents}
    for uid in env.possible_agents:
        for name in agent.replay.names[uid]:
            tensor = agent.memories[uid].tensors[name]
            reference[uid].create_tensor(name, size=tensor.shape[-1], dtype=tensor.dtype)
    add = agent.replay.add

    def add_both(rows):
        for uid in env.possible_agents:
            reference[uid].add_samples(**rows[uid])
        add(rows)

    agent.replay.add = add_both
    drive(agent, env, 7)  # 5 rows, then 2 overwritten
    for uid in env.possible_agents:
        memory, expected = agent.memories[uid], reference[uid]
        assert (memory.memory_index, memory.env_index, memory.filled) == (2, 0, True)
        assert (expected.memory_index, expected.env_index, expected.filled) == (2, 0, True)
        for name in agent.replay.names[uid]:
            torch.testing.assert_close(memory.tensors[name], expected.tensors[name], rtol=0, atol=0)
            assert memory.tensors_view[name].data_ptr() == memory.tensors[name].data_ptr()
    for name, parts in agent.replay.parts.items():
        assert len(parts) == 1 and parts[0][0] == env.possible_agents  # spread agents: equal widths, one storage
        for k, uid in enumerate(env.possible_agents):
            assert agent.memories[uid].tensors[name].data_ptr() == parts[0][1][k].data_ptr()
    indexes = torch.tensor([0, 4, 14, 7])
    batch = agent.sample_batch(indexes)
    for uid in env.possible_agents:
        for name in agent.replay.names[uid]:
            torch.testing.assert_close(batch[uid][name], reference[uid].tensors_view[name][indexes], rtol=0, atol=0)


def test_agents_of_other_widths_get_storages_of_their_own():
    """Agents whose rows differ in width (a bigger observation here) are stored apart; rows stay aligned."""
    env = spread(num_envs=2, num_agents=3, continuous=True, seed=3)
    spaces = dict(env.observation_spaces)
    spaces["agent_2"] = gymnasium.spaces.Box(-float("inf"), float("inf"), (spaces["agent_2"].shape[0] + 3,))
    replay = JointReplay(make_memories(env, size=4), owner="test", possible_agents=env.possible_agents)
    replay.create_tensor("observations", sizes={u: s.shape[0] for u, s in spaces.items()}, dtype=torch.float32)
    assert [uids for uids, _ in replay.parts["observations"]] == [["agent_0", "agent_1"], ["agent_2"]]
    rows = {u: {"observations": torch.full((2, s.shape[0]), float(i))} for i, (u, s) in enumerate(spaces.items())}
    replay.add(rows)
    batch = replay.sample(torch.tensor([1, 0]), device="cpu")
    for i, uid in enumerate(env.possible_agents):
        assert batch[uid]["observations"].shape == (2, spaces[uid].shape[0])
        assert (batch[uid]["observations"] == i).all()
