"""skrl's ``GaussianMixin(clip_actions=True)`` trains on the log-probability of the *clipped* action: the agents warn
once at construction, and ``log_prob_of_unclipped_actions`` trains on the unclipped sample while the env receives the
clipped action (skrl_marl_ext/models/clipping.py)."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from helpers import drive, make_agent, make_models, one_thread, spread  # noqa: F401
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

from skrl_marl_ext.algorithms.mappo import OnPolicyAgent
from skrl_marl_ext.envs.spread import SpreadEnv


def _warnings(**cfg):
    env = spread(num_envs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_agent(env, models=make_models(env, clip_actions=cfg.pop("clip_actions")), cfg=cfg)
    return [str(w.message) for w in caught if "clip" in str(w.message)]


def test_a_policy_that_clips_its_samples_gets_one_warning_naming_the_cost_and_the_option():
    (message,) = _warnings(clip_actions=True)
    assert "agent_0" in message and "agent_2" in message
    assert "clipped action" in message and "log_prob_of_unclipped_actions=True" in message
    assert _warnings(clip_actions=True, log_prob_of_unclipped_actions=True) == []
    assert _warnings(clip_actions=False) == []


class LossSpy:
    def __init__(self, monkeypatch):
        self.calls = []
        original = OnPolicyAgent.ppo_loss

        def spy(**kwargs):
            self.calls.append({k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)})
            return original(**kwargs)

        monkeypatch.setattr(OnPolicyAgent, "ppo_loss", staticmethod(spy))


def _one_step(monkeypatch, *, unclipped, batched=False):
    """One act and one update (one mini-batch) of agents with models of their own whose policy clips its samples
    (log std 1: most samples leave the box); the env's actions, the policy's distribution at the step, the loss."""
    torch.manual_seed(0)
    env = spread(num_envs=16)
    cfg = {"rollouts": 1, "learning_epochs": 1, "mini_batches": 1, "mini_batch_order": "sequential"}
    cfg["batch_agent_models"] = batched
    cfg["log_prob_of_unclipped_actions"] = unclipped
    models = make_models(env, clip_actions=True, initial_log_std=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = make_agent(env, models=models, cfg=cfg)
    spy = LossSpy(monkeypatch)
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    states = env.state()
    actions, outputs = agent.act(obs, states, timestep=0, timesteps=1)
    next_obs, rewards, terminated, truncated, infos = env.step(actions)
    agent.record_transition(
        observations=obs,
        states=states,
        actions=actions,
        rewards=rewards,
        next_observations=next_obs,
        next_states=env.state(),
        terminated=terminated,
        truncated=truncated,
        infos=infos,
        timestep=0,
        timesteps=1,
    )
    agent.post_interaction(timestep=0, timesteps=1)
    old_log_prob = torch.cat([call["old_log_prob"] for call in spy.calls], dim=0).view(3, 16, 1)
    return env, actions, outputs, old_log_prob


def _normal(outputs, uid):
    return torch.distributions.Normal(outputs[uid]["mean_actions"], outputs[uid]["log_std"].exp())


def test_skrls_clip_trains_on_the_log_probability_of_the_clipped_action(monkeypatch):
    env, actions, outputs, old_log_prob = _one_step(monkeypatch, unclipped=False)
    for i, uid in enumerate(env.possible_agents):
        assert actions[uid].abs().max() <= 1.0 and (actions[uid].abs() == 1.0).any()
        expected = _normal(outputs, uid).log_prob(actions[uid]).sum(-1, keepdim=True)
        torch.testing.assert_close(old_log_prob[i], expected)


@pytest.mark.parametrize("batched", [False, True])
def test_the_option_trains_on_the_unclipped_sample_while_the_env_gets_the_clipped_action(monkeypatch, batched):
    env, actions, outputs, old_log_prob = _one_step(monkeypatch, unclipped=True, batched=batched)
    for i, uid in enumerate(env.possible_agents):
        action = actions[uid]
        assert action.abs().max() <= 1.0  # the env receives actions inside the box
        clipped = (action.abs() == 1.0).any(-1, keepdim=True)
        assert clipped.sum() >= 4
        normal = _normal(outputs, uid)
        # the log-probability act returned is the one the update uses (of the stored sample)
        torch.testing.assert_close(old_log_prob[i], outputs[uid]["log_prob"])
        of_clipped = normal.log_prob(action).sum(-1, keepdim=True)
        # where nothing was clipped it is the action's own; where the sample left the box, the density of the sample
        # (farther from the mean than the bound) is below the density at the bound
        torch.testing.assert_close(old_log_prob[i][~clipped], of_clipped[~clipped])
        assert (old_log_prob[i][clipped] < of_clipped[clipped] - 1e-4).all()


def test_the_option_is_refused_unless_a_bool():
    with pytest.raises(ValueError, match="log_prob_of_unclipped_actions"):
        make_agent(spread(num_envs=2), cfg={"log_prob_of_unclipped_actions": 1})


# ---------------------------------------------------------------- learning


def _narrow_spread(seed):
    """Spread with a Box(-0.5, 0.5) action space (twice the step size: the same top speed), where the policy's clip
    binds for most samples of a fresh policy (std 1)."""
    raw = SpreadEnv(num_envs=32, num_agents=2, step_size=0.2, seed=seed)
    raw.action_spaces = {uid: gymnasium.spaces.Box(-0.5, 0.5, (2,), dtype=np.float32) for uid in raw.possible_agents}
    return IsaacLabMultiAgentWrapper(raw)


def _deterministic_return(agent, env, steps=50):
    agent.enable_training_mode(False)
    obs, _ = env.reset()
    total = 0.0
    with torch.no_grad():
        for _ in range(steps):
            _, outputs = agent.act(obs, env.state(), timestep=0, timesteps=1)
            actions = {uid: outputs["mean_actions"][uid].clamp(-0.5, 0.5) for uid in env.possible_agents}
            obs, rewards, _, _, _ = env.step(actions)
            total += rewards["agent_0"].mean().item()
    return total


@pytest.mark.slow
def test_training_on_the_unclipped_sample_learns_where_skrls_clip_does_not():
    returns = {}
    for unclipped in (False, True, None):  # None: the untrained policy
        torch.manual_seed(0)
        env = _narrow_spread(seed=0)
        cfg = {"rollouts": 16, "learning_epochs": 4, "log_prob_of_unclipped_actions": bool(unclipped)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = make_agent(env, models=make_models(env, shared=True, clip_actions=True), cfg=cfg)
        drive(agent, env, 1600 if unclipped is not None else 0)
        returns[unclipped] = _deterministic_return(agent, env)
    # measured (seed 0): untrained -61.4, skrl's clip -41.6, unclipped -19.1 (time-outs handled as skrl's)
    assert returns[True] > returns[None] + 25
    assert returns[True] > returns[False] + 15
