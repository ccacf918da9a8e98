"""MASAC and HASAC checkpoints: every module round trips (temperatures, the critics' temperature, a team critic), a
resumed agent takes the gradient steps the uninterrupted one takes (HASAC's orders included), and a checkpoint of
another algorithm is refused in one line."""

import itertools

import pytest
import torch
from helpers import drive, make_maddpg, one_thread, params, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import NEVER, fix_indexes
from sac_helpers import CRITICS, HASAC, MASAC, make_sac, policy_params, temperatures
from skrl.resources.preprocessors.torch import RunningStandardScaler


def _state(module):
    return module.state_dict()


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if torch.is_tensor(a):
        return torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    return a == b


@pytest.mark.parametrize(("cls", "team", "batched"), itertools.product([MASAC, HASAC], [False, True], [True, False]))
def test_every_module_round_trips(tmp_path, cls, team, batched):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {
        "batch_size": 16,
        "learning_starts": 2,
        "batch_agent_models": batched,
        "observation_preprocessor": RunningStandardScaler,
        "state_preprocessor": RunningStandardScaler,
        "learning_rate_scheduler": torch.optim.lr_scheduler.StepLR,
        "learning_rate_scheduler_kwargs": {"step_size": 3, "gamma": 0.5},
    }
    agent = drive(make_sac(env, cfg, cls=cls, team=team), env, 8)
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = make_sac(env, cfg, cls=cls, team=team)
    fresh.load(path)
    expected = {
        "policy",
        *CRITICS,
        "policy_optimizer",
        "critic_optimizer",
        "policy_scheduler",
        "critic_scheduler",
        "temperature",
        "temperature_optimizer",
        "critic_temperature",
        "critic_temperature_optimizer",
        "observation_preprocessor",
        "state_preprocessor",
        "scaler",
        "progress",
    }
    for uid in env.possible_agents:
        modules, loaded = agent.checkpoint_modules[uid], fresh.checkpoint_modules[uid]
        assert set(modules) == set(loaded) == expected
        for name in expected:
            assert _same(_state(modules[name]), _state(loaded[name])), name
    assert temperatures(agent) == temperatures(fresh)
    assert all(t != agent.cfg.initial_temperature for t in temperatures(agent).values())
    assert fresh.progress.gradient_steps == agent.progress.gradient_steps == 12
    if cls is HASAC:
        assert fresh.progress.order_seed == agent.progress.order_seed
    drive(fresh, env, 3)  # and it trains on


@pytest.mark.parametrize(("cls", "team"), itertools.product([MASAC, HASAC], [False, True]))
def test_a_resumed_agent_takes_the_steps_of_the_uninterrupted_one(tmp_path, cls, team):
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=0)
    cfg = {"batch_size": 16, "learning_starts": NEVER, "gradient_steps": 1, "checkpoint_replay": True}
    torch.manual_seed(0)
    agent = drive(make_sac(env, cfg, cls=cls, team=team), env, 6)
    fix_indexes(agent)
    indexes = agent.sample_indexes()
    for _ in range(2):
        agent.update(timestep=0, timesteps=1, uid="agent_0")
    middle = str(tmp_path / "middle.pt")
    agent.save(middle)
    rng_middle = torch.get_rng_state()
    for _ in range(2):
        agent.update(timestep=0, timesteps=1, uid="agent_0")

    torch.manual_seed(123)  # another agent, other initial weights: everything comes from the file
    resumed = make_sac(env, cfg, cls=cls, team=team)
    resumed.load(middle)
    resumed.sample_indexes = lambda: indexes
    torch.set_rng_state(rng_middle)
    for _ in range(2):
        resumed.update(timestep=0, timesteps=1, uid="agent_0")
    for uid, p in policy_params(agent).items():
        assert torch.equal(p, policy_params(resumed)[uid])
    for uid in env.possible_agents:
        for role in CRITICS:
            assert torch.equal(params(agent.models[uid][role]), params(resumed.models[uid][role]))
    assert temperatures(agent) == temperatures(resumed)


def test_a_maddpg_checkpoint_is_refused_in_one_line(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    path = str(tmp_path / "maddpg.pt")
    make_maddpg(env, {}).save(path)
    with pytest.raises(ValueError, match="load a checkpoint of the same algorithm") as error:
        make_sac(env).load(path)
    assert "\n" not in str(error.value)
