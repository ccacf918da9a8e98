"""The numbers the agents hand their math, checked where the agent calls it.

A correct GAE fed the wrong next value, or a correct value loss fed the wrong anchor, passes every function test. Each
test here drives MAPPO/IPPO through its lifecycle, records the arguments of a math function at its call site in
``skrl_marl_ext.algorithms.mappo`` (``compute_gae``, ``ppo_loss``) and checks them against values worked out by hand:

- the time-limit bootstrap of a truncated step is ``gamma * V(final observation)`` when the env gives it, and
  ``gamma * V(s_t)`` when it does not (never the value of the next episode's first observation);
- with a value normaliser and value clipping, the clip anchor is the critic's own output at collection time, so the
  first mini-batch clips nothing and every sample's critic gradient is non-zero;
- input statistics are refreshed before the epochs, as skrl does, and the importance ratio keeps the behaviour
  policy's log-probabilities (without input statistics the first mini-batch's ratio is exactly 1);
- under mixed precision the values handed to GAE are the fp32 denormalisation of the critic's output.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from helpers import QUIET, drive, make_agent, make_models, spread
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper
from skrl.models.torch import DeterministicMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext import IPPO, MAPPO, ValueNorm
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent
from skrl_marl_ext.keys import FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY
from skrl_marl_ext.models import GaussianMLP


class Recorder:
    """Wraps a function of the update's math (``OnPolicyAgent.compute_gae``, ``.ppo_loss``), keeping the keyword
    arguments (and results) of every call."""

    def __init__(self, monkeypatch, name: str, hook=None):
        self.calls = []
        self.function = getattr(OnPolicyAgent, name)
        self.hook = hook
        monkeypatch.setattr(OnPolicyAgent, name, staticmethod(self))

    def __call__(self, **kwargs):
        if self.hook is not None:
            self.hook(len(self.calls), kwargs)
        result = self.function(**kwargs)
        self.calls.append((kwargs, result))
        return result


# ---------------------------------------------------------------- (a) time-limit bootstrap


class CounterEnv(MultiAgentEnvWrapper):
    """Two agents whose observation is the step within the episode, ``[t]``; episodes are truncated after
    ``length`` steps and reset in place to ``[0]``. The state is the observations side by side. Rewards are 1.

    So at the truncated step ``t = length - 1``: ``s_t = length - 1``, the final observation is ``length`` and the
    next (reset) observation is ``0``: with ``V(x) = x`` three different bootstraps.
    """

    def __init__(self, *, num_envs=3, length=3, final_observations=True):
        class Raw:
            device = "cpu"

        super().__init__(Raw())
        self._n, self.length, self.final_observations = num_envs, length, final_observations
        self._agents = ["a", "b"]
        self._t = torch.zeros(num_envs, 1)

    possible_agents = property(lambda self: self._agents)
    agents = property(lambda self: self._agents)
    num_envs = property(lambda self: self._n)
    observation_spaces = property(lambda self: {u: gymnasium.spaces.Box(-np.inf, np.inf, (1,)) for u in self._agents})
    state_spaces = property(lambda self: {u: gymnasium.spaces.Box(-np.inf, np.inf, (2,)) for u in self._agents})
    action_spaces = property(lambda self: {u: gymnasium.spaces.Box(-1, 1, (1,)) for u in self._agents})

    def observation_space(self, uid):
        return self.observation_spaces[uid]

    def state_space(self, uid):
        return self.state_spaces[uid]

    def action_space(self, uid):
        return self.action_spaces[uid]

    def _obs(self, t):
        return {u: t.clone() for u in self._agents}

    def reset(self):
        self._t = torch.zeros(self._n, 1)
        return self._obs(self._t), {}

    def step(self, actions):
        self._t = self._t + 1
        truncated = self._t >= self.length
        infos = {}
        if self.final_observations and bool(truncated.any()):
            infos[FINAL_OBSERVATIONS_KEY] = self._obs(self._t)
            infos[FINAL_STATES_KEY] = {u: torch.cat([self._t, self._t], dim=-1) for u in self._agents}
        self._t = torch.where(truncated, 0.0, self._t)
        flags = {u: truncated.clone() for u in self._agents}
        zeros = {u: torch.zeros_like(truncated) for u in self._agents}
        return self._obs(self._t), {u: torch.ones(self._n, 1) for u in self._agents}, zeros, flags, infos

    def state(self):
        return {u: torch.cat([self._t, self._t], dim=-1) for u in self._agents}

    def render(self, *args, **kwargs):
        return None

    def close(self):
        pass


class Identity(DeterministicMixin, Model):
    """``V = w * inputs[key][:, :1]`` with one parameter ``w`` (1 at the start)."""

    def __init__(self, observation_space, state_space, key):
        Model.__init__(self, observation_space=observation_space, state_space=state_space, action_space=None)
        DeterministicMixin.__init__(self)
        self.key = key
        self.w = torch.nn.Parameter(torch.ones(()))

    def compute(self, inputs, role=""):
        return self.w * inputs[self.key][:, :1], {}


@pytest.mark.parametrize("final_observations", [True, False], ids=["final-given", "final-missing"])
@pytest.mark.parametrize("algo,key", [("mappo", "states"), ("ippo", "observations")])
def test_truncated_step_bootstraps_from_the_final_observation_or_from_s_t(monkeypatch, final_observations, algo, key):
    env = CounterEnv(length=3, final_observations=final_observations)
    models = {
        u: {
            "policy": GaussianMLP(observation_space=env.observation_space(u), action_space=env.action_space(u)),
            "value": Identity(env.observation_space(u), env.state_space(u), key),
        }
        for u in env.possible_agents
    }
    cls = MAPPO if algo == "mappo" else IPPO
    gamma = 0.9
    agent = cls(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg={"rollouts": 4, "discount_factor": gamma, "time_limit_bootstrap": True, "experiment": QUIET},
    )
    gae = Recorder(monkeypatch, "compute_gae")
    drive(agent, env, 4)  # steps t = 0, 1, 2 (truncated), 0
    kwargs, (_, returns) = gae.calls[0]
    truncated = kwargs["truncated"][:, 0, :, 0]  # (T, N), agent "a"
    assert truncated[2].all() and not truncated[[0, 1, 3]].any()
    # V(s_t) = 2, V(final) = 3, V(reset observation) = 0: each gives another return at the truncated step
    bootstrap = 3.0 if final_observations else 2.0
    torch.testing.assert_close(returns[2], torch.full_like(returns[2], 1.0 + gamma * bootstrap))
    torch.testing.assert_close(kwargs["next_values"][2], torch.full_like(returns[2], bootstrap))
    # elsewhere the next value is the next step's: V(1) at t = 0
    torch.testing.assert_close(kwargs["next_values"][0], torch.full_like(returns[0], 1.0))


def model_inputs(group, obs, states):
    """What the agent feeds a group's models: inputs ``(G, N, size)`` (a shared state ``(1, N, size)``) through the
    group's preprocessors, ``(G, N, size)``."""
    obs = group.preprocess("observation", obs, agent_dim=0)
    states = group.preprocess("state", states, agent_dim=0).expand(group.size, -1, -1)
    return obs, states


def test_without_time_limit_bootstrap_a_truncated_step_runs_on_into_the_next_episode_as_skrls(monkeypatch):
    env = CounterEnv(length=3)
    models = {
        u: {
            "policy": GaussianMLP(observation_space=env.observation_space(u), action_space=env.action_space(u)),
            "value": Identity(env.observation_space(u), env.state_space(u), "states"),
        }
        for u in env.possible_agents
    }
    gamma, lam = 0.9, 0.8
    cfg = {"rollouts": 4, "discount_factor": gamma, "gae_lambda": lam, "time_limit_bootstrap": False}
    agent = MAPPO(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg={**cfg, "experiment": QUIET},
    )
    gae = Recorder(monkeypatch, "compute_gae")
    drive(agent, env, 4)  # steps t = 0, 1, 2 (truncated), 0; V(s) = t, the value after the last step V(1) = 1
    _, (_, returns) = gae.calls[0]
    # skrl 2.1.1: the truncated step bootstraps from the reset observation's value (0) and carries step 3's
    # advantage (1 + gamma * 1)
    torch.testing.assert_close(returns[2], torch.full_like(returns[2], 1.0 + gamma * lam * (1.0 + gamma)))


@pytest.mark.parametrize("make", ["spread", "vmas", "pettingzoo"])
def test_envs_hand_the_final_observation_and_state_of_an_ended_episode(make):
    if make == "spread":
        env = spread(num_envs=4, episode_length=3, seed=0)
    elif make == "vmas":
        pytest.importorskip("vmas")
        from skrl_marl_ext.envs import make_vmas_env

        env = make_vmas_env("balance", num_envs=4, max_steps=3, seed=0)
    else:
        pytest.importorskip("mpe2")
        from skrl_marl_ext.envs import make_pettingzoo_env

        env = make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=2, seed=0, N=2, max_cycles=3)
    observations, _ = env.reset()
    uids = env.possible_agents
    for step in range(3):
        before = env.state()
        actions = {
            u: torch.zeros(env.num_envs, env.action_space(u).shape[0] if env.action_space(u).shape else 1) for u in uids
        }
        if make == "pettingzoo":
            actions = {u: torch.zeros(env.num_envs, 1, dtype=torch.long) for u in uids}
        next_observations, _, terminated, truncated, infos = env.step(actions)
        ended = terminated[uids[0]] | truncated[uids[0]]
        if not ended.any():
            assert FINAL_OBSERVATIONS_KEY not in infos
            continue
        assert step == 2 and ended.all()
        finals, final_states = infos[FINAL_OBSERVATIONS_KEY], infos[FINAL_STATES_KEY]
        for u in uids:
            # the episode's last observation, not the new episode's first
            assert finals[u].shape == next_observations[u].shape
            assert not torch.equal(finals[u], next_observations[u])
        state = final_states[uids[0]]
        assert state.shape == before[uids[0]].shape and not torch.equal(state, env.state()[uids[0]])
        if make == "vmas":  # the VMAS state is the observations side by side
            torch.testing.assert_close(state, torch.cat([finals[u] for u in uids], dim=-1))


# ---------------------------------------------------------------- (b) value clipping with a value normaliser


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_value_clip_anchor_is_the_critics_output_at_collection(monkeypatch, algo):
    env = spread(num_envs=16)
    clip = 0.2
    gradients = []

    def keep_gradient(call, kwargs):
        if call == 0:
            kwargs["values"].register_hook(lambda grad: gradients.append(grad.clone()))

    losses = Recorder(monkeypatch, "ppo_loss", hook=keep_gradient)
    agent = make_agent(
        env,
        algo,
        cfg={
            "rollouts": 16,
            "learning_epochs": 2,
            "mini_batches": 2,
            "value_preprocessor": ValueNorm,
            "value_clip": clip,
            "experiment": QUIET,
        },
    )
    drive(agent, env, 16)
    kwargs, _ = losses.calls[0]  # first mini-batch of the first epoch of the first update
    predicted, anchor, targets = kwargs["values"].detach(), kwargs["old_values"], kwargs["returns"]
    # nothing has stepped yet: the critic reproduces its collection-time output, so no sample is clipped
    assert ((predicted - anchor).abs() <= clip).all()
    torch.testing.assert_close(predicted, anchor, rtol=1e-5, atol=1e-5)
    # the targets are normalised (ValueNorm refreshed with this rollout's returns): about zero mean, unit variance
    assert abs(float(targets.mean())) < 0.5 and 0.3 < float(targets.std()) < 3.0
    # and every sample's critic gradient is alive (the max form picks a branch whose gradient is 2 * error)
    assert len(gradients) == 1 and (gradients[0] != 0).all()


# ---------------------------------------------------------------- (c) preprocessors: the first mini-batch is on-policy


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_without_input_statistics_the_first_mini_batch_of_every_update_has_ratio_one(monkeypatch, algo):
    env = spread(num_envs=8)
    epochs, mini_batches = 2, 2
    surrogates = Recorder(monkeypatch, "ppo_loss")
    cfg = {"rollouts": 8, "learning_epochs": epochs, "mini_batches": mini_batches, "experiment": QUIET}
    agent = make_agent(env, algo, cfg=cfg)
    drive(agent, env, 24)  # three updates
    per_update = epochs * mini_batches * len(agent.groups)
    assert len(surrogates.calls) == 3 * per_update
    for update in range(3):
        for group in range(len(agent.groups)):  # each group's first mini-batch of the update
            kwargs, _ = surrogates.calls[update * per_update + group * epochs * mini_batches]
            ratio = torch.exp(kwargs["log_prob"].detach() - kwargs["old_log_prob"])
            # one by one, not bitwise: the mini-batch's matmul may take another kernel than the rollout's on some CPUs;
            # statistics refreshed too early move the ratio by far more than float rounding
            assert float((ratio - 1).abs().max()) < 1e-5, (update, group, float((ratio - 1).abs().max()))


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_input_statistics_refresh_before_the_epochs_and_the_ratio_keeps_the_behaviour_policy(monkeypatch, algo):
    # at the first mini-batch of an update: the scalers have taken in the whole rollout (not before, not after),
    # the new log-probabilities are the pre-step policy's on the rollout normalised with the refreshed statistics,
    # and the old ones are exactly those the acting policy gave (so the ratio shows the refresh's effect)
    env = spread(num_envs=8)
    T, N = 8, 8
    acted, checked = [], []
    agent = make_agent(
        env,
        algo,
        cfg={
            "rollouts": T,
            "learning_epochs": 1,
            "mini_batches": 1,
            "mini_batch_order": "sequential",  # the rollout's samples in order
            "observation_preprocessor": RunningStandardScaler,
            "state_preprocessor": RunningStandardScaler,
            "experiment": QUIET,
        },
    )
    act = agent.act

    def recording_act(observations, states, **kwargs):
        actions, outputs = act(observations, states, **kwargs)
        acted.append({uid: outputs[uid]["log_prob"].clone() for uid in env.possible_agents})
        return actions, outputs

    def check(call, kwargs):
        group = agent.groups[call % len(agent.groups)]
        update = call // len(agent.groups)
        b = group.rollout
        for uid in group.uids:
            scaler = agent.checkpoint_modules[uid]["observation_preprocessor"]  # the agent's own (or its group's)
            assert int(scaler.current_count) == 1 + (update + 1) * T * N
        obs, st = model_inputs(group, b.flat("observations"), b.flat("states"))
        with torch.no_grad():
            inputs = {"observations": obs, "states": st, "taken_actions": b.flat("actions")}
            _, outputs = group.act("policy", inputs)
        torch.testing.assert_close(kwargs["log_prob"].detach().reshape(-1), outputs["log_prob"].reshape(-1))
        behaviour = torch.stack([acted[update * T + t][uid] for t in range(T) for uid in group.uids], dim=0)
        old = kwargs["old_log_prob"].view(group.size, T, N).transpose(0, 1).reshape(-1)
        assert torch.equal(old, behaviour.reshape(-1))
        checked.append(float((kwargs["log_prob"].detach() - kwargs["old_log_prob"]).abs().max()))

    agent.act = recording_act
    Recorder(monkeypatch, "ppo_loss", hook=check)
    drive(agent, env, 2 * T)
    assert len(checked) == 2 * len(agent.groups)
    assert max(checked) > 0  # the refresh moved the policy: the ratio is not 1, and it is clipped as any change


# ---------------------------------------------------------------- (d) mixed precision keeps the value path in fp32


@pytest.mark.parametrize("preprocessor", [ValueNorm, RunningStandardScaler])
def test_mixed_precision_values_are_the_fp32_denormalisation_of_the_critics_output(monkeypatch, preprocessor):
    env = spread(num_envs=8)
    gae = Recorder(monkeypatch, "compute_gae")
    agent = make_agent(
        env,
        cfg={"rollouts": 4, "mixed_precision": True, "value_preprocessor": preprocessor, "experiment": QUIET},
    )
    # statistics far from the identity: mean 1000, std 50 (bf16 holds ~3 significant digits: 1000 +- 4)
    mean, std = 1000.0, 50.0
    for group in agent.groups:
        vp = group.value_preprocessor  # agents with models of their own: every agent's statistics at once
        if preprocessor is ValueNorm:
            vp.running_mean.fill_(mean)
            vp.running_mean_sq.fill_(mean * mean + std * std)
            vp.debiasing_term.fill_(1.0)
        else:
            vp.running_mean.fill_(mean)
            vp.running_variance.fill_(std * std)
    recomputed = {}

    def recompute_critic(call, kwargs):
        # the critic's output for every stored step, recomputed under autocast as act() computed it (same batch shape)
        group = agent.groups[call]
        b = group.rollout.tensors
        rows = []
        with torch.no_grad(), torch.autocast(device_type="cpu", enabled=True):
            for t in range(b["observations"].shape[0]):
                obs, st = model_inputs(group, b["observations"][t], b["states"][t])
                raw, _ = group.act("value", {"observations": obs, "states": st})
                rows.append(raw.float().view(b["values"][t].shape))
        recomputed[call] = torch.stack(rows)

    gae.hook = recompute_critic
    drive(agent, env, 4)
    assert len(gae.calls) == len(agent.groups)
    for i in range(len(agent.groups)):
        kwargs, _ = gae.calls[i]
        assert kwargs["values"].dtype == torch.float32
        raw = recomputed[i].double()
        # bf16-valued critic output, denormalised in fp32: exact to fp32 rounding (bf16 denormalisation: off by ~4)
        reference = (raw.clamp(-5, 5) if preprocessor is RunningStandardScaler else raw) * std + mean
        assert not torch.equal(reference.bfloat16().double(), reference)  # the check has teeth at this scale
        torch.testing.assert_close(kwargs["values"].double(), reference, rtol=2e-7, atol=0.0)


def test_value_models_get_the_env_state_under_states_in_ippo_as_in_skrl():
    # skrl 2.1.1's IPPO hands the value model the env's state under "states" (the model chooses what it reads)
    env = spread(num_envs=4)
    seen = []

    class Probe(DeterministicMixin, Model):
        def __init__(self):
            Model.__init__(
                self,
                observation_space=env.observation_space("agent_0"),
                state_space=env.state_space("agent_0"),
                action_space=None,
            )
            DeterministicMixin.__init__(self)
            self.net = torch.nn.Linear(12, 1)

        def compute(self, inputs, role=""):
            seen.append((inputs["observations"].shape[-1], inputs["states"].shape[-1]))
            return self.net(inputs["states"]), {}

    models = make_models(env, "ippo")
    for uid in env.possible_agents:
        models[uid]["value"] = Probe()
    agent = make_agent(env, "ippo", models=models, cfg={"rollouts": 4, "experiment": QUIET})
    drive(agent, env, 8)
    obs_size, state_size = env.observation_space("agent_0").shape[0], env.state_space("agent_0").shape[0]
    assert seen and set(seen) == {(obs_size, state_size)}
