"""MADDPG acting and recording: discrete and continuous actions, exploration noise and its schedule, random
timesteps, action masks, what ``record_transition`` stores."""

from types import SimpleNamespace

import gymnasium
import numpy as np
import pytest
import torch
from helpers import drive, make_maddpg, one_thread, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import MASKED_CFG, NEVER, ConstantNoise, RandomMaskSpread
from skrl.resources.noises.torch import GaussianNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer

SCALE_KEY = "Exploration / Exploration noise scale"


def test_discrete_actions_are_integers_sampled_in_training_and_greedy_in_evaluation():
    env = spread(num_envs=64, num_agents=2, continuous=False)
    agent = make_maddpg(env)
    agent.init()
    obs, _ = env.reset()
    agent.enable_training_mode(True)
    actions, _ = agent.act(obs, env.state(), timestep=0, timesteps=1)
    assert actions["agent_0"].shape == (64, 1) and not actions["agent_0"].is_floating_point()
    agent.enable_training_mode(False)
    greedy, outputs = agent.act(obs, env.state(), timestep=0, timesteps=1)
    logits = agent.models["agent_0"]["policy"].net(obs["agent_0"])
    assert torch.equal(greedy["agent_0"].view(-1), logits.argmax(-1))
    assert torch.equal(outputs["mean_actions"]["agent_0"], greedy["agent_0"])


def test_continuous_noise_in_training_only_clipped_and_scheduled():
    env = spread(num_envs=256, num_agents=2, continuous=True)
    cfg = {
        "exploration_noise": GaussianNoise(mean=0.0, std=2.0),
        "exploration_initial_scale": 1.0,
        "exploration_final_scale": 0.0,
        "exploration_timesteps": 100,
    }
    agent = make_maddpg(env, cfg)
    agent.init()
    obs, _ = env.reset()
    mu = agent.models["agent_0"]["policy"].act({"observations": obs["agent_0"]}, role="policy")[0]
    agent.enable_training_mode(True)
    noisy, _ = agent.act(obs, env.state(), timestep=0, timesteps=100)
    assert noisy["agent_0"].abs().max() <= 1.0 and (noisy["agent_0"].abs() == 1.0).any()  # clipped to Box(-1, 1)
    assert not torch.allclose(noisy["agent_0"], mu)
    late, _ = agent.act(obs, env.state(), timestep=100, timesteps=100)  # scale 0 at exploration_timesteps
    torch.testing.assert_close(late["agent_0"], mu)
    agent.enable_training_mode(False)
    greedy, outputs = agent.act(obs, env.state(), timestep=0, timesteps=100)
    torch.testing.assert_close(greedy["agent_0"], mu)
    assert outputs["mean_actions"]["agent_0"] is greedy["agent_0"]


def test_default_noise_anneals_over_the_first_third_of_the_run():
    """Defaults: GaussianNoise std 0.3, its factor 1 -> 0.1 over a third of the trainer's timesteps (BenchMARL's rule):
    the factor ``act`` applies (seen through a constant noise, and tracked where it is not 1) and the std it gives."""
    env = spread(num_envs=4096, num_agents=2)
    agent = make_maddpg(env, {"exploration_noise": ConstantNoise(0.01)})  # the default schedule, a known noise
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    mu = agent.models["agent_0"]["policy"].act({"observations": obs["agent_0"]}, role="policy")[0]
    inside = mu.abs() < 0.9  # away from the clipping bounds
    # float32 spacing below 1 is at most eps (1.2e-7): the act's mu may differ from this one by a few of it, and
    # mu + noise rounds once more; 8 of it lets that through and is 60 times below the smallest step of scale checked
    tolerance = 8 * torch.finfo(torch.float32).eps
    for timestep, scale in ((0, 1.0), (50, 0.55), (100, 0.1), (250, 0.1)):
        agent.tracking_data.clear()
        noisy, _ = agent.act(obs, env.state(), timestep=timestep, timesteps=300)
        added = (noisy["agent_0"] - mu)[inside]
        torch.testing.assert_close(added, torch.full_like(added, 0.01 * scale), rtol=0, atol=tolerance)
        assert agent.tracking_data.get(SCALE_KEY, []) == ([] if scale == 1.0 else [pytest.approx(scale)])
    agent = make_maddpg(env)
    agent.init()
    agent.enable_training_mode(True)
    mu = agent.models["agent_0"]["policy"].act({"observations": obs["agent_0"]}, role="policy")[0]
    for timestep, std in ((0, 0.3), (100, 0.03)):
        noisy, _ = agent.act(obs, env.state(), timestep=timestep, timesteps=300)
        inside = (noisy["agent_0"].abs() < 1.0) & (mu.abs() < 0.5)  # away from the clipping bounds
        assert (noisy["agent_0"] - mu)[inside].std().item() == pytest.approx(std, rel=0.05)


@pytest.mark.parametrize("continuous", [True, False])
def test_random_timesteps_act_uniformly_then_the_policy_acts(continuous):
    env = spread(num_envs=512, num_agents=2, continuous=continuous)
    agent = make_maddpg(env, {"random_timesteps": 5, "exploration_initial_scale": 0.0, "exploration_final_scale": 0.0})
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    policy = agent.models["agent_0"]["policy"]
    random, _ = agent.act(obs, env.state(), timestep=4, timesteps=10)
    after, _ = agent.act(obs, env.state(), timestep=5, timesteps=10)
    if continuous:
        mu = policy.act({"observations": obs["agent_0"]}, role="policy")[0]
        assert random["agent_0"].min() < -0.9 and random["agent_0"].max() > 0.9  # uniform on Box(-1, 1)
        torch.testing.assert_close(after["agent_0"], mu)
    else:
        assert set(random["agent_0"].view(-1).tolist()) == set(range(5))
        assert after["agent_0"].shape == (512, 1)


def test_random_timesteps_act_inside_half_bounded_and_unbounded_box_spaces():
    """Where a bound is infinite, random actions are the exploration noise around the point nearest 0, clipped to the
    finite bound; bounded dimensions stay uniform. ``agent_0``: ``[0, inf) x [-1, 1]``, ``agent_1``: ``R x [2, inf)``."""
    env = spread(num_envs=4096, num_agents=2, continuous=True)
    inf = float("inf")
    spaces = {
        "agent_0": gymnasium.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([inf, 1.0], np.float32)),
        "agent_1": gymnasium.spaces.Box(np.array([-inf, 2.0], np.float32), np.array([inf, inf], np.float32)),
    }
    spaces_of = SimpleNamespace(
        possible_agents=env.possible_agents,
        num_envs=env.num_envs,
        device=env.device,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=spaces,
        observation_space=env.observation_space,
        state_space=env.state_space,
        action_space=spaces.__getitem__,
    )
    cfg = {"random_timesteps": 5, "exploration_noise": GaussianNoise(mean=0.0, std=0.5), "exploration_final_scale": 1.0}
    agent = make_maddpg(spaces_of, cfg)
    agent.init()
    agent.enable_training_mode(True)
    obs, _ = env.reset()
    actions, _ = agent.act(obs, env.state(), timestep=0, timesteps=10)
    (half, bounded), (free, above_2) = actions["agent_0"].unbind(-1), actions["agent_1"].unbind(-1)
    assert half.min() == 0.0 and (half == 0.0).float().mean().item() == pytest.approx(0.5, abs=0.05)
    assert half[half > 0].mean().item() == pytest.approx(0.5 * (2 / np.pi) ** 0.5, rel=0.1)  # half-normal, std 0.5
    assert bounded.min() >= -1.0 and bounded.max() <= 1.0 and bounded.min() < -0.95 and bounded.max() > 0.95
    assert free.mean().item() == pytest.approx(0.0, abs=0.05) and free.std().item() == pytest.approx(0.5, rel=0.1)
    assert above_2.min() == 2.0 and (above_2 == 2.0).float().mean().item() == pytest.approx(0.5, abs=0.05)


@pytest.mark.parametrize("dict_obs", [False, True])
def test_masked_actions_are_never_taken_in_random_exploring_and_greedy_steps(dict_obs):
    env = RandomMaskSpread(num_envs=32, dict_obs=dict_obs)
    # a standardising preprocessor scrambles the mask part of Dict observations: the agent reads the raw one
    cfg = dict(MASKED_CFG, observation_preprocessor=RunningStandardScaler if dict_obs else None)
    agent = make_maddpg(env, cfg)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 10, "disable_progressbar": True})
    trainer.train()  # 4 uniform random steps, then sampling with gradient steps
    trained = env.taken
    trainer.eval()  # greedy: argmax of the masked logits
    assert env.taken == 2 * trained == 2 * 10 * 32 * 2
    assert env.violations == 0
    assert env.forbidden > env.taken  # the masks forbid a lot: an unmasked agent would take many masked actions


@pytest.mark.parametrize("dict_obs", [False, True])
def test_replay_stores_the_masks_of_observations_and_next_observations(dict_obs):
    env = RandomMaskSpread(num_envs=4, dict_obs=dict_obs)
    agent = drive(make_maddpg(env, {"learning_starts": NEVER}), env, 6)
    for uid in env.possible_agents:
        tensors = agent.memories[uid].tensors
        assert tensors["action_mask"].dtype == tensors["next_action_mask"].dtype == torch.bool
        for t in range(6):  # row t: acted on the observations of env.history[t], next observations env.history[t + 1]
            assert torch.equal(tensors["action_mask"][t], env.history[t][uid])
            assert torch.equal(tensors["next_action_mask"][t], env.history[t + 1][uid])


@pytest.mark.parametrize("given", [True, False], ids=["final-given", "final-missing"])
def test_ended_rows_store_the_final_observation_as_next_observation(given):
    # the built-in spread env hands the ended episodes' final observations and states; without them the stored next
    # observation of an ended row is the next episode's first one (what the env returns after its in-place reset)
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=1, episode_length=3)
    agent = make_maddpg(env, {"learning_starts": NEVER})
    seen = []

    def infos_fn(t, infos):
        seen.append({k: infos.get(k) for k in ("final_observations", "final_states")})
        if not given:
            infos.pop("final_observations", None)
            infos.pop("final_states", None)
        return infos

    observations = []
    original_step = env.step

    def step(actions):
        result = original_step(actions)
        observations.append((result[0], env.state()))
        return result

    env.step = step
    drive(agent, env, 3, infos_fn=infos_fn)  # the third step truncates every env
    assert seen[2]["final_observations"] is not None and seen[1]["final_observations"] is None
    for uid in env.possible_agents:
        memory = agent.memories[uid].tensors
        stored, stored_state = memory["next_observations"][2], memory["next_states"][2]
        reset_obs, reset_state = observations[2][0][uid], observations[2][1][uid]
        if given:
            torch.testing.assert_close(stored, seen[2]["final_observations"][uid])
            torch.testing.assert_close(stored_state, seen[2]["final_states"][uid])
            assert not torch.equal(stored, reset_obs)
        else:
            torch.testing.assert_close(stored, reset_obs)
            torch.testing.assert_close(stored_state, reset_state)
        # rows of steps that did not end keep the env's next observation
        torch.testing.assert_close(memory["next_observations"][1], observations[1][0][uid])


def test_action_bound_squashes_the_policy_of_an_unbounded_box_and_is_refused_for_a_bounded_one():
    # Isaac Lab's envs declare Box(-inf, inf) actions and scale them themselves; action_bound gives the policy bounds
    import gymnasium
    import numpy as np

    from skrl_marl_ext.keys import PRE_TANH_ACTIONS_KEY
    from skrl_marl_ext.models import DeterministicMLP

    observations = gymnasium.spaces.Box(-np.inf, np.inf, (3,))
    unbounded = gymnasium.spaces.Box(-np.inf, np.inf, (2,))
    torch.manual_seed(0)
    policy = DeterministicMLP(observation_space=observations, action_space=unbounded, action_bound=0.5)
    x = 100 * torch.randn(256, 3)
    actions, outputs = policy.act({"observations": x}, role="policy")
    assert actions.abs().max() <= 0.5 and actions.abs().max() > 0.45  # large inputs reach the bound, never past it
    assert torch.allclose(actions, 0.5 * torch.tanh(outputs[PRE_TANH_ACTIONS_KEY]))
    raw, _ = DeterministicMLP(observation_space=observations, action_space=unbounded).act({"observations": x}, role="p")
    assert raw.abs().max() > 0.5  # without it the output is the network's, unbounded
    bounded = gymnasium.spaces.Box(-1.0, 1.0, (2,))
    with pytest.raises(ValueError, match="action_bound is for a Box without bounds"):
        DeterministicMLP(observation_space=observations, action_space=bounded, action_bound=1.0)
    with pytest.raises(ValueError, match="action_bound must be above 0"):
        DeterministicMLP(observation_space=observations, action_space=unbounded, action_bound=0.0)
