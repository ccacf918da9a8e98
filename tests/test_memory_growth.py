"""Memory does not grow with the length of a run: what the agent tracks between two TensorBoard writes is bounded
(skrl's ``write_interval: auto`` spans a hundredth of the run), and the resident memory of a ``skrl-marl train`` run
stays flat after warm-up (``benchmarks/rss_growth.py``; the recorder keeps no episode, ``episodes.csv`` gets them)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import make_agent, make_maddpg, one_thread, spread  # noqa: F401  (one_thread: autouse)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    from rss_growth import growth, measure
finally:
    sys.path.remove(str(REPO / "benchmarks"))


@pytest.mark.parametrize("algo", ["mappo", "maddpg"])
def test_tracked_values_stay_bounded_and_reduce_as_all_of_them(algo):
    env = spread(num_envs=2, num_agents=2, continuous=True)
    agent = make_maddpg(env) if algo == "maddpg" else make_agent(env, algo)
    values = np.random.default_rng(0).normal(size=200_000)
    for value in values:
        agent.track_data("Loss / Policy loss", float(value))  # skrl's API
        agent.tracking_data["Reward / Instantaneous reward (max)"].append(float(value))  # skrl's record_transition
        agent.tracking_data["Reward / Instantaneous reward (min)"].append(float(value))
    held = {tag: len(tracked) for tag, tracked in agent.tracking_data.items()}
    assert max(held.values()) <= 1024, held
    # what skrl writes at the next write: np.mean, np.max, np.min of each list
    assert np.mean(agent.tracking_data["Loss / Policy loss"]) == pytest.approx(values.mean(), abs=1e-3)
    assert np.max(agent.tracking_data["Reward / Instantaneous reward (max)"]) == values.max()
    assert np.min(agent.tracking_data["Reward / Instantaneous reward (min)"]) == values.min()
    agent.tracking_data.clear()  # as skrl's write does
    agent.track_data("Loss / Policy loss", 1.5)
    assert agent.tracking_data["Loss / Policy loss"] == [1.5]  # below the bound: every value, as skrl keeps it
