"""MADDPG learns the spread task with its default config (continuous and discrete actions)."""

import pytest
import torch
from helpers import make_maddpg, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import evaluate, train


@pytest.mark.slow
def test_learns_continuous_spread():
    # the default config; 3 agents, 16 envs, 1000 steps; the greedy team return must pass -12 (zero actions: far below)
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=3, continuous=True, seed=0)
    agent = make_maddpg(env, {}, memory_size=1000, hidden=(64, 64))
    train(env, agent, 1000)
    assert evaluate(agent, 3, continuous=True) > -12.0


@pytest.mark.slow
def test_learns_discrete_spread():
    # discrete moves (stay, +-x, +-y) through the Gumbel-softmax actor; the default config, 2 agents, 16 envs,
    # 600 steps
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=2, continuous=False, seed=0)
    agent = make_maddpg(env, {}, memory_size=1000, hidden=(64, 64))
    train(env, agent, 600)
    assert evaluate(agent, 2, continuous=False) > -12.0
