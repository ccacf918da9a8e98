"""MADDPG: aligned replay sampling, targets, Gumbel actors, masks, learning, drop-in use, checkpoints, bad input."""

import copy
import warnings

import gymnasium
import pytest
import torch
from helpers import QUIET, drive, params, spread
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, Model
from skrl.resources.noises.torch import GaussianNoise, OrnsteinUhlenbeckNoise
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.spaces.torch import flatten_tensorized_space

from skrl_marl_ext import MADDPG, MADDPG_CFG, joint_action_space
from skrl_marl_ext.agents.replay import JointReplay
from skrl_marl_ext.functional import (
    gumbel_softmax_st,
    polyak_update_,
    polyak_update_reference_,
    td_target,
)
from skrl_marl_ext.functional.gumbel import gumbel_max_actions, sample_gumbel
from skrl_marl_ext.models import QMLP, CategoricalMLP, DeterministicMLP, GaussianMLP, mask_logits
from skrl_marl_ext.trainers import StepTrainer, mean_episode_return


@pytest.fixture(autouse=True)
def one_thread():
    """These tests run fastest on one intra-op thread (small MLPs; with 2 threads on 2 busy cores every op waits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_models(env, *, shared=False, hidden=(32, 32), env_states=True, twin=False):
    joint = joint_action_space(env.action_spaces, env.possible_agents)

    def build(uid):
        if env_states:
            state_space = env.state_space(uid)
        else:
            size = sum(env.observation_space(u).shape[0] for u in env.possible_agents)
            state_space = gymnasium.spaces.Box(-float("inf"), float("inf"), (size,))
        space = env.action_space(uid)
        policy_cls = CategoricalMLP if isinstance(space, gymnasium.spaces.Discrete) else DeterministicMLP

        def policy():
            return policy_cls(observation_space=env.observation_space(uid), action_space=space, hidden_sizes=hidden)

        def critic():
            return QMLP(state_space=state_space, action_space=joint, hidden_sizes=hidden)

        models = {"policy": policy(), "target_policy": policy(), "critic": critic(), "target_critic": critic()}
        if twin:
            models.update(critic_2=critic(), target_critic_2=critic())
        return models

    if shared:
        models = build(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    return {uid: build(uid) for uid in env.possible_agents}


def make_memories(env, size=64):
    return {uid: RandomMemory(memory_size=size, num_envs=env.num_envs) for uid in env.possible_agents}


def make_agent(env, cfg=None, *, models=None, memories=None, env_states=True, **model_kwargs):
    cfg = dict(cfg or {})
    cfg.setdefault("experiment", QUIET)
    return MADDPG(
        possible_agents=env.possible_agents,
        models=models if models is not None else make_models(env, env_states=env_states, **model_kwargs),
        memories=memories if memories is not None else make_memories(env),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces if env_states else None,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )


def evaluate(agent, num_agents, *, continuous, steps=100, num_envs=128):
    """Mean team return per episode of the greedy policies (the trainers' evaluation path)."""
    env = spread(num_envs=num_envs, num_agents=num_agents, continuous=continuous, seed=123)
    return mean_episode_return(agent, env, steps=steps)


# ---------------------------------------------------------------- pure functions


@pytest.mark.parametrize("polyak", [0.0, 0.005, 0.3, 1.0])
def test_polyak_update_matches_reference_and_skrl_convention(polyak):
    online = torch.nn.Linear(5, 3)
    target = torch.nn.Linear(5, 3)
    before = [p.detach().clone() for p in target.parameters()]
    reference = copy.deepcopy(target)
    polyak_update_(target=target.parameters(), online=online.parameters(), polyak=polyak)
    polyak_update_reference_(target=reference.parameters(), online=online.parameters(), polyak=polyak)
    for t, r, o, b in zip(target.parameters(), reference.parameters(), online.parameters(), before, strict=True):
        torch.testing.assert_close(t, r)
        torch.testing.assert_close(t, polyak * o + (1 - polyak) * b)
    # skrl's Model.update_parameters states the same convention
    env = spread(num_envs=2, continuous=True)
    a = DeterministicMLP(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    b = DeterministicMLP(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    ours = copy.deepcopy(b)
    b.update_parameters(a, polyak=polyak)
    polyak_update_(target=ours.parameters(), online=a.parameters(), polyak=polyak)
    torch.testing.assert_close(params(ours), params(b))


def test_gumbel_softmax_st_is_torchs_hard_gumbel_softmax():
    logits = torch.randn(64, 5, requires_grad=True)
    torch.manual_seed(3)
    ours = gumbel_softmax_st(logits=logits, temperature=0.7)
    (ours * torch.arange(5.0)).sum().backward()
    grad_ours = logits.grad.clone()
    logits.grad = None
    torch.manual_seed(3)
    theirs = torch.nn.functional.gumbel_softmax(logits, tau=0.7, hard=True)
    (theirs * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(grad_ours, logits.grad)
    assert torch.all(ours.sum(-1) == 1) and torch.all((ours == 0) | (ours == 1))
    assert grad_ours.abs().sum() > 0
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax_st(logits=logits, temperature=0.0)


# ---------------------------------------------------------------- replay and update math


def _consistent(states, obs_size):
    """Rows of the concatenated observations that are one joint transition of the spread env.

    Agent 0 sees its position p0 and p1 - p0; agent 1 sees its position p1: they agree only within one (step, env).
    """
    obs0, obs1 = states[:, :obs_size], states[:, obs_size : 2 * obs_size]
    return torch.isclose(obs0[:, 0:2] + obs0[:, 4:6], obs1[:, 0:2], atol=1e-5).all(dim=-1)


def test_one_index_set_is_drawn_for_every_memory():
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=0)
    # the loop: agent_0's critic alone sees the sampled rows (batched, its compute would run inside torch.vmap)
    cfg = {"batch_size": 128, "learning_starts": 10**9, "batch_agent_models": False}
    agent = make_agent(env, cfg, env_states=False)
    drive(agent, env, 40)
    obs_size = env.observation_space("agent_0").shape[0]

    seen = []
    critic = agent.models["agent_0"]["critic"]
    compute = critic.compute

    def spy(inputs, role=""):
        seen.append(inputs["states"].detach().clone())
        return compute(inputs, role)

    critic.compute = spy
    agent._gradient_step()
    assert seen and all(_consistent(states, obs_size).all() for states in seen)

    # the check has teeth: memories sampled independently break the joint transitions
    independent = {
        uid: agent.memories[uid].sample(["observations"], batch_size=128)[0][0] for uid in env.possible_agents
    }
    mixed = torch.cat([independent[uid] for uid in env.possible_agents], dim=-1)
    assert not _consistent(mixed, obs_size).all()


def hand_critic_losses(models, batch, uids, *, target_action, keep_truncated, discount=0.9):
    """Each agent's critic loss worked out by hand from its models (QMLP: ``net(cat(states, joint action))``):
    ``y = r + discount (1 - d) Q'(s', a')`` with ``a'`` the joint ``target_action(uid, next observations)``, the mean
    of ``(Q(s, a) - y)^2`` over the rows kept (truncated rows only with ``keep_truncated``).

    :return: ``{uid: loss}`` and ``{uid: (Q'(s', a'), y)}``.
    """
    with torch.no_grad():
        next_joint = torch.cat([target_action(u, batch[u]["next_observations"]) for u in uids], dim=-1)
        joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
        losses, targets = {}, {}
        for uid in uids:
            b = batch[uid]
            q_next = models[uid]["target_critic"].net(torch.cat([b["next_states"], next_joint], dim=-1))
            y = b["rewards"] + discount * (1.0 - b["terminated"].float()) * q_next
            q = models[uid]["critic"].net(torch.cat([b["states"], joint], dim=-1))
            keep = torch.ones_like(b["truncated"].view(-1)) if keep_truncated else ~b["truncated"].view(-1)
            losses[uid], targets[uid] = ((q - y) ** 2)[keep].mean(), (q_next, y)
    return losses, targets


@pytest.mark.parametrize("time_limit_bootstrap", [False, True])
def test_critic_target_matches_hand_computation(time_limit_bootstrap):
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=1)
    cfg = {
        "batch_size": 32,
        "discount_factor": 0.9,
        "learning_starts": 10**9,
        "time_limit_bootstrap": time_limit_bootstrap,
    }
    agent = make_agent(env, cfg)
    drive(agent, env, 30)
    generator = torch.Generator().manual_seed(0)
    for uid in env.possible_agents:  # random rewards, some terminated and truncated rows, the same for every agent
        memory = agent.memories[uid]
        memory.tensors["rewards"].copy_(torch.randn(memory.tensors["rewards"].shape, generator=generator))
    terminated = torch.rand(agent.memories["agent_0"].tensors["terminated"].shape, generator=generator) < 0.3
    truncated = torch.rand(terminated.shape, generator=generator) < 0.2
    for uid in env.possible_agents:
        agent.memories[uid].tensors["terminated"].copy_(terminated)
        agent.memories[uid].tensors["truncated"].copy_(truncated)
    models = {uid: agent.models[uid] for uid in env.possible_agents}
    # targets different from the online models, so the test sees which one is used
    for uid in env.possible_agents:
        for role in ("target_policy", "target_critic"):
            with torch.no_grad():
                for p in models[uid][role].parameters():
                    p.add_(0.1 * torch.randn_like(p))
    indexes = agent.sample_indexes()
    batch = agent.sample_batch(indexes)

    # by hand: y_i = r_i + gamma (1 - d_i) Q'_i(s', mu'_1(o'_1), mu'_2(o'_2)); L_i = mean over non-truncated rows
    expected, targets = hand_critic_losses(
        models,
        batch,
        env.possible_agents,
        target_action=lambda u, o: models[u]["target_policy"].net(o).tanh(),  # DeterministicMLP on Box(-1, 1)
        keep_truncated=time_limit_bootstrap,
    )
    for uid in env.possible_agents:
        b, (q_next, y) = batch[uid], targets[uid]
        torch.testing.assert_close(
            td_target(rewards=b["rewards"], next_q_values=q_next, terminated=b["terminated"], discount_factor=0.9), y
        )

    agent.sample_indexes = lambda: indexes
    agent.tracking_data.clear()
    agent._gradient_step()
    for uid in env.possible_agents:
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(expected[uid].item(), rel=1e-5)


@pytest.mark.parametrize("given", [True, False], ids=["final-given", "final-missing"])
def test_ended_rows_store_the_final_observation_as_next_observation(given):
    # the built-in spread env hands the ended episodes' final observations and states; without them the stored next
    # observation of an ended row is the next episode's first one (what the env returns after its in-place reset)
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=1, episode_length=3)
    agent = make_agent(env, {"learning_starts": 10**9})
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


def test_targets_follow_polyak_after_each_gradient_step():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = make_agent(env, {"batch_size": 16, "polyak": 0.2, "learning_starts": 10**9})
    drive(agent, env, 10)
    models = agent.models["agent_1"]
    assert torch.equal(params(models["target_critic"]), params(models["critic"]))  # hard copy at construction
    before = {role: params(models[f"target_{role}"]) for role in ("policy", "critic")}
    agent._gradient_step()
    for role in ("policy", "critic"):
        online, target = params(models[role]), params(models[f"target_{role}"])
        assert not torch.equal(online, before[role])
        torch.testing.assert_close(target, 0.2 * online + 0.8 * before[role], rtol=0, atol=1e-7)
        assert all(not p.requires_grad for p in models[f"target_{role}"].parameters())


def test_discrete_actor_gradient_flows_through_gumbel_into_the_acting_agent_only():
    env = spread(num_envs=4, num_agents=3, continuous=False)
    agent = make_agent(
        env, {"batch_size": 32, "learning_starts": 10**9, "batch_agent_models": False}
    )  # the loop: gradients reach each model's own parameters (batched: the stack; equal, test_batched.py)
    drive(agent, env, 20)
    batch = agent.sample_batch()
    taken = {u: agent._encode_actions(u, batch[u]["actions"]) for u in env.possible_agents}
    assert torch.all(taken["agent_0"].sum(-1) == 1)  # one-hot for the critics
    group = agent.group_of["agent_1"]
    for uid in env.possible_agents:
        for p in agent.models[uid]["policy"].parameters():
            p.grad = None
    loss, _ = agent._actor_loss(group, batch, joint_taken=agent._joint(taken))
    loss.backward()
    grads = {uid: [p.grad for p in agent.models[uid]["policy"].parameters()] for uid in env.possible_agents}
    assert all(g is not None for g in grads["agent_1"]) and sum(g.abs().sum() for g in grads["agent_1"]) > 0
    assert all(g is None for uid in ("agent_0", "agent_2") for g in grads[uid])


def test_discrete_actions_are_integers_sampled_in_training_and_greedy_in_evaluation():
    env = spread(num_envs=64, num_agents=2, continuous=False)
    agent = make_agent(env)
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
    agent = make_agent(env, cfg)
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
    """Defaults: GaussianNoise std 0.3, its factor 1 -> 0.1 over a third of the trainer's timesteps (BenchMARL's rule)."""
    env = spread(num_envs=4096, num_agents=2)
    agent = make_agent(env)
    agent.init()
    agent.enable_training_mode(True)
    assert [agent._noise_scale(t, 300) for t in (0, 50, 100, 250)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    obs, _ = env.reset()
    mu = agent.models["agent_0"]["policy"].act({"observations": obs["agent_0"]}, role="policy")[0]
    for timestep, std in ((0, 0.3), (100, 0.03)):
        noisy, _ = agent.act(obs, env.state(), timestep=timestep, timesteps=300)
        inside = (noisy["agent_0"].abs() < 1.0) & (mu.abs() < 0.5)  # away from the clipping bounds
        assert (noisy["agent_0"] - mu)[inside].std().item() == pytest.approx(std, rel=0.05)


@pytest.mark.parametrize("continuous", [True, False])
def test_random_timesteps_act_uniformly_then_the_policy_acts(continuous):
    env = spread(num_envs=512, num_agents=2, continuous=continuous)
    agent = make_agent(env, {"random_timesteps": 5, "exploration_initial_scale": 0.0, "exploration_final_scale": 0.0})
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


def test_masked_agents_contribute_zero_gradient():
    env = spread(num_envs=4, num_agents=2, continuous=True, agent_masks=True)
    agent = make_agent(
        env, {"batch_size": 32, "learning_starts": 10**9, "batch_agent_models": False}
    )  # the loop: gradients reach each model's own parameters (batched: the stack; equal, test_batched.py)
    drive(agent, env, 30)
    assert agent.memories["agent_0"].tensors["agent_mask"].dtype == torch.bool
    agent.memories["agent_1"].tensors["agent_mask"].fill_(False)  # agent_1 dead in every stored step
    batch = agent.sample_batch()
    taken = {u: agent._encode_actions(u, batch[u]["actions"]) for u in env.possible_agents}
    joint_next, next_states = agent._next_joint_action(batch)
    for uid in env.possible_agents:
        group = agent.group_of[uid]
        critic_loss, _ = agent._critic_loss(
            group,
            batch,
            joint_taken=agent._joint(taken),
            joint_next=joint_next,
            next_critic_states=next_states[group.index],
        )
        actor_loss, _ = agent._actor_loss(group, batch, joint_taken=agent._joint(taken))
        for model in (group.critic, group.policy):
            model.zero_grad(set_to_none=False)
        (critic_loss + actor_loss).backward()
        norm = sum(p.grad.abs().sum() for m in (group.critic, group.policy) for p in m.parameters())
        assert (norm == 0) == (uid == "agent_1")
    # through a whole gradient step: the dead agent's models do not move, the live one's do
    before = {uid: params(agent.models[uid]["policy"]) for uid in env.possible_agents}
    agent._gradient_step()
    assert torch.equal(params(agent.models["agent_1"]["policy"]), before["agent_1"])
    assert not torch.equal(params(agent.models["agent_0"]["policy"]), before["agent_0"])


def test_shared_models_form_one_group():
    env = spread(num_envs=4, num_agents=3, continuous=True)
    agent = make_agent(env, {"batch_size": 16, "learning_starts": 5}, shared=True)
    assert len(agent.groups) == 1 and agent.groups[0].uids == env.possible_agents
    before = params(agent.models["agent_0"]["policy"])
    drive(agent, env, 10)
    assert not torch.equal(params(agent.models["agent_2"]["policy"]), before)
    assert set(agent.tracking_data) >= {"Loss / Critic loss (agent_2)", "Q-network / Q (agent_0) (max)"}


# ---------------------------------------------------------------- learning


def _train(env, agent, steps):
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()


@pytest.mark.slow
def test_learns_continuous_spread():
    # the default config; 3 agents, 16 envs, 1500 steps (24k frames): greedy return
    # -7.3 / -8.3 / -7.3 with seeds 0 / 1 / 2 (benchmarks/spread_learning.py; zero action -25.9, goal -6.0)
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=3, continuous=True, seed=0)
    agent = make_agent(env, {}, memories=make_memories(env, 1000), hidden=(64, 64))
    _train(env, agent, 1500)
    assert evaluate(agent, 3, continuous=True) > -12.0


@pytest.mark.slow
def test_learns_discrete_spread():
    # discrete moves (stay, +-x, +-y) through the Gumbel-softmax actor; the default config, 2 agents, 16 envs,
    # 1000 steps: greedy return -7.6 / -7.7 / -7.6 with seeds 0 / 1 / 2 (benchmarks/spread_learning.py)
    torch.manual_seed(0)
    env = spread(num_envs=16, num_agents=2, continuous=False, seed=0)
    agent = make_agent(env, {}, memories=make_memories(env, 1000), hidden=(64, 64))
    _train(env, agent, 1000)
    assert evaluate(agent, 2, continuous=False) > -12.0


# ---------------------------------------------------------------- drop-in use


@pytest.mark.parametrize("continuous", [True, False])
@pytest.mark.parametrize("trainer_cls", [SequentialTrainer, StepTrainer])
def test_default_config_trains_and_evaluates_through_trainers(trainer_cls, continuous):
    env = spread(num_envs=4, num_agents=2, continuous=continuous)
    models = make_models(env)
    agent = MADDPG(
        possible_agents=env.possible_agents,
        models=models,
        memories=make_memories(env),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},
    )
    assert agent.cfg.batch_size == MADDPG_CFG().batch_size
    before = params(models["agent_0"]["policy"])
    trainer = trainer_cls(env=env, agents=agent, cfg={"timesteps": 12, "headless": True, "disable_progressbar": True})
    if trainer_cls is StepTrainer:
        for _ in range(12):
            trainer.train()
        for _ in range(3):
            trainer.eval()
    else:
        trainer.train()
        trainer.eval()
    assert not torch.equal(params(models["agent_0"]["policy"]), before)
    assert len(agent.memories["agent_0"]) == 12 * env.num_envs  # evaluation stores nothing


# ---------------------------------------------------------------- checkpoints


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
    agent = drive(make_agent(env, cfg), env, 10)
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = make_agent(env, cfg)
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
    assert agent.groups[0].policy_optimizer.param_groups[0]["lr"] == 1e-3 / 8  # stepped 10 times, halved every 3
    # the loaded agent goes on training
    drive(fresh, env, 3)


# ---------------------------------------------------------------- bad input


def _bad_critic(env):
    models = make_models(env)
    for uid in env.possible_agents:  # sized with the agent's own action space instead of the joint one
        for role in ("critic", "target_critic"):
            models[uid][role] = QMLP(state_space=env.state_space(uid), action_space=env.action_space(uid))
    return models


def _gaussian_policy(env):
    models = make_models(env)
    space = env.action_space("agent_0")
    models["agent_0"]["policy"] = GaussianMLP(observation_space=env.observation_space("agent_0"), action_space=space)
    return models


def _without(env, role):
    models = make_models(env)
    del models["agent_1"][role]
    return models


def _same_target(env):
    models = make_models(env)
    models["agent_0"]["target_policy"] = models["agent_0"]["policy"]
    return models


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda env: {"cfg": {"batch_szie": 8}}, "unknown config key 'batch_szie'. Did you mean 'batch_size'"),
        (lambda env: {"cfg": {"batch_size": 0}}, "cfg.batch_size must be a positive integer"),
        (lambda env: {"cfg": {"actor_learning_rate": 0.0}}, "cfg.actor_learning_rate must be > 0"),
        (lambda env: {"cfg": {"critic_learning_rate": -1.0}}, "cfg.critic_learning_rate must be > 0"),
        (lambda env: {"cfg": {"polyak": 1.5}}, "cfg.polyak must be >= 0.0 and <= 1.0"),
        (lambda env: {"cfg": {"gumbel_temperature": 0}}, "cfg.gumbel_temperature must be > 0"),
        (lambda env: {"cfg": {"exploration_noise": GaussianNoise}}, "must be a noise instance"),
        (lambda env: {"models": _without(env, "target_critic")}, "models\\['agent_1'\\] has no 'target_critic' model"),
        (lambda env: {"models": _bad_critic(env)}, "joint action size 4"),
        (lambda env: {"models": _gaussian_policy(env)}, "must be a DeterministicMixin model"),
        (lambda env: {"models": _same_target(env)}, "one object as policy and target_policy"),
        (lambda env: {"memories": None}, "replay memory per agent"),
        (lambda env: {"memories": dict.fromkeys(env.possible_agents, RandomMemory(memory_size=8))}, "same memory"),
    ],
)
def test_bad_input_is_refused_at_construction(build, match):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    kwargs = build(env)
    if "memories" in kwargs and kwargs["memories"] is None:
        kwargs["memories"] = {}
    with pytest.raises(ValueError, match=match):
        make_agent(env, **kwargs)


def test_memories_with_the_wrong_num_envs_are_refused():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = make_agent(env, memories={uid: RandomMemory(memory_size=8, num_envs=3) for uid in env.possible_agents})
    with pytest.raises(ValueError, match="num_envs=3 but the env gives 4"):
        drive(agent, env, 1)


# ---------------------------------------------------------------- distributed


def _gloo_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(100 + rank)  # different initial weights per rank: the broadcast must fix that
        env = spread(num_envs=4, num_agents=2, continuous=True, seed=10 + rank)  # different data per rank
        cfg = {"batch_size": 16, "state_preprocessor": RunningStandardScaler}
        agent = make_agent(env, cfg)
        agent.init()
        initial = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
        drive(agent, env, 8)
        flat = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
        torch.save({"initial": initial, "params": flat}, f"{out_dir}/result{rank}.pt")
        dist.barrier()  # every rank done with its collectives before any tears the group down
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_ranks_agree_bitwise(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_gloo_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"result{r}.pt") for r in range(2)]
    assert torch.equal(results[0]["initial"], results[1]["initial"])  # broadcast at construction, targets copied
    assert not torch.equal(results[0]["initial"], results[0]["params"])  # it trained
    assert torch.equal(results[0]["params"], results[1]["params"])  # on different data, through the all-reduce


@pytest.mark.parametrize("continuous", [True, False])
def test_actor_joint_action_scatter_matches_the_per_agent_concatenation(continuous):
    """The actor's joint actions, built with one scatter per group, equal agent-by-agent concatenation."""
    env = spread(num_envs=4, num_agents=3, continuous=continuous)
    agent = make_agent(env, {"batch_size": 8, "learning_starts": 10**9}, shared=True)
    drive(agent, env, 4)
    batch = agent.sample_batch()
    taken = {u: agent._encode_actions(u, batch[u]["actions"]) for u in env.possible_agents}
    group = agent.groups[0]
    G, B = group.size, 8
    own = torch.randn(G, B, taken["agent_0"].shape[-1])
    scattered = agent._actor_joint(group, agent._joint(taken), own)
    reference = torch.stack([agent._joint({**taken, uid: own[i]}) for i, uid in enumerate(group.uids)])
    assert torch.equal(scattered, reference)


# ---------------------------------------------------------------- action masks


class RandomMaskSpread:
    """The discrete spread env with dense random action masks that differ per env, per agent and per step.

    With ``dict_obs`` the mask is the ``"action_mask"`` entry of a Dict observation space (in the flattened
    observations, from the reset on); otherwise it is ``infos["action_mask"]`` of each step, and the masks of
    ``reset()`` (which skrl's trainers never hand to an agent) are all True. Every mask allows at least one action.
    ``step`` counts the actions taken against the masks of the observations they were taken on.
    """

    def __init__(self, num_envs=16, num_agents=2, *, dict_obs=False, seed=0):
        self.env = spread(num_envs=num_envs, num_agents=num_agents, continuous=False, seed=seed)
        self.dict_obs = dict_obs
        self.generator = torch.Generator().manual_seed(seed)
        self.num_envs, self.device = num_envs, self.env.device
        self.possible_agents = self.env.possible_agents
        self.action_spaces, self.state_spaces = self.env.action_spaces, self.env.state_spaces
        self.observation_spaces = self.env.observation_spaces
        if dict_obs:
            mask_space = gymnasium.spaces.Box(0, 1, (5,), dtype="int8")
            self.observation_spaces = {
                uid: gymnasium.spaces.Dict({"observation": space, "action_mask": mask_space})
                for uid, space in self.observation_spaces.items()
            }
        self.masks, self.history = None, []
        self.taken, self.violations, self.forbidden = 0, 0, 0

    def observation_space(self, uid):
        return self.observation_spaces[uid]

    def action_space(self, uid):
        return self.action_spaces[uid]

    def state_space(self, uid):
        return self.state_spaces[uid]

    def _draw(self):
        mask = torch.rand(self.num_envs, 5, generator=self.generator) < 0.4
        mask[torch.arange(self.num_envs), torch.randint(5, (self.num_envs,), generator=self.generator)] = True
        return mask

    def _with_masks(self, observations, infos, *, reset):
        all_true = reset and not self.dict_obs
        self.masks = {
            uid: torch.ones(self.num_envs, 5, dtype=torch.bool) if all_true else self._draw()
            for uid in self.possible_agents
        }
        self.history.append(self.masks)
        infos = {k: v for k, v in infos.items() if k != "action_mask"}
        if self.dict_obs:
            observations = {
                uid: flatten_tensorized_space({"observation": obs, "action_mask": self.masks[uid].float()})
                for uid, obs in observations.items()
            }
        else:
            infos["action_mask"] = self.masks
        return observations, infos

    def reset(self, *args, **kwargs):
        return self._with_masks(*self.env.reset(), reset=True)

    def step(self, actions):
        for uid in self.possible_agents:
            allowed = self.masks[uid].gather(1, actions[uid].long().view(-1, 1))
            self.taken += allowed.numel()
            self.violations += int((~allowed).sum())
            self.forbidden += int((~self.masks[uid]).sum())
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        observations, infos = self._with_masks(observations, infos, reset=False)
        return observations, rewards, terminated, truncated, infos

    def state(self):
        return self.env.state()

    def render(self, *args, **kwargs):
        return None

    def close(self):
        pass


class PlainCategorical(CategoricalMixin, Model):
    """A categorical policy of skrl's own mixin: it ignores action masks."""

    def __init__(self, observation_space, action_space):
        Model.__init__(self, observation_space=observation_space, action_space=action_space)
        CategoricalMixin.__init__(self)
        self.net = torch.nn.Linear(self.num_observations, self.num_actions)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def _plain_policies(env):
    models = make_models(env, hidden=(16,))
    for uid in env.possible_agents:
        for role in ("policy", "target_policy"):
            models[uid][role] = PlainCategorical(env.observation_space(uid), env.action_space(uid))
    return models


MASKED_CFG = {"batch_size": 32, "random_timesteps": 4, "learning_starts": 2}


@pytest.mark.parametrize("dict_obs", [False, True])
def test_masked_actions_are_never_taken_in_random_exploring_and_greedy_steps(dict_obs):
    env = RandomMaskSpread(num_envs=32, dict_obs=dict_obs)
    # a standardising preprocessor scrambles the mask part of Dict observations: the agent reads the raw one
    cfg = dict(MASKED_CFG, observation_preprocessor=RunningStandardScaler if dict_obs else None)
    agent = make_agent(env, cfg, hidden=(16,))
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
    agent = drive(make_agent(env, {"learning_starts": 10**9}, hidden=(16,)), env, 6)
    for uid in env.possible_agents:
        tensors = agent.memories[uid].tensors
        assert tensors["action_mask"].dtype == tensors["next_action_mask"].dtype == torch.bool
        for t in range(6):  # row t: acted on the observations of env.history[t], next observations env.history[t + 1]
            assert torch.equal(tensors["action_mask"][t], env.history[t][uid])
            assert torch.equal(tensors["next_action_mask"][t], env.history[t + 1][uid])


def _joint_part(agent, uid, joint):
    start = sum(int(agent.action_spaces[u].n) for u in agent.possible_agents[: agent.possible_agents.index(uid)])
    return joint[..., start : start + int(agent.action_spaces[uid].n)]


def test_target_next_actions_are_allowed_greedy_actions_of_the_stored_next_masks():
    env = RandomMaskSpread(num_envs=8)
    agent = drive(make_agent(env, {"batch_size": 64, "learning_starts": 10**9}, hidden=(16,)), env, 12)
    batch = agent.sample_batch()
    joint_next, _ = agent._next_joint_action(batch)
    hits = 0
    for uid in env.possible_agents:
        next_mask = batch[uid]["next_action_mask"]
        action = _joint_part(agent, uid, joint_next)
        assert torch.all(action.sum(-1) == 1) and torch.all(action[~next_mask] == 0)
        # the greedy action among the allowed ones, where the unmasked argmax is often a masked action
        policy = agent.models[uid]["target_policy"]
        with torch.no_grad():
            logits = policy.net(batch[uid]["next_observations"])
        assert torch.equal(action.argmax(-1), logits.masked_fill(~next_mask, -torch.inf).argmax(-1))
        hits += int((~next_mask.gather(1, logits.argmax(-1, keepdim=True))).sum())
    assert hits > 0


def test_actor_gumbel_action_is_zero_on_masked_actions_with_finite_gradients():
    env = RandomMaskSpread(num_envs=8)
    cfg = {"batch_size": 64, "learning_starts": 10**9, "gumbel_temperature": 0.25, "batch_agent_models": False}
    agent = drive(
        make_agent(env, cfg, hidden=(16,)), env, 12
    )  # the loop: gradients reach each model's own parameters (batched: the stack; equal, test_batched.py)
    batch = agent.sample_batch()
    taken = {u: agent._encode_actions(u, batch[u]["actions"]) for u in env.possible_agents}
    group = agent.group_of["agent_1"]
    seen = []
    critic = group.critic
    compute = critic.compute

    def spy(inputs, role=""):
        seen.append(inputs["taken_actions"])
        return compute(inputs, role)

    critic.compute = spy
    loss, _ = agent._actor_loss(group, batch, joint_taken=agent._joint(taken))
    own = _joint_part(agent, "agent_1", seen[-1])  # agent_1's Gumbel-softmax action, (B, 5)
    mask = batch["agent_1"]["action_mask"]
    assert torch.all(own.detach().sum(-1) == 1) and torch.all(own.detach()[~mask] == 0)
    assert bool((~mask).any())
    loss.backward()
    grads = [p.grad for p in group.policy.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_masked_gumbel_softmax_is_the_softmax_over_the_allowed_actions():
    torch.manual_seed(0)
    logits = torch.randn(64, 5, requires_grad=True)
    mask = torch.rand(64, 5) < 0.5
    mask[torch.arange(64), torch.randint(5, (64,))] = True
    weights = torch.randn(5)
    # the logits a MaskedCategoricalMixin gives (lowest finite value where masked): at temperature 0.25,
    # (min + noise) / 0.25 overflows to -inf, which the softmax weighs 0 with a zero gradient
    torch.manual_seed(1)
    ours = gumbel_softmax_st(logits=mask_logits(logits, mask), temperature=0.25, mask=mask)
    torch.manual_seed(1)
    noise = sample_gumbel(logits)  # the noise torch's gumbel_softmax drew
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
    # reference: the softmax over the allowed entries only (masked ones -inf), straight-through
    soft = torch.softmax(((logits + noise) / 0.25).masked_fill(~mask, -torch.inf), dim=-1)
    reference = torch.nn.functional.one_hot(soft.argmax(-1), 5).float() - soft.detach() + soft
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), logits)
    torch.testing.assert_close(ours, reference)
    torch.testing.assert_close(grad_ours, grad_reference)
    assert torch.all(ours[~mask] == 0) and torch.all(grad_ours[~mask] == 0) and torch.isfinite(grad_ours).all()
    assert grad_ours.abs().sum() > 0
    # no mask: unchanged (torch's hard Gumbel-softmax, tested above); a row allowing nothing stays finite
    torch.manual_seed(2)
    all_allowed = gumbel_softmax_st(logits=logits, mask=torch.ones(64, 5, dtype=torch.bool))
    torch.manual_seed(2)
    torch.testing.assert_close(all_allowed, gumbel_softmax_st(logits=logits))
    nothing = gumbel_softmax_st(logits=logits[:2], temperature=0.25, mask=torch.zeros(2, 5, dtype=torch.bool))
    assert torch.isfinite(nothing).all() and torch.all(nothing.sum(-1) == 1)


def test_gumbel_max_actions_draw_only_allowed_actions_uniformly():
    torch.manual_seed(0)
    mask = torch.tensor([[True, False, True, False, True], [False, False, False, True, False]]).repeat(2000, 1)
    actions = gumbel_max_actions(logits=torch.zeros(4000, 5), mask=mask)
    assert actions.shape == (4000, 1) and mask.gather(1, actions).all()
    counts = torch.bincount(actions[0::2].view(-1), minlength=5)
    assert counts[[1, 3]].sum() == 0 and counts[[0, 2, 4]].min() > 600  # about 2000 / 3 each
    noise = sample_gumbel(torch.zeros(8, 5))
    logits = torch.randn(8, 5)
    expected = (logits + noise).masked_fill(~mask[:8], -torch.inf).argmax(-1, keepdim=True)
    assert torch.equal(gumbel_max_actions(logits=logits, mask=mask[:8], gumbel_noise=noise), expected)


UNMASKED_POLICY = (
    r"agents \['agent_0'(, 'agent_1')?\] receive action masks \({}\) but their policy \(PlainCategorical\) "
    r"ignores them .*"
    r"skrl_marl_ext\.models\.MaskedCategoricalMixin .*skrl_marl_ext\.models\.CategoricalMLP"
)


def test_unmasked_policy_is_refused_at_construction_for_a_dict_mask():
    env = RandomMaskSpread(num_envs=4, dict_obs=True)
    match = UNMASKED_POLICY.format('the "action_mask" entry of their Dict observation space')
    with pytest.raises(ValueError, match=match):
        make_agent(env, models=_plain_policies(env))


@pytest.mark.parametrize("training", [True, False])
def test_unmasked_policy_is_refused_at_the_first_masked_infos(training):
    env = RandomMaskSpread(num_envs=4)
    agent = make_agent(env, models=_plain_policies(env))  # no mask in the spaces: accepted
    with pytest.raises(ValueError, match=UNMASKED_POLICY.format(r'infos\["action_mask"\]')):
        drive(agent, env, 3, training=training)
    assert env.taken == 4 * 2  # refused at the first step, whose infos carry the masks
    # an env without masks trains such a policy as before
    drive(agent, spread(num_envs=4, num_agents=2, continuous=False), 3)


@pytest.mark.parametrize("dict_obs", [False, True])
def test_masked_maddpg_trains_through_the_trainer_and_round_trips_a_checkpoint(dict_obs, tmp_path):
    env = RandomMaskSpread(num_envs=8, dict_obs=dict_obs)
    agent = make_agent(env, MASKED_CFG, hidden=(16,))
    before = params(agent.models["agent_0"]["policy"])
    _train(env, agent, 12)
    assert not torch.equal(params(agent.models["agent_0"]["policy"]), before)
    assert set(agent.tracking_data) >= {"Loss / Policy loss (agent_1)", "Loss / Critic loss (agent_0)"}
    assert env.violations == 0 and len(agent.memories["agent_0"]) == 12 * 8
    path = str(tmp_path / "masked.pt")
    agent.save(path)
    fresh = make_agent(env, MASKED_CFG, hidden=(16,))
    fresh.load(path)
    for uid in env.possible_agents:
        for role in ("policy", "target_policy", "critic", "target_critic"):
            assert torch.equal(params(fresh.models[uid][role]), params(agent.models[uid][role]))
    _train(env, fresh, 6)  # the loaded agent goes on training, still within the masks
    assert env.violations == 0


# ---------------------------------------------------------------- joint replay storage


def test_replay_rows_match_skrls_add_samples_and_live_in_one_storage_per_width():
    """The memories' tensors are slices of one storage tensor per (name, width); after wrapping around, every agent's
    memory holds what skrl's own add_samples of the same rows gives, with the same indexes and flags."""
    env = spread(num_envs=3, num_agents=3, continuous=True, seed=2)
    agent = make_agent(env, {"learning_starts": 10**9}, memories=make_memories(env, size=5))
    reference = {uid: RandomMemory(memory_size=5, num_envs=3) for uid in env.possible_agents}
    for uid in env.possible_agents:
        for name in agent.replay.names[uid]:
            tensor = agent.memories[uid].tensors[name]
            reference[uid].create_tensor(name, size=tensor.shape[-1], dtype=tensor.dtype)
    add = agent.replay.add

    def add_both(rows):
        for uid in env.possible_agents:
            reference[uid].add_samples(**rows[uid])
        add(rows)

    agent.replay.add = add_both
    drive(agent, env, 7)  # 5 rows, then 2 overwritten
    for uid in env.possible_agents:
        memory, expected = agent.memories[uid], reference[uid]
        assert (memory.memory_index, memory.env_index, memory.filled) == (2, 0, True)
        assert (expected.memory_index, expected.env_index, expected.filled) == (2, 0, True)
        for name in agent.replay.names[uid]:
            torch.testing.assert_close(memory.tensors[name], expected.tensors[name], rtol=0, atol=0)
            assert memory.tensors_view[name].data_ptr() == memory.tensors[name].data_ptr()
    for name, parts in agent.replay.parts.items():
        assert len(parts) == 1 and parts[0][0] == env.possible_agents  # spread agents: equal widths, one storage
        for k, uid in enumerate(env.possible_agents):
            assert agent.memories[uid].tensors[name].data_ptr() == parts[0][1][k].data_ptr()
    indexes = torch.tensor([0, 4, 14, 7])
    batch = agent.sample_batch(indexes)
    for uid in env.possible_agents:
        for name in agent.replay.names[uid]:
            torch.testing.assert_close(batch[uid][name], reference[uid].tensors_view[name][indexes], rtol=0, atol=0)


def test_agents_of_other_widths_get_storages_of_their_own():
    """Agents whose rows differ in width (a bigger observation here) are stored apart; rows stay aligned."""
    env = spread(num_envs=2, num_agents=3, continuous=True, seed=3)
    spaces = dict(env.observation_spaces)
    spaces["agent_2"] = gymnasium.spaces.Box(-float("inf"), float("inf"), (spaces["agent_2"].shape[0] + 3,))
    replay = JointReplay(make_memories(env, size=4), owner="test", possible_agents=env.possible_agents)
    replay.create_tensor("observations", sizes={u: s.shape[0] for u, s in spaces.items()}, dtype=torch.float32)
    assert [uids for uids, _ in replay.parts["observations"]] == [["agent_0", "agent_1"], ["agent_2"]]
    rows = {u: {"observations": torch.full((2, s.shape[0]), float(i))} for i, (u, s) in enumerate(spaces.items())}
    replay.add(rows)
    batch = replay.sample(torch.tensor([1, 0]), device="cpu")
    for i, uid in enumerate(env.possible_agents):
        assert batch[uid]["observations"].shape == (2, spaces[uid].shape[0])
        assert (batch[uid]["observations"] == i).all()


# ---------------------------------------------------------------- TD3's target smoothing, the paper's pre-tanh penalty


class ConstantNoise:
    def __init__(self, value):
        self.value = value

    def sample(self, size):
        return torch.full(size, self.value)


@pytest.mark.parametrize("value", [0.8, -0.3], ids=["clipped", "inside"])
def test_target_policy_smoothing_matches_hand_computation(value):
    """y = r + gamma (1 - d) Q'(s', clip(mu'(o') + clip(noise, -c, c), low, high)): 0.8 is clipped to c = 0.5, and
    target actions near the bounds cross them."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=4)
    cfg = {
        "batch_size": 32,
        "discount_factor": 0.9,
        "learning_starts": 10**9,
        "smooth_regularization_noise": ConstantNoise(value),
        "smooth_regularization_clip": 0.5,
    }
    agent = make_agent(env, cfg)
    drive(agent, env, 30)
    models = agent.models
    with torch.no_grad():  # target actions near the bounds, so that the noise crosses them in some rows
        for p in agent.groups[0].parameters("target_policy"):
            p.mul_(4.0)
    indexes = agent.sample_indexes()
    batch = agent.sample_batch(indexes)
    noise = max(min(value, 0.5), -0.5)
    expected, _ = hand_critic_losses(
        models,
        batch,
        env.possible_agents,
        target_action=lambda u, o: (models[u]["target_policy"].net(o).tanh() + noise).clamp(-1.0, 1.0),
        keep_truncated=False,
    )
    agent.sample_indexes = lambda: indexes
    agent.tracking_data.clear()
    agent._gradient_step()
    for uid in env.possible_agents:
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(expected[uid].item(), rel=1e-5)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_policy_regularization_adds_the_mean_square_of_the_pre_tanh_output(batched):
    """The actor loss grows by weight x each agent's mean over rows and action dimensions of net(o)^2 (summed over the
    agents of a batched group: each agent's own mean), computed here from the models by hand."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=5)
    cfg = {"batch_size": 16, "learning_starts": 10**9, "policy_regularization": 0.01, "batch_agent_models": batched}
    agent = make_agent(env, cfg)
    drive(agent, env, 10)
    batch = agent.sample_batch(agent.sample_indexes())
    joint_taken = torch.cat([batch[u]["actions"] for u in env.possible_agents], dim=-1)
    losses = {}
    for weight in (0.01, 0.0):
        total = 0.0
        for group in agent.groups:
            group.cfg.policy_regularization = weight
            total += agent._actor_loss(group, batch, joint_taken=joint_taken)[0].item()
        losses[weight] = total
    with torch.no_grad():
        penalty = sum(
            agent.models[u]["policy"].net(batch[u]["observations"]).square().mean() for u in env.possible_agents
        )
    assert penalty > 0
    assert losses[0.01] - losses[0.0] == pytest.approx(0.01 * penalty.item(), rel=1e-4)


def test_policy_regularization_refuses_or_skips_a_policy_without_the_pre_tanh_output():
    class NoPreTanh(DeterministicMLP):
        def compute(self, inputs, role=""):
            actions, _ = super().compute(inputs, role)
            return actions, {}

    env = spread(num_envs=2, num_agents=2, continuous=True)
    models = make_models(env)
    for uid in env.possible_agents:
        models[uid]["policy"] = NoPreTanh(
            observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=(32, 32)
        )
    with pytest.raises(ValueError, match="policy_regularization is 0.001 but the policy of agents .* gives no"):
        make_agent(env, {"policy_regularization": 1e-3}, models=models)
    agent = make_agent(env, {"policy_regularization": 0.0}, models=copy.deepcopy(models))  # off: any policy
    assert [g.cfg.policy_regularization for g in agent.groups] == [0.0]
    with pytest.warns(UserWarning, match="default pre-tanh penalty .* is off for them"):  # None: where given
        agent = make_agent(env, {"policy_regularization": None}, models=copy.deepcopy(models))
    assert [g.cfg.policy_regularization for g in agent.groups] == [0.0]
    agent = make_agent(env, {"policy_regularization": None})  # DeterministicMLP policies: the paper code's weight
    assert [g.cfg.policy_regularization for g in agent.groups] == [1e-3]
    assert [g.cfg.policy_regularization for g in make_agent(env).groups] == [0.0]  # the default: off


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"policy_regularization": -1.0}, "policy_regularization"),
        ({"smooth_regularization_clip": -0.1}, "smooth_regularization_clip"),
        ({"smooth_regularization_noise": GaussianNoise}, "smooth_regularization_noise must be a noise instance"),
    ],
)
def test_smoothing_and_penalty_config_is_checked(cfg, match):
    env = spread(num_envs=2, num_agents=2, continuous=True)
    with pytest.raises(ValueError, match=match):
        make_agent(env, cfg)


# ---------------------------------------------------------------- clipped double Q (twin critics) and policy delay


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_twin_critics_target_and_loss_match_hand_computation(batched):
    """y = r + gamma (1 - d) min(Q'_1(s', a'), Q'_2(s', a')) and L = mean (Q_1 - y)^2 + mean (Q_2 - y)^2 per agent
    (summed over a batched group's agents), worked out from the four critics by hand; the tracked target mean and
    critic loss of a gradient step are those of this target."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=6)
    cfg = {"batch_size": 32, "discount_factor": 0.9, "learning_starts": 10**9, "batch_agent_models": batched}
    agent = make_agent(env, cfg, twin=True)
    drive(agent, env, 30)
    models = agent.models
    generator = torch.Generator().manual_seed(1)
    for uid in env.possible_agents:  # rewards in the scale of Q, so that the target's min matters
        memory = agent.memories[uid]
        memory.tensors["rewards"].copy_(torch.randn(memory.tensors["rewards"].shape, generator=generator))
    indexes = agent.sample_indexes()
    batch = agent.sample_batch(indexes)
    uids = env.possible_agents
    with torch.no_grad():
        next_joint = torch.cat([models[u]["target_policy"].net(batch[u]["next_observations"]).tanh() for u in uids], -1)
        joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
        expected, targets, picks = 0.0, {}, []
        for uid in uids:
            b = batch[uid]
            next_q = [models[uid][r].net(torch.cat([b["next_states"], next_joint], -1)) for r in TWIN_TARGETS]
            picks.append(next_q[0] < next_q[1])
            y = b["rewards"] + 0.9 * (1.0 - b["terminated"].float()) * torch.minimum(*next_q)
            keep = ~b["truncated"].view(-1)
            q = [models[uid][r].net(torch.cat([b["states"], joint], -1)) for r in ("critic", "critic_2")]
            losses = [((qi - y) ** 2)[keep].mean() for qi in q]
            expected += sum(losses)
            targets[uid] = (y[keep].mean(), losses[0])
    picks = torch.cat(picks)
    assert picks.any() and not picks.all()  # both target critics give the minimum in some rows
    taken = {u: batch[u]["actions"] for u in uids}
    joint_next, next_states = agent._next_joint_action(batch)
    total = sum(
        agent._critic_loss(
            group,
            batch,
            joint_taken=agent._joint(taken),
            joint_next=joint_next,
            next_critic_states=next_states[group.index],
        )[0].item()
        for group in agent.groups
    )
    assert total == pytest.approx(expected.item(), rel=1e-5)
    agent.sample_indexes = lambda: indexes
    agent.tracking_data.clear()
    agent._gradient_step()
    for uid in uids:
        target_mean, critic_1_loss = targets[uid]
        assert agent.tracking_data[f"Target / Target ({uid}) (mean)"][-1] == pytest.approx(target_mean.item(), rel=1e-5)
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(critic_1_loss.item(), rel=1e-5)


TWIN_TARGETS = ("target_critic", "target_critic_2")


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_twin_critics_both_learn_and_the_actor_follows_the_first(batched):
    """Both critics step (one optimiser over both), both targets follow their own critic, and the actor loss is
    -mean Q_1(s, a with the agent's own action from its policy), not Q_2's."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=7)
    cfg = {"batch_size": 16, "learning_starts": 10**9, "polyak": 0.25, "batch_agent_models": batched}
    agent = make_agent(env, cfg, twin=True)
    drive(agent, env, 10)
    models, uids = agent.models, env.possible_agents
    batch = agent.sample_batch(agent.sample_indexes())
    joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
    with torch.no_grad():
        hand = {}
        for role in ("critic", "critic_2"):
            total = 0.0
            for i, uid in enumerate(uids):
                own = models[uid]["policy"].net(batch[uid]["observations"]).tanh()
                width = own.shape[-1]
                joint_pi = torch.cat([joint[:, : i * width], own, joint[:, (i + 1) * width :]], dim=-1)
                total -= models[uid][role].net(torch.cat([batch[uid]["states"], joint_pi], -1)).mean()
            hand[role] = total.item()
    actor = sum(agent._actor_loss(g, batch, joint_taken=joint)[0].item() for g in agent.groups)
    assert actor == pytest.approx(hand["critic"], rel=1e-5)
    assert actor != pytest.approx(hand["critic_2"], rel=1e-3)

    before = {(u, r): params(models[u][r]).clone() for u in uids for r in models[u]}
    agent._gradient_step()
    for uid in uids:
        for role in ("critic", "critic_2", "policy"):
            assert not torch.equal(params(models[uid][role]), before[uid, role])
            expected = 0.25 * params(models[uid][role]) + 0.75 * before[uid, f"target_{role}"]
            assert torch.allclose(params(models[uid][f"target_{role}"]), expected, atol=1e-6)


@pytest.mark.parametrize("twin", [False, True], ids=["one-critic", "twin"])
def test_policy_delay_steps_the_actor_and_the_targets_every_nth_gradient_step(twin):
    """policy_delay 2 (TD3's): the critics step every gradient step; the policy and every target on the 2nd, 4th, ..
    (target = polyak online + (1 - polyak) target, from the online models of that step); the policy loss is tracked
    on those steps only, as skrl's TD3 does."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=8)
    agent = make_agent(env, {"batch_size": 16, "learning_starts": 10**9, "polyak": 0.5, "policy_delay": 2}, twin=twin)
    drive(agent, env, 10)
    models, uids = agent.models, env.possible_agents
    critics = ("critic", "critic_2") if twin else ("critic",)
    snapshot = lambda: {(u, r): params(models[u][r]).clone() for u in uids for r in models[u]}  # noqa: E731
    agent.tracking_data.clear()
    start = snapshot()
    agent._gradient_step()  # 1st: critics only
    first = snapshot()
    for uid in uids:
        for role in critics:
            assert not torch.equal(first[uid, role], start[uid, role])
        for role in ("policy", "target_policy", *(f"target_{c}" for c in critics)):
            assert torch.equal(first[uid, role], start[uid, role])
    assert f"Loss / Policy loss ({uids[0]})" not in agent.tracking_data
    agent._gradient_step()  # 2nd: critics, the policy, then every target from this step's online models
    second = snapshot()
    for uid in uids:
        assert not torch.equal(second[uid, "policy"], first[uid, "policy"])
        for role in ("policy", *critics):
            expected = 0.5 * second[uid, role] + 0.5 * first[uid, f"target_{role}"]
            assert torch.allclose(second[uid, f"target_{role}"], expected, atol=1e-6)
    assert len(agent.tracking_data[f"Loss / Policy loss ({uids[0]})"]) == 1
    assert len(agent.tracking_data[f"Loss / Critic loss ({uids[0]})"]) == 2


def test_twin_critics_round_trip_a_checkpoint(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {"gradient_steps": 1, "batch_size": 16, "learning_starts": 2}
    agent = drive(make_agent(env, cfg, twin=True), env, 8)
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = make_agent(env, cfg, twin=True)
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


def test_twin_critics_bad_models_are_refused():
    env = spread(num_envs=2, num_agents=2, continuous=True)
    models = make_models(env, twin=True)
    del models["agent_1"]["critic_2"], models["agent_1"]["target_critic_2"]
    with pytest.raises(ValueError, match=r"agents \['agent_1'\] lack \['critic_2', 'target_critic_2'\]"):
        make_agent(env, models=models)
    models = make_models(env, twin=True)
    for uid in env.possible_agents:
        del models[uid]["target_critic_2"]
    with pytest.raises(ValueError, match="target_critic_2"):
        make_agent(env, models=models)
    models = make_models(env, twin=True)
    for uid in env.possible_agents:
        models[uid]["critic_2"] = models[uid]["critic"]
    with pytest.raises(ValueError, match="critic and critic_2|serves"):
        make_agent(env, models=models)
    with pytest.raises(ValueError, match="policy_delay must be a positive integer"):
        make_agent(env, {"policy_delay": 0})


# ---------------------------------------------------------------- resume: progress, replay, schedulers


def test_a_loaded_agent_continues_its_schedules_from_the_saved_step(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {"batch_size": 8, "exploration_final_scale": 0.1, "exploration_timesteps": 40, "learning_starts": 10}
    agent = drive(make_agent(env, cfg), env, 20)
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

    fresh = make_agent(env, cfg)
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
        agent = drive(make_agent(env, cfg, memories=make_memories(env, memory_size)), env, memory_size + 2)
        agent.save(str(tmp_path / f"{keep}.pt"))
        sizes[keep] = (tmp_path / f"{keep}.pt").stat().st_size
    expected = _replay_bytes_per_row(env) * memory_size * env.num_envs  # the memories have wrapped: all rows
    assert sizes[True] - sizes[False] == pytest.approx(expected, rel=0.03)


def test_checkpoint_replay_round_trips_rows_indexes_and_noise_state(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    noise = OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2, base_scale=1.0)
    cfg = {"batch_size": 8, "checkpoint_replay": True, "exploration_noise": noise, "exploration_final_scale": 1.0}
    agent = drive(make_agent(env, cfg, memories=make_memories(env, 16)), env, 10)  # 10 of 16 rows written
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    fresh = make_agent(env, cfg, memories=make_memories(env, 16))
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
    agent = make_agent(env, cfg, memories=make_memories(env, 16))
    SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": 16, "headless": True, "disable_progressbar": True}
    ).train()
    best = agent.checkpoint_best_modules["modules"]
    assert best, "a best checkpoint was kept (episodes ended, rewards were tracked)"
    assert all(t.shape[0] == 0 for uid in best for t in best[uid]["replay"]["tensors"].values())
    checkpoints = tmp_path / "run" / "checkpoints"
    fresh = make_agent(env, cfg, memories=make_memories(env, 16))
    fresh.load(str(checkpoints / "best_agent.pt"))
    assert all(len(fresh.memories[uid]) == 0 for uid in env.possible_agents)
    fresh.load(str(checkpoints / "agent_16.pt"))
    assert all(len(fresh.memories[uid]) == 16 * 4 for uid in env.possible_agents)


def test_a_replay_of_another_memory_size_is_refused(tmp_path):
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = drive(make_agent(env, {"checkpoint_replay": True}, memories=make_memories(env, 8)), env, 10)
    agent.save(str(tmp_path / "agent.pt"))
    bigger = make_agent(env, {"checkpoint_replay": True}, memories=make_memories(env, 16))
    with pytest.raises(ValueError, match="module 'replay' does not fit.*memory_size and num_envs"):
        bigger.load(str(tmp_path / "agent.pt"))


def test_schedulers_count_only_the_steps_their_optimiser_took():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {
        "batch_size": 8,
        "gradient_steps": 1,
        "policy_delay": 3,
        "learning_rate_scheduler": torch.optim.lr_scheduler.StepLR,
        "learning_rate_scheduler_kwargs": {"step_size": 1, "gamma": 0.5},
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*lr_scheduler")  # torch: a scheduler stepped before its optimiser
        agent = drive(make_agent(env, cfg), env, 10)
    for uid in env.possible_agents:
        modules = agent.checkpoint_modules[uid]
        assert modules["critic_scheduler"].last_epoch == 10
        assert modules["policy_scheduler"].last_epoch == 10 // 3  # the actor stepped at gradient steps 3, 6, 9
        assert modules["policy_optimizer"].state_dict()["param_groups"][0]["lr"] == pytest.approx(5e-4 * 0.5**3)


def test_a_policy_step_the_grad_scaler_skipped_does_not_step_its_scheduler():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    cfg = {
        "batch_size": 8,
        "gradient_steps": 1,
        "mixed_precision": True,
        "batch_agent_models": False,  # the hook below sees the policy's own parameters
        "learning_rate_scheduler": torch.optim.lr_scheduler.StepLR,
        "learning_rate_scheduler_kwargs": {"step_size": 1, "gamma": 0.5},
    }
    agent = make_agent(env, cfg)
    for uid in env.possible_agents:
        next(agent.models[uid]["policy"].parameters()).register_hook(lambda grad: torch.full_like(grad, float("inf")))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*lr_scheduler")
        drive(agent, env, 6)
    for uid in env.possible_agents:
        modules = agent.checkpoint_modules[uid]
        assert modules["policy_scheduler"].last_epoch == 0 and modules["critic_scheduler"].last_epoch == 6
