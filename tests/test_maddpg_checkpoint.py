"""MADDPG checkpoints: round trips of every module (twin critics, action masks), resume with progress and schedules,
the replay kept in a checkpoint."""

import pytest
import torch
from helpers import drive, make_maddpg, one_thread, params, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import MASKED_CFG, RandomMaskSpread, train
from skrl.resources.noises.torch import OrnsteinUhlenbeckNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer


def test_checkpoint_round_trip(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {
        "gradient_steps": 1,
        "actor_learning_rate": 1e-3,
        "batch_size": 16,
        "mixed_precision": True,
        "observation_preprocessor": RunningStandardScaler,
        "state_preprocessor": RunningStandardScaler,
        "learning_rate_scheduler": torch.optim.lr_scheduler.StepLR,
        "learning_rate_scheduler_kwargs": {"step_size": 3, "gamma": 0.5},
        "exploration_noise": OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2, base_scale=1.0),
    }
    agent = drive(make_maddpg(env, cfg), env, 10)
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = make_maddpg(env, cfg)
    fresh.load(path)
    for uid in env.possible_agents:
        modules, loaded = agent.checkpoint_modules[uid], fresh.checkpoint_modules[uid]
        assert (
            set(modules)
            == set(loaded)
            >= {
                "policy",
                "target_policy",
                "critic",
                "target_critic",
                "policy_optimizer",
                "critic_optimizer",
                "policy_scheduler",
                "critic_scheduler",
                "observation_preprocessor",
                "state_preprocessor",
                "scaler",
            }
        )
        for role in ("policy", "target_policy", "critic", "target_critic"):
            assert torch.equal(params(modules[role]), params(loaded[role]))
        for name in ("policy_optimizer", "critic_optimizer"):
            a, b = modules[name].state_dict(), loaded[name].state_dict()
            assert a["param_groups"] == b["param_groups"]
            for key, state in a["state"].items():
                for k, v in state.items():
                    assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["state"][key][k]))
        assert modules["policy_scheduler"].state_dict() == loaded["policy_scheduler"].state_dict()
        for name in ("observation_preprocessor", "state_preprocessor"):
            for k, v in modules[name].state_dict().items():
                assert torch.equal(v, loaded[name].state_dict()[k])
    assert agent.scaler.state_dict()["_growth_tracker"] == 10  # ten unscaled-finite steps were counted
    assert str(agent.scaler.state_dict()) == str(fresh.scaler.state_dict())
    rates = agent.groups[0].policy_optimizer.learning_rates()  # each agent's
    assert rates.tolist() == [1e-3 / 8] * len(rates)  # stepped 10 times, halved every 3
    # the loaded agent goes on training
    drive(fresh, env, 3)


def test_twin_critics_round_trip_a_checkpoint(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {"gradient_steps": 1, "batch_size": 16, "learning_starts": 2}
    agent = drive(make_maddpg(env, cfg, twin=True), env, 8)
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = make_maddpg(env, cfg, twin=True)
    fresh.load(path)
    for uid in env.possible_agents:
        modules, loaded = agent.checkpoint_modules[uid], fresh.checkpoint_modules[uid]
        for role in ("critic_2", "target_critic_2"):
            assert torch.equal(params(modules[role]), params(loaded[role]))
        # one critic optimiser over both critics: its moments cover the second critic's parameters too
        moments = modules["critic_optimizer"].state_dict()["state"]
        size = sum(p.numel() for r in ("critic", "critic_2") for p in agent.models[uid][r].parameters())
        assert sum(s["exp_avg"].numel() for s in moments.values()) == size
        loaded_moments = loaded["critic_optimizer"].state_dict()["state"]
        for k, state in moments.items():
            assert torch.equal(state["exp_avg"], loaded_moments[k]["exp_avg"])


@pytest.mark.parametrize("dict_obs", [False, True])
def test_masked_maddpg_trains_through_the_trainer_and_round_trips_a_checkpoint(dict_obs, tmp_path):
    env = RandomMaskSpread(num_envs=8, dict_obs=dict_obs)
    agent = make_maddpg(env, MASKED_CFG)
    before = params(agent.models["agent_0"]["policy"])
    train(env, agent, 12)
    assert not torch.equal(params(agent.models["agent_0"]["policy"]), before)
    assert set(agent.tracking_data) >= {"Loss / Policy loss (agent_1)", "Loss / Critic loss (agent_0)"}
    assert env.violations == 0 and len(agent.memories["agent_0"]) == 12 * 8
    path = str(tmp_path / "masked.pt")
    agent.save(path)
    fresh = make_maddpg(env, MASKED_CFG)
    fresh.load(path)
    for uid in env.possible_agents:
        for role in ("policy", "target_policy", "critic", "target_critic"):
            assert torch.equal(params(fresh.models[uid][role]), params(agent.models[uid][role]))
    train(env, fresh, 6)  # the loaded agent goes on training, still within the masks
    assert env.violations == 0


# ---------------------------------------------------------------- resume: progress, replay, schedules


def test_a_loaded_agent_continues_its_schedules_from_the_saved_step(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {"batch_size": 8, "exploration_final_scale": 0.1, "exploration_timesteps": 40, "learning_starts": 10}
    agent = drive(make_maddpg(env, cfg), env, 20)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    saved = torch.load(path, weights_only=True)
    assert {uid: saved[uid]["progress"] for uid in saved} == dict.fromkeys(
        env.possible_agents,
        {
            "timestep": 20,
            "gradient_steps": 2 * (20 - 10),
        },
    )

    fresh = make_maddpg(env, cfg)
    fresh.load(str(path))
    before = params(fresh.models["agent_0"]["critic"])
    drive(fresh, env, 1)  # the trainer's timestep 0 is the run's step 20
    assert fresh.tracking_data["Exploration / Exploration noise scale"] == [pytest.approx(1.0 + (0.1 - 1.0) * 20 / 40)]
    assert not torch.equal(before, params(fresh.models["agent_0"]["critic"]))  # past learning_starts: it learned
    fresh.save(str(path))
    assert torch.load(path, weights_only=True)["agent_1"]["progress"]["timestep"] == 21


def _replay_bytes_per_row(env):
    """Bytes of one replay row of every agent (docs/resume.md): 4 per float column (observations, next observations,
    actions, rewards, states, next states), 1 per bool column (terminated, truncated, agent mask)."""
    total = 0
    for uid in env.possible_agents:
        obs, state = env.observation_space(uid).shape[0], env.state_space(uid).shape[0]
        floats = 2 * obs + env.action_space(uid).shape[0] + 1 + 2 * state
        total += 4 * floats + 3
    return total


def test_checkpoint_replay_size_is_the_documented_formula(tmp_path):
    env = spread(num_envs=32, num_agents=2, continuous=True)
    memory_size, sizes = 64, {}
    for keep in (False, True):
        cfg = {"batch_size": 8, "gradient_steps": 1, "checkpoint_replay": keep}
        agent = drive(make_maddpg(env, cfg, memory_size=memory_size), env, memory_size + 2)
        agent.save(str(tmp_path / f"{keep}.pt"))
        sizes[keep] = (tmp_path / f"{keep}.pt").stat().st_size
    expected = _replay_bytes_per_row(env) * memory_size * env.num_envs  # the memories have wrapped: all rows
    assert sizes[True] - sizes[False] == pytest.approx(expected, rel=0.03)


def test_checkpoint_replay_round_trips_rows_indexes_and_noise_state(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    noise = OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2, base_scale=1.0)
    cfg = {"batch_size": 8, "checkpoint_replay": True, "exploration_noise": noise, "exploration_final_scale": 1.0}
    agent = drive(make_maddpg(env, cfg, memory_size=16), env, 10)  # 10 of 16 rows written
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    fresh = make_maddpg(env, cfg, memory_size=16)
    fresh.load(str(path))
    for uid in env.possible_agents:
        a, b = agent.memories[uid], fresh.memories[uid]
        assert (len(b), b.memory_index, b.filled) == (len(a), 10, False) == (40, 10, False)
        for name, tensor in a.tensors.items():
            assert torch.equal(tensor[:10], b.tensors[name][:10]), (uid, name)
    # the noise goes on from its saved state: the same next (noisy) actions
    observations, _ = env.reset()
    actions = []
    for each in (agent, fresh):
        each.enable_training_mode(True)
        torch.manual_seed(1)
        actions.append(each.act(observations, env.state(), timestep=0, timesteps=30)[0])
    assert all(torch.equal(actions[0][uid], actions[1][uid]) for uid in env.possible_agents)


def test_best_agent_keeps_no_replay_rows_and_loads_with_an_empty_replay(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True, episode_length=5)
    experiment = {"directory": str(tmp_path), "experiment_name": "run", "write_interval": 4, "checkpoint_interval": 8}
    cfg = {"batch_size": 8, "checkpoint_replay": True, "experiment": experiment}
    agent = make_maddpg(env, cfg, memory_size=16)
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 16, "headless": True, "disable_progressbar": True}
    ).train()
    best = agent.checkpoint_best_modules["modules"]
    assert best, "a best checkpoint was kept (episodes ended, rewards were tracked)"
    assert all(t.shape[0] == 0 for uid in best for t in best[uid]["replay"]["tensors"].values())
    checkpoints = tmp_path / "run" / "checkpoints"
    fresh = make_maddpg(env, cfg, memory_size=16)
    fresh.load(str(checkpoints / "best_agent.pt"))
    assert all(len(fresh.memories[uid]) == 0 for uid in env.possible_agents)
    fresh.load(str(checkpoints / "agent_16.pt"))
    assert all(len(fresh.memories[uid]) == 16 * 4 for uid in env.possible_agents)


def test_a_replay_of_another_memory_size_is_refused(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = drive(make_maddpg(env, {"checkpoint_replay": True}, memory_size=8), env, 10)
    agent.save(str(tmp_path / "agent.pt"))
    bigger = make_maddpg(env, {"checkpoint_replay": True}, memory_size=16)
    with pytest.raises(ValueError, match="module 'replay' does not fit.*memory_size and num_envs"):
        bigger.load(str(tmp_path / "agent.pt"))
