"""Drop-in matrix: skrl's own multi-agent test grid, run with our MAPPO and IPPO through skrl's SequentialTrainer.

skrl's ``tests/multi_agents/torch/test_mappo.py`` and ``test_ippo.py`` draw a config from skrl's ranges with
Hypothesis and train on a random env, for Gaussian / MultivariateGaussian / Categorical policies, separate models or
one skrl ``shared_model`` per agent (IPPO), and symmetric (no state) or asymmetric (a state space) envs. This module
builds the models exactly as those tests do (skrl's model instantiators, a value network reading ``STATES`` when the
env has a state, else ``OBSERVATIONS``), draws from the same ranges (``ratio_clip`` 0, ``mini_batches`` above the
rollout's samples, ``value_clip`` 0..1 with a value preprocessor, all three schedulers' choices, mixed precision,
rewards shaper, time-limit bootstrap) and checks more than they do: the update ran, moved the parameters and left
them finite, and each model saw the inputs skrl's agents feed it.

skrl 2.1.1 itself needs the env to be a ``MultiAgentEnvWrapper``, and its ``random_timesteps``/``learning_starts``
keys are gone; with only those changes skrl's own two test files pass with the imports swapped to ours (checked by
hand: 15 passed, the CUDA cases skipped). Their ``check_config_keys`` compares the config's keys with the config
class's, so it is left out here: ours is a superset of skrl's (``test_config_is_a_superset_of_skrls``).
"""

from __future__ import annotations

import dataclasses
import random
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper
from skrl.memories.torch import RandomMemory
from skrl.multi_agents.torch.ippo import IPPO_CFG as SKRL_IPPO_CFG
from skrl.multi_agents.torch.mappo import MAPPO_CFG as SKRL_MAPPO_CFG
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.model_instantiators.torch import (
    categorical_model,
    deterministic_model,
    gaussian_model,
    multivariate_gaussian_model,
    shared_model,
)
from skrl.utils.spaces.torch import compute_space_size, flatten_tensorized_space, sample_space

from skrl_marl_ext import IPPO, IPPO_CFG, MAPPO, MAPPO_CFG


class RandomEnv(MultiAgentEnvWrapper):
    """skrl's test ``MultiAgentEnv``: random observations and states, rewards in [0, 1), 5% terminations and 5%
    truncations per step; the agents' actions are checked for shape."""

    def __init__(self, *, observation_spaces, state_spaces, action_spaces, num_envs, probability=0.05):
        class Raw:
            device = "cpu"

        super().__init__(Raw())
        self._spaces = (observation_spaces, state_spaces, action_spaces)
        self._num_envs, self._probability = num_envs, probability
        self._agents = sorted(observation_spaces)

    possible_agents = property(lambda self: self._agents)
    agents = property(lambda self: self._agents)
    num_envs = property(lambda self: self._num_envs)
    observation_spaces = property(lambda self: self._spaces[0])
    state_spaces = property(lambda self: self._spaces[1])
    action_spaces = property(lambda self: self._spaces[2])

    def observation_space(self, uid):
        return self._spaces[0][uid]

    def state_space(self, uid):
        return self._spaces[1][uid]

    def action_space(self, uid):
        return self._spaces[2][uid]

    def _sample(self, spaces):
        return {
            uid: None
            if space is None
            else flatten_tensorized_space(sample_space(space, batch_size=self._num_envs, backend="native"))
            for uid, space in spaces.items()
        }

    def _flags(self, values):
        return {uid: torch.tensor(values).view(self._num_envs, 1) for uid in self._agents}

    def step(self, actions):
        for uid, space in self.action_spaces.items():
            assert actions[uid].shape == (self._num_envs, compute_space_size(space, occupied_size=True))
        n = self._num_envs
        return (
            self._sample(self.observation_spaces),
            {uid: torch.tensor(np.random.random(n), dtype=torch.float32).view(n, 1) for uid in self._agents},
            self._flags(np.random.random(n) < self._probability),
            self._flags(np.random.random(n) < self._probability),
            {},
        )

    def state(self):
        return self._sample(self.state_spaces)

    def reset(self):
        return self._sample(self.observation_spaces), {}

    def render(self, *args, **kwargs):
        return None

    def close(self):
        pass


FAMILIES = {
    "GaussianMixin": gaussian_model,
    "MultivariateGaussianMixin": multivariate_gaussian_model,
    "CategoricalMixin": categorical_model,
}


def _shaper(rewards, *args, **kwargs):
    return 0.5 * rewards


# skrl's test ranges (rollouts, epochs and mini-batches 1..5 with 1..5 envs: mini-batches may exceed the samples)
CFG = {
    "num_envs": st.integers(1, 5),
    "num_agents": st.integers(2, 4),
    "rollouts": st.integers(1, 5),
    "learning_epochs": st.integers(1, 3),
    "mini_batches": st.integers(1, 5),
    "discount_factor": st.floats(0, 1),
    "gae_lambda": st.floats(0, 1),
    "learning_rate": st.floats(1.0e-10, 1),
    "learning_rate_scheduler": st.sampled_from([None, KLAdaptiveLR, torch.optim.lr_scheduler.ConstantLR]),
    "scheduler_value": st.floats(0.1, 1),
    "observation_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "state_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "value_preprocessor": st.sampled_from([None, RunningStandardScaler]),
    "grad_norm_clip": st.floats(0, 1),
    "ratio_clip": st.floats(0, 1),
    "value_clip": st.floats(0, 1),
    "entropy_loss_scale": st.floats(0, 1),
    "value_loss_scale": st.floats(0, 1),
    "kl_threshold": st.floats(0, 1),
    "rewards_shaper": st.sampled_from([None, _shaper]),
    "time_limit_bootstrap": st.booleans(),
    "mixed_precision": st.booleans(),
}

GRID = [("mappo", family, True, True) for family in FAMILIES] + [
    ("ippo", family, separate, asymmetric)
    for family in FAMILIES
    for separate in (True, False)
    for asymmetric in (True, False)
]


def _build(draw: dict, algo: str, family: str, separate: bool, asymmetric: bool):
    n = draw["num_agents"]
    uids = [f"agent_{i}" for i in range(n)]
    observation_spaces = {uid: gymnasium.spaces.Box(low=-1, high=1, shape=(n,)) for uid in uids}
    state_spaces = {uid: gymnasium.spaces.Box(low=-1, high=1, shape=(6,)) if asymmetric else None for uid in uids}
    if family == "CategoricalMixin":
        action_spaces = {uid: gymnasium.spaces.Discrete(n - 1) for uid in uids}
    else:
        action_spaces = {uid: gymnasium.spaces.Box(low=-1, high=1, shape=(n - 1,)) for uid in uids}
    env = RandomEnv(
        observation_spaces=observation_spaces,
        state_spaces=state_spaces,
        action_spaces=action_spaces,
        num_envs=draw["num_envs"],
    )
    policy_net = [{"name": "net", "input": "OBSERVATIONS", "layers": [5], "activations": "relu"}]
    value_net = [
        {"name": "net", "input": "STATES" if asymmetric else "OBSERVATIONS", "layers": [5], "activations": "relu"}
    ]
    models = {}
    for uid in uids:
        spaces = dict(
            observation_space=env.observation_space(uid),
            state_space=env.state_space(uid),
            action_space=env.action_space(uid),
            device="cpu",
        )
        if separate:
            models[uid] = {
                "policy": FAMILIES[family](**spaces, network=policy_net, output="ACTIONS"),
                "value": deterministic_model(**spaces, network=value_net, output="ONE"),
            }
        else:
            model = shared_model(
                **spaces,
                structure=[family, "DeterministicMixin"],
                parameters=[{"network": policy_net, "output": "ACTIONS"}, {"network": value_net, "output": "ONE"}],
                roles=["policy", "value"],
            )
            models[uid] = {"policy": model, "value": model}
    scheduler = draw["learning_rate_scheduler"]
    cfg = {
        key: draw[key]
        for key in CFG
        if key not in ("num_envs", "num_agents", "scheduler_value")
        and key in {f.name for f in dataclasses.fields(MAPPO_CFG)}
    }
    cfg.update(
        learning_rate_scheduler_kwargs={
            ("kl_threshold" if scheduler is KLAdaptiveLR else "factor"): draw["scheduler_value"]
        },
        observation_preprocessor_kwargs={"size": env.observation_space(uids[0]), "device": "cpu"},
        state_preprocessor_kwargs={"size": env.state_space(uids[0]), "device": "cpu"},
        value_preprocessor_kwargs={"size": 1, "device": "cpu"},
        experiment={"write_interval": 0, "checkpoint_interval": 0},
    )
    memories = {uid: RandomMemory(memory_size=draw["rollouts"], num_envs=env.num_envs) for uid in uids}
    cls = MAPPO if algo == "mappo" else IPPO
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # mini_batches above the samples, a state preprocessor w/o state
        agent = cls(
            possible_agents=uids,
            models=models,
            memories=memories,
            observation_spaces=env.observation_spaces,
            state_spaces=env.state_spaces,
            action_spaces=env.action_spaces,
            device="cpu",
            cfg=cfg,
        )
    return env, models, agent


def _probe_inputs(model, role, seen):
    """Record the shapes of ``inputs["observations"]`` / ``inputs["states"]`` the agent gives ``model`` in ``role``."""
    act = model.act

    def recording_act(inputs, *, role=""):
        states = inputs.get("states")
        seen.add((role, inputs["observations"].shape[-1], None if states is None else states.shape[-1]))
        return act(inputs, role=role)

    model.act = recording_act


@pytest.mark.slow
@pytest.mark.parametrize("algo,family,separate,asymmetric", GRID, ids=lambda v: str(v))
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(draw=st.fixed_dictionaries(CFG))
def test_skrl_grid_trains_through_skrls_trainer(algo, family, separate, asymmetric, draw):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    env, models, agent = _build(draw, algo, family, separate, asymmetric)
    uid = env.possible_agents[0]
    seen: set = set()
    _probe_inputs(models[uid]["policy"], "policy", seen)
    if models[uid]["value"] is not models[uid]["policy"]:
        _probe_inputs(models[uid]["value"], "value", seen)
    steps = []
    scaler_step = agent.scaler.step
    agent.scaler.step = lambda optimizer, *a, **k: (steps.append(optimizer), scaler_step(optimizer, *a, **k))[1]
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg={"timesteps": 3 * draw["rollouts"], "headless": True, "disable_progressbar": True},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer.train()
    # three updates ran, each with every epoch's mini-batches (at most one per sample), for every agent's optimiser
    # (fewer when the KL early stop is on: under bf16 autocast even the first mini-batch's KL may exceed a tiny one)
    samples = draw["rollouts"] * draw["num_envs"]
    full = 3 * draw["learning_epochs"] * min(draw["mini_batches"], samples) * len(agent.groups)
    if draw["kl_threshold"]:
        assert len(steps) <= full
    else:
        assert len(steps) == full
    for model in {id(m): m for m in models[uid].values()}.values():
        assert all(torch.isfinite(p).all() for p in model.parameters()), "parameters stay finite for any skrl config"
    # what skrl feeds its models: the agent's observation and the env's state (or None), to policy and value alike
    obs_size = env.observation_space(uid).shape[0]
    state_size = 6 if asymmetric else None
    assert {(role, o, s) for role, o, s in seen} <= {("policy", obs_size, state_size), ("value", obs_size, state_size)}
    assert ("value", obs_size, state_size) in seen or not separate


@pytest.mark.parametrize("ours,skrls", [(MAPPO_CFG, SKRL_MAPPO_CFG), (IPPO_CFG, SKRL_IPPO_CFG)])
def test_config_is_a_superset_of_skrls(ours, skrls):
    theirs = {f.name: f.default for f in dataclasses.fields(skrls) if f.default is not dataclasses.MISSING}
    mine = {f.name: f.default for f in dataclasses.fields(ours) if f.default is not dataclasses.MISSING}
    assert set(theirs) <= {f.name for f in dataclasses.fields(ours)}
    # the same defaults, so a skrl script behaves the same
    assert {k: v for k, v in theirs.items() if k in mine} == {k: mine[k] for k in theirs if k in mine}


def _train_spread(impl: str, algo: str, cfg: dict, timesteps: int) -> torch.Tensor:
    """Train skrl's or our MAPPO/IPPO on the built-in spread env (no episode ends within the run) from seed 0."""
    from skrl.multi_agents.torch.ippo import IPPO as SkrlIPPO
    from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO

    from skrl_marl_ext.envs import make_spread_env
    from skrl_marl_ext.models import GaussianMLP, ValueMLP

    torch.manual_seed(0)
    env = make_spread_env(num_envs=8, num_agents=3, episode_length=10**6, seed=0)
    uids = env.possible_agents
    models = {
        uid: {
            "policy": GaussianMLP(
                observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=(32, 32)
            ),
            "value": ValueMLP(
                observation_space=env.observation_space(uid),
                state_space=env.state_space(uid),
                input="states" if algo == "mappo" else "observations",
                hidden_sizes=(32, 32),
            ),
        }
        for uid in uids
    }
    cfg = {**cfg, "experiment": {"write_interval": 0, "checkpoint_interval": 0}}
    if impl == "skrl":  # skrl 2.1.1 needs per-agent *_kwargs dicts (its expand() refuses {}) and memories
        for key in [k for k in cfg if k.endswith("_kwargs")] + ["observation_preprocessor_kwargs"]:
            cfg[key] = {uid: cfg.get(key, {}) for uid in uids}
        for key in ("state_preprocessor_kwargs", "value_preprocessor_kwargs", "learning_rate_scheduler_kwargs"):
            cfg.setdefault(key, {uid: {} for uid in uids})
        cls = SkrlMAPPO if algo == "mappo" else SkrlIPPO
        memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in uids}
    else:
        cls, memories = (MAPPO if algo == "mappo" else IPPO), None
    agent = cls(
        possible_agents=uids,
        models=models,
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device="cpu",
        cfg=cfg,
    )
    torch.manual_seed(1)
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True, "disable_progressbar": True}
    ).train()
    return torch.cat([p.detach().reshape(-1) for uid in uids for m in models[uid].values() for p in m.parameters()])


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_where_skrl_is_right_ours_trains_to_skrls_parameters(algo):
    # same seed, models and data: acting, GAE, mini-batch draws, losses, gradient clipping, Adam and KLAdaptiveLR agree
    # with skrl 2.1.1's per-agent loop to float rounding over several updates. (Where skrl is wrong they differ by
    # design: truncations, value clipping, value and input preprocessor statistics; see tests/test_value_pipeline.py.)
    cfg = {
        "rollouts": 16,
        "learning_epochs": 2,
        "mini_batches": 4,
        "learning_rate": 1e-3,
        "learning_rate_scheduler": KLAdaptiveLR,
        "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
        "entropy_loss_scale": 0.01,
        "grad_norm_clip": 0.5,
        "value_clip": 0.0,
        "value_loss_scale": 2.5,
    }
    skrls, ours = _train_spread("skrl", algo, cfg, 64), _train_spread("ours", algo, cfg, 64)
    initial = _train_spread("ours", algo, cfg, 1)  # no update yet
    assert (ours - initial).abs().max() > 1e-2  # four updates moved the parameters
    torch.testing.assert_close(ours, skrls, rtol=0, atol=1e-4)


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_the_kl_early_stop_trains_to_skrls_parameters(algo):
    # skrl 2.1.1's early stop: a mini-batch whose KL passes kl_threshold ends that epoch's mini-batch loop only (the
    # next epoch tries again), and its KL counts in the epoch's mean that KLAdaptiveLR reads. The threshold stops
    # epochs part-way here (stopping the whole update, or leaving that KL out, ends elsewhere)
    cfg = {
        "rollouts": 16,
        "learning_epochs": 2,
        "mini_batches": 4,
        "learning_rate": 1e-3,
        "learning_rate_scheduler": KLAdaptiveLR,
        "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
        "kl_threshold": 0.004,
        "grad_norm_clip": 0.5,
        "value_clip": 0.0,
    }
    skrls, ours = _train_spread("skrl", algo, cfg, 64), _train_spread("ours", algo, cfg, 64)
    torch.testing.assert_close(ours, skrls, rtol=0, atol=1e-4)
