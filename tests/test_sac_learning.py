"""MASAC and HASAC learn the spread task with their default config (continuous and discrete actions)."""

import pytest
import torch
from helpers import one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import evaluate, train
from sac_helpers import HASAC, MASAC, make_sac


@pytest.mark.slow
@pytest.mark.parametrize(("cls", "team"), [(MASAC, False), (HASAC, True)])
def test_learns_continuous_spread(cls, team):
    # the default config; 3 agents, 16 envs, 1000 steps; the greedy team return must pass -12 (zero actions: -25.9)
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=3, continuous=True, seed=0)
    agent = make_sac(env, {}, cls=cls, team=team, memory_size=1000, hidden=(64, 64))
    train(env, agent, 1000)
    assert evaluate(agent, 3, continuous=True) > -12.0


@pytest.mark.slow
@pytest.mark.parametrize(("cls", "team"), [(MASAC, False), (HASAC, True)])
def test_learns_discrete_spread(cls, team):
    # discrete moves (stay, +-x, +-y) through straight-through Gumbel-softmax samples; 2 agents, 16 envs, 600 steps
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=2, continuous=False, seed=0)
    agent = make_sac(env, {}, cls=cls, team=team, memory_size=1000, hidden=(64, 64))
    train(env, agent, 600)
    assert evaluate(agent, 2, continuous=False) > -12.0
