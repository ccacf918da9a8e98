"""Config fuzzing: every config field drawn by Hypothesis, runs through skrl's own SequentialTrainer.

A test asserts that the drawn keys are exactly the dataclass's fields, so a new field cannot go untested. Each run
draws the policy family (Gaussian, categorical, masked categorical), shared or per-agent models and the algorithm,
trains a few rollouts, and checks that the parameters moved and stayed finite.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import make_agent, make_maddpg, make_maddpg_models, params, spread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skrl.resources.noises.torch import GaussianNoise, OrnsteinUhlenbeckNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MADDPG_CFG, MAPPO_CFG, ValueNorm
from skrl_marl_ext.models import CategoricalMLP, GaussianMLP, ValueMLP, agent_id_space

NUM_ENVS, NUM_AGENTS = 4, 2


def _shaper(rewards, timestep, timesteps):
    return rewards * 0.5


ON_POLICY_FIELDS = {
    "experiment": st.just({"write_interval": 0, "checkpoint_interval": 0}),
    "rollouts": st.integers(2, 6),
    "learning_epochs": st.integers(1, 3),
    "mini_batches": st.integers(1, 4),
    "mini_batch_order": st.sampled_from(["shuffled", "sequential"]),
    "discount_factor": st.floats(0.0, 1.0),
    "gae_lambda": st.floats(0.0, 1.0),
    "learning_rate": st.one_of(st.floats(1e-5, 1e-2), st.tuples(st.floats(1e-5, 1e-2), st.floats(1e-5, 1e-2))),
    "learning_rate_scheduler": st.sampled_from([None, KLAdaptiveLR, torch.optim.lr_scheduler.LinearLR]),
    "learning_rate_scheduler_kwargs": st.just({}),  # filled in to fit the drawn scheduler
    "observation_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "observation_preprocessor_kwargs": st.just({}),
    "state_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "state_preprocessor_kwargs": st.just({}),
    "value_preprocessor": st.sampled_from([None, RunningStandardScaler, ValueNorm]),
    "value_preprocessor_kwargs": st.just({}),
    "grad_norm_clip": st.sampled_from([0.0, 0.5, 10.0]),
    "grad_norm_clip_mode": st.sampled_from(["joint", "separate"]),
    "optimizer_eps": st.sampled_from([None, 1e-5]),
    "advantage_standardization": st.sampled_from(["per_agent", "pooled"]),
    "log_prob_of_unclipped_actions": st.booleans(),
    "ratio_clip": st.floats(0.05, 0.5),
    "value_clip": st.sampled_from([0.0, 0.2, 1.0]),
    "entropy_loss_scale": st.sampled_from([0.0, 0.01]),
    "value_loss_scale": st.floats(0.1, 3.0),
    "kl_threshold": st.sampled_from([0.0, 0.008, 1.0]),
    "time_limit_bootstrap": st.booleans(),
    "rewards_shaper": st.sampled_from([None, _shaper]),
    "mixed_precision": st.booleans(),
    "huber_delta": st.sampled_from([0.0, 1.0, 10.0]),
    "agent_id_input": st.booleans(),
    "non_finite": st.sampled_from(["raise", "skip"]),
    "batch_agent_models": st.booleans(),
    "update_agents_at_once": st.sampled_from(["auto", 1, 2]),
    "compile": st.just(False),  # compiling takes seconds per draw; the compiled path: tests/test_compiled.py
}


def test_every_on_policy_field_is_drawn():
    assert set(ON_POLICY_FIELDS) == {f.name for f in dataclasses.fields(MAPPO_CFG)}


def _models(env, algo, family, shared, agent_id):
    n = NUM_AGENTS if shared and agent_id else 0

    def grow(space):
        return agent_id_space(space, n) if n else space

    def build(uid):
        obs_space, state_space = grow(env.observation_space(uid)), grow(env.state_space(uid))
        cls = GaussianMLP if family == "gaussian" else CategoricalMLP
        policy = cls(observation_space=obs_space, action_space=env.action_space(uid), hidden_sizes=(16,))
        value = ValueMLP(
            observation_space=obs_space,
            state_space=state_space,
            input="states" if algo == "mappo" else "observations",
            hidden_sizes=(16,),
        )
        return {"policy": policy, "value": value}

    if shared:
        models = build(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    return {uid: build(uid) for uid in env.possible_agents}


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    cfg=st.fixed_dictionaries(ON_POLICY_FIELDS),
    algo=st.sampled_from(["mappo", "ippo"]),
    family=st.sampled_from(["gaussian", "categorical", "masked"]),
    shared=st.booleans(),
)
@pytest.mark.slow
def test_on_policy_trains_with_any_config(cfg, algo, family, shared):
    cfg = dict(cfg)
    if cfg["learning_rate_scheduler"] is torch.optim.lr_scheduler.LinearLR:
        cfg["learning_rate_scheduler_kwargs"] = {"start_factor": 1.0, "end_factor": 0.5, "total_iters": 4}
    env = spread(
        num_envs=NUM_ENVS, num_agents=NUM_AGENTS, continuous=family == "gaussian", action_masks=family == "masked"
    )
    models = _models(env, algo, family, shared, cfg["agent_id_input"])
    agent = make_agent(env, algo, shared=shared, cfg=cfg, models=models)
    before = torch.cat([params(agent.policies[uid]) for uid in env.possible_agents])
    timesteps = 2 * cfg["rollouts"]
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True, "disable_progressbar": True}
    ).train()
    after = torch.cat([params(agent.policies[uid]) for uid in env.possible_agents])
    assert torch.isfinite(after).all()
    if cfg["kl_threshold"] == 0.0:  # an early stop may (rightly) skip the whole update
        assert not torch.equal(before, after)


MADDPG_FIELDS = {
    "experiment": st.just({"write_interval": 0, "checkpoint_interval": 0}),
    "gradient_steps": st.integers(1, 2),
    "n_step": st.integers(1, 4),
    "batch_size": st.integers(1, 32),
    "discount_factor": st.floats(0.0, 1.0),
    "polyak": st.floats(0.0, 1.0),
    "actor_learning_rate": st.floats(1e-5, 1e-2),
    "critic_learning_rate": st.floats(1e-5, 1e-2),
    "learning_rate_scheduler": st.sampled_from([None, torch.optim.lr_scheduler.LinearLR]),
    "learning_rate_scheduler_kwargs": st.just({}),  # filled in to fit the drawn scheduler
    "observation_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "observation_preprocessor_kwargs": st.just({}),
    "state_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "state_preprocessor_kwargs": st.just({}),
    "random_timesteps": st.integers(0, 4),
    "learning_starts": st.integers(0, 4),
    "grad_norm_clip": st.sampled_from([0.0, 0.5]),
    "exploration_noise": st.sampled_from(["none", "gaussian", "ou"]),  # instantiated per run (noises hold state)
    "exploration_initial_scale": st.floats(0.0, 1.0),
    "exploration_final_scale": st.floats(0.0, 1.0),
    "exploration_timesteps": st.sampled_from([None, 8]),
    "gumbel_temperature": st.floats(0.1, 2.0),
    "smooth_regularization_noise": st.sampled_from(["none", "gaussian"]),  # instantiated per run
    "smooth_regularization_clip": st.floats(0.0, 1.0),
    "policy_delay": st.integers(1, 3),
    "policy_regularization": st.sampled_from([0.0, None, 1e-3]),
    "time_limit_bootstrap": st.booleans(),
    "rewards_shaper": st.sampled_from([None, _shaper]),
    "mixed_precision": st.booleans(),
    "non_finite": st.sampled_from(["raise", "skip"]),
    "batch_agent_models": st.booleans(),
    "checkpoint_replay": st.booleans(),
}


def test_every_maddpg_field_is_drawn():
    assert set(MADDPG_FIELDS) == {f.name for f in dataclasses.fields(MADDPG_CFG)}


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(cfg=st.fixed_dictionaries(MADDPG_FIELDS), continuous=st.booleans(), shared=st.booleans(), twin=st.booleans())
@pytest.mark.slow
def test_maddpg_trains_with_any_config(cfg, continuous, shared, twin):
    cfg = dict(cfg)
    if cfg["learning_rate_scheduler"] is not None:
        cfg["learning_rate_scheduler_kwargs"] = {"start_factor": 1.0, "end_factor": 0.5, "total_iters": 4}
    noise = cfg["exploration_noise"]
    cfg["exploration_noise"] = {
        "none": None,
        "gaussian": GaussianNoise(mean=0.0, std=0.2, device="cpu"),
        "ou": OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2, base_scale=1.0, device="cpu"),
    }[noise]
    smooth = cfg["smooth_regularization_noise"]
    cfg["smooth_regularization_noise"] = None if smooth == "none" else GaussianNoise(mean=0.0, std=0.2, device="cpu")
    env = spread(num_envs=NUM_ENVS, num_agents=NUM_AGENTS, continuous=continuous)
    agent = make_maddpg(env, models=make_maddpg_models(env, shared=shared, twin=twin), cfg=cfg, memory_size=32)
    before = torch.cat([params(agent.models[uid]["critic"]) for uid in env.possible_agents])
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 12, "headless": True, "disable_progressbar": True}
    ).train()
    after = torch.cat([params(agent.models[uid]["critic"]) for uid in env.possible_agents])
    assert torch.isfinite(after).all()
    for uid in env.possible_agents:
        assert torch.isfinite(params(agent.models[uid]["policy"])).all()
    assert not torch.equal(before, after)  # learning starts within 12 steps whatever was drawn
