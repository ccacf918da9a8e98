"""A batched group's update in passes of some of its agents (``cfg.update_agents_at_once``): each pass's forward and
backward hold only its agents' activations, and each agent's loss and gradient are those of one pass of all of them,
so the update, its statistics and the checkpoints are the same."""

from __future__ import annotations

import contextlib
import copy
import sys
from pathlib import Path

import pytest
import torch
from helpers import QUIET, assert_same_checkpoints, lockstep, make_agent, make_models, one_thread  # noqa: F401
from skrl.resources.schedulers.torch import KLAdaptiveLR

from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.trainers import interact

ROLLOUTS = 6
BASE = {
    "rollouts": ROLLOUTS,
    "learning_epochs": 3,
    "mini_batches": 3,
    "grad_norm_clip": 0.5,
    "mini_batch_order": "sequential",  # one permutation per agent draw would differ between the two agents
    "batch_agent_models": True,
}
CASES = {
    "entropy": {"entropy_loss_scale": 0.01, "learning_rate": 3e-3},
    "kl": {
        "learning_rate": 3e-3,
        "learning_rate_scheduler": KLAdaptiveLR,
        "learning_rate_scheduler_kwargs": {"kl_threshold": 0.004},
        "kl_threshold": 0.008,
    },
}


def pair(env, cfg, at_once):
    """Two batched agents with the same models: all agents in one pass, and ``at_once`` at a time."""
    torch.manual_seed(0)
    models = make_models(env, hidden=(16, 16))
    copied = copy.deepcopy(models)  # before the first agent stacks the models' parameters
    whole = make_agent(env, cfg={**BASE, **cfg, "update_agents_at_once": 4}, models=models)
    passes = make_agent(env, cfg={**BASE, **cfg, "update_agents_at_once": at_once}, models=copied)
    assert [(g.size, g.batched) for g in whole.groups] == [(4, True)] == [(g.size, g.batched) for g in passes.groups]
    return whole, passes


def tracked(agent):
    """What the agent tracked but timings."""
    data = agent.tracking_data.items()
    return {name: torch.tensor(values, dtype=torch.float64) for name, values in data if not name.startswith("Stats /")}


@pytest.mark.parametrize("at_once", [1, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_an_update_in_passes_equals_one_pass(case, at_once):
    """Parameters, Adam state, learning rates and scheduler state within 1e-6 after each update, and the tracked
    losses and statistics; with ``kl_threshold`` some agents stop mid-epoch while others go on."""
    env = make_spread_env(num_envs=4, num_agents=4, episode_length=5)
    whole, passes = pair(env, CASES[case], at_once)
    for _ in lockstep(whole, passes, env, 3 * ROLLOUTS, rollouts=ROLLOUTS):
        assert_same_checkpoints(whole, passes, env)
    a, b = tracked(whole), tracked(passes)
    assert a.keys() == b.keys() and any(name.startswith("Loss / Policy loss") for name in a)
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=0, atol=1e-6), name


def test_a_pass_of_one_agent_holds_less_memory_at_the_update():
    """The peak of live tensor bytes of an update (``benchmarks/memory_peak.py``'s counter) with one agent per pass is
    below that of all four in one, by at least two agents' hidden activations."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        from memory_peak import LiveStorages
    finally:
        sys.path.pop(0)
    env = make_spread_env(num_envs=64, num_agents=4, episode_length=50)
    peaks = {}
    for at_once in (4, 1):
        torch.manual_seed(0)
        cfg = {**BASE, "rollouts": 8, "mini_batches": 1, "learning_epochs": 1, "update_agents_at_once": at_once}
        agent = make_agent(env, cfg=cfg, models=make_models(env, hidden=(256, 256)))
        agent.init()
        agent.enable_training_mode(True)
        obs, _ = env.reset()
        states = env.state()
        for t in range(8):  # the last step's post_interaction updates
            with LiveStorages(locate=False) if t == 7 else contextlib.nullcontext() as counter:
                step = interact(agent, env, obs, states, timestep=t, timesteps=8)
            obs, states = step.next_observations, step.next_states
        peaks[at_once] = counter.peak
    one_agent = 8 * 64 * 2 * 2 * 256 * 4  # 8 * 64 samples, two models of two 256-wide layers, float32
    assert peaks[4] - peaks[1] > 2 * one_agent, peaks
