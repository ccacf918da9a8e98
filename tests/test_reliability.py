"""Runs that resume and checkpoints that refuse to half-load.

Resuming: a run of N+M steps stopped at its checkpoint of step N is resumed in a *new process* (build the agent,
``load()`` the checkpoint, a trainer with ``timesteps`` = M); the parameters must equal an uninterrupted N+M run bit
for bit, and the checkpoints continue from N. The agent's checkpoint carries everything of the agent's (models,
optimisers, preprocessors, value normaliser, schedulers, the steps completed; MADDPG's replay with
``checkpoint_replay``); the env's state and torch's RNG belong to the caller, so the test carries them beside the
checkpoint. On-policy agents are stopped at a rollout boundary.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
import torch
from helpers import QUIET, drive, make_agent, make_maddpg, make_models, params, spread
from resume_helpers import all_params, restore_on_reset, train, train_until_checkpoint
from skrl.resources.noises.torch import OrnsteinUhlenbeckNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import ValueNorm

ROLLOUTS = 8
CFG = {
    "rollouts": ROLLOUTS,
    "learning_epochs": 2,
    "mini_batches": 2,
    "learning_rate_scheduler": KLAdaptiveLR,
    "observation_preprocessor": RunningStandardScaler,
    "state_preprocessor": RunningStandardScaler,
    "value_preprocessor": ValueNorm,
    "experiment": QUIET,
}
MADDPG_CFG = {
    "batch_size": 16,
    "gradient_steps": 1,
    "policy_delay": 2,  # the phase of the delay must carry over
    "learning_starts": 3,  # 21 gradient steps before the checkpoint: the policy delay is mid-phase
    "observation_preprocessor": RunningStandardScaler,
    "learning_rate_scheduler": torch.optim.lr_scheduler.StepLR,
    "learning_rate_scheduler_kwargs": {"step_size": 5, "gamma": 0.9},
    "checkpoint_replay": True,
    "experiment": QUIET,
}
MEMORY_SIZE = 16  # rows per env: the replay wraps around before the checkpoint
N, M = 3 * ROLLOUTS, 2 * ROLLOUTS


def _build(algo, directory=None, name="run", checkpoint_interval=ROLLOUTS, **cfg):
    """Env and agent; with ``directory`` the agent writes its checkpoints (every rollout) into ``directory/name``."""
    torch.manual_seed(0)
    experiment = dict(QUIET)
    if directory is not None:
        experiment.update(directory=str(directory), experiment_name=name, checkpoint_interval=checkpoint_interval)
    if algo == "maddpg":
        env = spread(num_envs=4, num_agents=2, seed=3, continuous=True)
        noise = OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2, base_scale=1.0)  # a noise with state
        cfg = {**MADDPG_CFG, "exploration_noise": noise, **cfg, "experiment": experiment}
        return env, make_maddpg(env, cfg=cfg, memory_size=MEMORY_SIZE)
    env = spread(num_envs=4, num_agents=2, seed=3)
    return env, make_agent(env, algo, cfg={**CFG, **cfg, "experiment": experiment})


def _resume(algo, checkpoint, extra_path, steps, directory, **cfg):
    env, agent = _build(algo, directory, name="resumed", **cfg)
    extra = torch.load(extra_path, weights_only=False)
    agent.load(checkpoint)
    restore_on_reset(env, extra["env"])
    torch.set_rng_state(extra["rng"])
    train(env, agent, steps)
    return agent


def _resume_in_new_process(algo, checkpoint, extra_path, steps, directory, result_path):
    torch.set_num_threads(1)
    agent = _resume(algo, checkpoint, extra_path, steps, directory)
    torch.save(all_params(agent), result_path)


def _progress(path):
    return {uid: modules["progress"]["timestep"] for uid, modules in torch.load(path, weights_only=True).items()}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["mappo", "ippo", "maddpg"])
def test_resume_in_a_new_process_equals_an_uninterrupted_run(algo, tmp_path):
    torch.set_num_threads(1)
    env, agent = _build(algo)
    train(env, agent, N + M)
    uninterrupted = all_params(agent)

    env, agent = _build(algo, tmp_path, name="first")
    extra = tmp_path / "extra.pt"
    train_until_checkpoint(env, agent, N + M, stop_at=N, extra_path=extra)
    halfway = all_params(agent)
    checkpoint = tmp_path / "first" / "checkpoints" / f"agent_{N}.pt"
    assert set(_progress(checkpoint).values()) == {N}

    process = multiprocessing.get_context("spawn").Process(
        target=_resume_in_new_process, args=(algo, checkpoint, extra, M, tmp_path, tmp_path / "resumed.pt")
    )
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    resumed = torch.load(tmp_path / "resumed.pt")

    assert not torch.equal(halfway, uninterrupted)  # the last M steps did train
    assert torch.equal(resumed, uninterrupted)
    # the resumed trainer ran M steps from 0; the agent's checkpoints went on from N
    names = sorted(os.listdir(tmp_path / "resumed" / "checkpoints"))
    assert names == sorted(f"agent_{t}.pt" for t in range(N + ROLLOUTS, N + M + 1, ROLLOUTS))
    assert set(_progress(tmp_path / "resumed" / "checkpoints" / f"agent_{N + M}.pt").values()) == {N + M}

    if algo == "maddpg":  # the replay is what makes it equal: the same checkpoint without it resumes differently
        modules = torch.load(checkpoint, weights_only=True)
        for uid in modules:
            del modules[uid]["replay"]
        torch.save(modules, tmp_path / "no_replay.pt")
        agent = _resume(algo, tmp_path / "no_replay.pt", extra, M, tmp_path / "other", checkpoint_replay=False)
        assert not torch.equal(all_params(agent), uninterrupted)


def test_resume_needs_the_optimiser_state(tmp_path):
    """The equality above is not free: dropping the optimiser's state from the checkpoint breaks it."""
    env, agent = _build("mappo")
    train(env, agent, 2 * ROLLOUTS)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    fresh_env, fresh = _build("mappo")
    fresh.load(path)
    for group, loaded in zip(agent.groups, fresh.groups, strict=True):
        assert torch.equal(params(group.policy), params(loaded.policy))
        a, b = group.optimizer.state_dict()["state"], loaded.optimizer.state_dict()["state"]
        assert a.keys() == b.keys() and all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)
        assert [s.state_dict() for s in loaded.schedulers] == [s.state_dict() for s in group.schedulers]
    for uid in agent.possible_agents:
        for name in ("observation_preprocessor", "state_preprocessor", "value_preprocessor"):
            a, b = agent.checkpoint_modules[uid][name].state_dict(), fresh.checkpoint_modules[uid][name].state_dict()
            assert all(torch.equal(a[k], b[k]) for k in a), (uid, name)


def test_checkpoint_of_other_agents_is_refused(tmp_path):
    env, agent = _build("mappo")
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    bigger = spread(num_envs=4, num_agents=3, seed=3)
    other = make_agent(bigger, "mappo", cfg=dict(CFG))
    with pytest.raises(ValueError, match=r"missing: \['agent_2'\]"):
        other.load(path)


def test_checkpoint_of_other_model_shape_is_refused(tmp_path):
    env, agent = _build("mappo")
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    wider = make_agent(env, "mappo", cfg=dict(CFG), models=make_models(env, "mappo", hidden=(48, 48)))
    with pytest.raises(ValueError, match=r"'agent_0' module 'policy' does not fit"):
        wider.load(path)


def test_checkpoint_of_other_configuration_is_refused(tmp_path):
    env, agent = _build("mappo")
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    plain = make_agent(env, "mappo", cfg={"experiment": QUIET})  # no preprocessors, no scheduler
    with pytest.raises(ValueError, match="expects"):
        plain.load(path)


def test_inf_gradient_with_mixed_precision_skips_the_step():
    """An inf gradient (injected by a hook) makes the GradScaler skip every step: parameters stay put and finite."""
    env = spread(num_envs=4, num_agents=2)
    agent = make_agent(
        env, "mappo", cfg={"rollouts": 4, "mini_batches": 2, "mixed_precision": True, "experiment": QUIET}
    )
    policy = agent.policies["agent_0"]
    before = params(policy)
    first = agent.group_of["agent_0"].trainable[0]  # the tensor the optimiser steps (stacked for batched agents)
    first.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    scale = agent.scaler.get_scale()
    drive(agent, env, 4)
    after = params(policy)
    assert torch.isfinite(after).all()
    assert torch.equal(before, after)
    assert agent.scaler.get_scale() < scale  # the scaler saw the infs and backed off


def test_without_the_injected_inf_the_same_run_moves_the_parameters():
    env = spread(num_envs=4, num_agents=2)
    agent = make_agent(
        env, "mappo", cfg={"rollouts": 4, "mini_batches": 2, "mixed_precision": True, "experiment": QUIET}
    )
    before = params(agent.policies["agent_0"])
    drive(agent, env, 4)
    assert not torch.equal(before, params(agent.policies["agent_0"]))


@pytest.mark.parametrize("continuous", [True, False])
def test_maddpg_same_seed_gives_bitwise_identical_training(continuous):
    def run():
        torch.manual_seed(5)
        env = spread(num_envs=4, num_agents=2, continuous=continuous, seed=5)
        agent = make_maddpg(env, cfg={"batch_size": 16, "random_timesteps": 4})
        train(env, agent, 24)
        return all_params(agent)

    first, second = run(), run()
    assert torch.equal(first, second)


# ---------------------------------------------------------------- NaN / inf at run time


def _poison(env, *, step, uid, key, env_index=2):
    """Make the env's ``step``-th step return NaN in ``key`` ("rewards" or "observations") of agent ``uid``."""
    original, count = env.step, {"n": 0}

    def poisoned_step(actions):
        obs, rewards, terminated, truncated, infos = original(actions)
        if count["n"] == step:
            target = dict(rewards if key == "rewards" else obs)
            target[uid] = target[uid].clone()
            target[uid][env_index] = float("nan")
            obs, rewards = (obs, target) if key == "rewards" else (target, rewards)
        count["n"] += 1
        return obs, rewards, terminated, truncated, infos

    env.step = poisoned_step


def _agent(algo, env, **cfg):
    if algo == "maddpg":
        return make_maddpg(env, cfg={"batch_size": 8, **cfg})
    return make_agent(env, algo, cfg={"rollouts": 4, "mini_batches": 2, "experiment": QUIET, **cfg})


@pytest.mark.parametrize("key", ["rewards", "observations"])
@pytest.mark.parametrize("algo", ["mappo", "ippo", "maddpg"])
def test_non_finite_input_is_refused_naming_agent_and_tensor(algo, key):
    env = spread(num_envs=4, num_agents=2)
    _poison(env, step=1, uid="agent_1", key=key)
    agent = _agent(algo, env)
    with pytest.raises(ValueError, match=rf"non-finite \w*{key} .*agent 'agent_1'"):
        drive(agent, env, 8)


@pytest.mark.parametrize("algo", ["mappo", "ippo", "maddpg"])
def test_non_finite_input_is_skipped_counted_and_never_reaches_the_parameters(algo):
    env = spread(num_envs=4, num_agents=2)
    _poison(env, step=1, uid="agent_1", key="rewards")
    _poison(env, step=2, uid="agent_0", key="observations")
    agent = _agent(algo, env, non_finite="skip")
    before = all_params(agent)
    drive(agent, env, 8)
    after = all_params(agent)
    assert torch.isfinite(after).all()
    assert not torch.equal(before, after)
    skipped = [v for k, values in agent.tracking_data.items() if "Non-finite" in k for v in values]
    assert skipped and skipped[-1] >= 2


@pytest.mark.parametrize("non_finite", ["skip", "raise"])
def test_a_nan_observation_never_reaches_the_input_statistics(non_finite):
    # the statistics take in the rollout's observations at the update: after the NaN rows were refused (nothing
    # changes) or skipped (masked out), so one bad step cannot poison the scaler for the rest of the run
    env = spread(num_envs=4, num_agents=2)
    _poison(env, step=1, uid="agent_0", key="observations")
    agent = _agent("mappo", env, non_finite=non_finite, observation_preprocessor=RunningStandardScaler)
    finite_rows, act = [], agent.act

    def counting_act(observations, states, **kwargs):
        finite_rows.append(int(torch.isfinite(observations["agent_0"]).all(dim=-1).sum()))
        return act(observations, states, **kwargs)

    agent.act = counting_act
    if non_finite == "raise":
        with pytest.raises(ValueError, match="non-finite observations"):
            drive(agent, env, 4)
    else:
        drive(agent, env, 8)
    for group in agent.groups:
        scaler = group.observation_preprocessor
        assert torch.isfinite(scaler.running_mean).all() and torch.isfinite(scaler.running_variance).all()
    # agent_0's scaler took in exactly the finite rows it acted on (the NaN action spreads NaN through that env), or,
    # refused, nothing (its prior count of 1)
    assert sum(finite_rows) < 4 * len(finite_rows)
    expected = 1 if non_finite == "raise" else 1 + sum(finite_rows)
    assert float(agent.checkpoint_modules["agent_0"]["observation_preprocessor"].current_count) == expected


@pytest.mark.parametrize("load_first", [True, False], ids=["load-then-trainer", "trainer-then-load"])
def test_auto_checkpoint_interval_spans_the_whole_resumed_run(load_first, tmp_path):
    """skrl's "auto" interval (a tenth of the run) counts the steps done before a resume, whether the checkpoint is
    loaded before the trainer is built or after (Isaac Lab's order)."""
    n = 10
    env, agent = _build("mappo", tmp_path, name="first", checkpoint_interval="auto")
    train(env, agent, 2 * n)  # "auto": every 2 * n / 10 steps
    assert (tmp_path / "first" / "checkpoints" / f"agent_{n}.pt").is_file()

    env, agent = _build("mappo", tmp_path, name="resumed", checkpoint_interval="auto")
    cfg = {"timesteps": n, "headless": True, "disable_progressbar": True}
    if load_first:
        agent.load(tmp_path / "first" / "checkpoints" / f"agent_{n}.pt")
        trainer = SequentialTrainer(env=env, agents=agent, cfg=cfg)
    else:
        trainer = SequentialTrainer(env=env, agents=agent, cfg=cfg)
        agent.load(tmp_path / "first" / "checkpoints" / f"agent_{n}.pt")
    trainer.train()
    names = sorted(os.listdir(tmp_path / "resumed" / "checkpoints"), key=lambda name: int(name[6:-3]))
    assert names == [f"agent_{t}.pt" for t in range(n + 2, 2 * n + 1, 2)]  # not every step: the trainer's n / 10
    # Isaac Lab's train_skrl.py ends with write_checkpoint(timestep=T) in its trainer's count: named by the run's step
    os.remove(tmp_path / "resumed" / "checkpoints" / f"agent_{2 * n}.pt")
    agent.write_checkpoint(timestep=n, timesteps=n)
    assert f"agent_{2 * n}.pt" in os.listdir(tmp_path / "resumed" / "checkpoints")
    assert f"agent_{n}.pt" not in os.listdir(tmp_path / "resumed" / "checkpoints")
