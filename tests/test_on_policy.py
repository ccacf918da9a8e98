"""Behaviour of the shared MAPPO/IPPO core: critics, groups, masks, evaluation, checkpoints, configs."""

import dataclasses
import warnings

import gymnasium
import pytest
import torch
from helpers import QUIET, drive, make_agent, make_models, params, spread
from skrl.memories.torch import RandomMemory
from skrl.multi_agents.torch.mappo import MAPPO_CFG as SKRL_MAPPO_CFG
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import IPPO, MAPPO, MAPPO_CFG, ValueNorm
from skrl_marl_ext.models import CategoricalMLP
from skrl_marl_ext.trainers import StepTrainer

SMALL = {"rollouts": 4, "learning_epochs": 2, "mini_batches": 2, "experiment": QUIET}


# ---------------------------------------------------------------- drop-in use with skrl's trainers


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
@pytest.mark.parametrize("trainer_cls", [SequentialTrainer, StepTrainer])
def test_default_config_trains_through_skrl_trainers(algo, trainer_cls):
    env = spread(num_envs=4)
    models = make_models(env, algo)
    cls = MAPPO if algo == "mappo" else IPPO
    # exactly what a skrl MAPPO script does: per-agent memories, cfg={}
    memories = {uid: RandomMemory(memory_size=16, num_envs=env.num_envs) for uid in env.possible_agents}
    agent = cls(
        possible_agents=env.possible_agents,
        models=models,
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={},
    )
    before = params(models["agent_0"]["policy"])
    trainer = trainer_cls(env=env, agents=agent, cfg={"timesteps": 32, "headless": True, "disable_progressbar": True})
    if trainer_cls is StepTrainer:
        for _ in range(32):
            trainer.train()
    else:
        trainer.train()
    assert not torch.equal(before, params(models["agent_0"]["policy"]))  # 2 updates happened (rollouts 16)
    assert all(torch.isfinite(p).all() for p in models["agent_0"]["policy"].parameters())


def test_skrl_config_dataclass_and_runner_style_kwargs_are_accepted():
    env = spread(num_envs=4)
    uids = env.possible_agents
    # skrl's own MAPPO_CFG, with the per-agent kwargs dicts skrl's Runner writes
    cfg = SKRL_MAPPO_CFG(rollouts=4, mini_batches=1)
    cfg.observation_preprocessor = RunningStandardScaler
    cfg.observation_preprocessor_kwargs = {uid: {"size": env.observation_space(uid), "device": "cpu"} for uid in uids}
    cfg.value_preprocessor = RunningStandardScaler
    cfg.value_preprocessor_kwargs = {"size": 1, "device": "cpu"}
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    agent = make_agent(env, cfg=cfg)
    assert isinstance(agent.cfg, MAPPO_CFG)
    assert agent.cfg.rollouts == 4
    drive(agent, env, 4)
    assert agent.checkpoint_modules["agent_0"]["observation_preprocessor"].current_count.item() > 1


# ---------------------------------------------------------------- what the critic reads


def _values(agent, obs, states):
    # the critic's values decided by act, as record_transition stores them (step 0 of the rollout), per agent (N, 1)
    actions, _ = agent.act(obs, states, timestep=0, timesteps=1)
    zeros = {uid: torch.zeros(x.shape[0], 1) for uid, x in obs.items()}
    flags = {uid: torch.zeros(x.shape[0], 1, dtype=torch.bool) for uid, x in obs.items()}
    agent.record_transition(
        observations=obs,
        states=states,
        actions=actions,
        rewards=zeros,
        next_observations=obs,
        next_states=states,
        terminated=flags,
        truncated=flags,
        infos={},
        timestep=0,
        timesteps=1,
    )
    values = {}
    for uid in obs:
        group = agent.group_of[uid]
        values[uid] = group.rollout["values"][0, group.uids.index(uid)].clone()
    return values


@pytest.mark.parametrize("shared", [False, True])
def test_mappo_critic_reads_the_global_state_ippo_only_its_own_observation(shared):
    env = spread(num_envs=5)
    obs, _ = env.reset()
    states = env.state()  # skrl's wrappers give {agent: the same global state tensor}
    moved_state = states["agent_0"] + 1.0
    perturbed_state = {uid: moved_state for uid in env.possible_agents}
    perturbed_obs = dict(obs, agent_1=obs["agent_1"] + 1.0)

    mappo = make_agent(env, "mappo", shared=shared)
    mappo.init()
    mappo.enable_training_mode(True)  # values are computed (and stored) while training
    base = _values(mappo, obs, states)
    moved = _values(mappo, obs, perturbed_state)
    assert all(not torch.allclose(base[u], moved[u]) for u in env.possible_agents)  # every agent's value moves

    ippo = make_agent(env, "ippo", shared=shared)
    ippo.init()
    ippo.enable_training_mode(True)
    base = _values(ippo, obs, states)
    moved = _values(ippo, perturbed_obs, states)
    assert not torch.allclose(base["agent_1"], moved["agent_1"])
    assert torch.equal(base["agent_0"], moved["agent_0"]) and torch.equal(base["agent_2"], moved["agent_2"])
    unchanged = _values(ippo, obs, perturbed_state)  # IPPO's critic ignores the global state
    assert all(torch.equal(base[u], unchanged[u]) for u in env.possible_agents)


def test_mappo_without_state_spaces_is_refused_with_the_fix():
    env = spread()
    with pytest.raises(ValueError, match=r"state_spaces.*IPPO|IPPO.*state_spaces"):
        MAPPO(
            possible_agents=env.possible_agents,
            models=make_models(env),
            observation_spaces=env.observation_spaces,
            action_spaces=env.action_spaces,
            cfg={},
        )


# ---------------------------------------------------------------- groups


def test_shared_models_form_one_group_with_one_optimizer_step_per_mini_batch():
    env = spread(num_envs=4)
    agent = make_agent(env, shared=True, cfg=SMALL)
    assert len(agent.groups) == 1 and agent.groups[0].uids == env.possible_agents
    optimizers = {id(agent.checkpoint_modules[uid]["optimizer"]) for uid in env.possible_agents}
    assert len(optimizers) == 1
    steps = []
    agent.groups[0].optimizer.register_step_post_hook(lambda *args: steps.append(1))
    drive(agent, env, 4)
    assert len(steps) == SMALL["learning_epochs"] * SMALL["mini_batches"]

    separate = make_agent(env, shared=False, cfg=dict(SMALL, batch_agent_models=False))
    assert len(separate.groups) == 3


def test_agents_sharing_only_one_model_are_refused():
    env = spread()
    models = make_models(env)
    models["agent_1"]["policy"] = models["agent_0"]["policy"]
    with pytest.raises(ValueError, match="share the policy model but not"):
        make_agent(env, models=models)


# ---------------------------------------------------------------- masks


def test_masked_agent_contributes_no_gradient():
    env = spread(num_envs=4)
    cfg = dict(SMALL, entropy_loss_scale=0.01)
    agent = make_agent(env, cfg=cfg)
    before = {uid: (params(agent.policies[uid]), params(agent.values[uid])) for uid in env.possible_agents}

    def mask_agent_1(t, infos):
        infos["agent_mask"] = {"agent_1": torch.zeros(env.num_envs, 1, dtype=torch.bool)}
        return infos

    drive(agent, env, 4, infos_fn=mask_agent_1)
    after = {uid: (params(agent.policies[uid]), params(agent.values[uid])) for uid in env.possible_agents}
    assert torch.equal(before["agent_1"][0], after["agent_1"][0]) and torch.equal(
        before["agent_1"][1], after["agent_1"][1]
    )
    assert not torch.equal(before["agent_0"][0], after["agent_0"][0])


def test_masked_samples_do_not_influence_a_shared_update():
    """Garbage rewards of masked samples change nothing: the shared model ends bitwise identical."""

    def run(garbage):
        torch.manual_seed(0)
        env = spread(num_envs=4, seed=1)
        agent = make_agent(env, shared=True, cfg=dict(SMALL, value_preprocessor=ValueNorm))

        def infos_fn(t, infos):
            infos["agent_mask"] = {"agent_2": torch.tensor([[True], [False], [True], [False]])}
            return infos

        original_step = env.step

        def step(actions):
            obs, rewards, term, trunc, infos = original_step(actions)
            rewards = dict(rewards)
            r = rewards["agent_2"].clone()
            if garbage:
                r[[1, 3]] = 1e6
            rewards["agent_2"] = r
            return obs, rewards, term, trunc, infos

        env.step = step
        drive(agent, env, 4, infos_fn=infos_fn)
        return params(agent.groups[0].policy), params(agent.groups[0].value)

    clean, dirty = run(False), run(True)
    assert torch.equal(clean[0], dirty[0]) and torch.equal(clean[1], dirty[1])


def test_masked_actions_are_never_sampled_and_probabilities_are_consistent():
    env = spread(num_envs=64, continuous=False, action_masks=True)
    agent = make_agent(env, cfg=SMALL)
    agent.init()
    agent.enable_training_mode(True)
    obs, infos = env.reset()
    states = env.state()
    hits = 0
    for t in range(40):
        # what skrl's trainers do: infos of the last step reach the agent through record_transition
        actions, _ = agent.act(obs, states, timestep=t, timesteps=40)
        masks = infos["action_mask"]
        # skrl's trainers never hand the infos of env.reset() to an agent: masks given through infos apply from
        # the first step on (a Dict observation space with an "action_mask" entry applies from the reset)
        for uid in env.possible_agents if t > 0 else []:
            allowed = masks[uid].gather(1, actions[uid].long())
            assert allowed.all()
            hits += int((~masks[uid]).any())
        next_obs, rewards, term, trunc, infos = env.step(actions)
        agent.record_transition(
            observations=obs,
            states=states,
            actions=actions,
            rewards=rewards,
            next_observations=next_obs,
            next_states=env.state(),
            terminated=term,
            truncated=trunc,
            infos=infos,
            timestep=t,
            timesteps=40,
        )
        agent.post_interaction(timestep=t, timesteps=40)
        obs, states = next_obs, env.state()
    assert hits > 0  # the masks did forbid something

    policy = CategoricalMLP(
        observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0")
    )
    x = torch.randn(3, env.observation_space("agent_0").shape[0])
    mask = torch.tensor([[True, False, True, False, False]] * 3)
    _, out = policy.act({"observations": x, "action_mask": mask}, role="policy")
    probs = policy.distribution(role="policy").probs
    assert torch.all(probs[~mask] == 0) and torch.allclose(probs.sum(-1), torch.ones(3))
    for a in (0, 2):
        _, out = policy.act(
            {"observations": x, "action_mask": mask, "taken_actions": torch.full((3, 1), a)}, role="policy"
        )
        torch.testing.assert_close(out["log_prob"].view(-1), probs[:, a].log())
    entropy = policy.get_entropy(role="policy").view(-1)
    p = probs[:, [0, 2]]
    torch.testing.assert_close(entropy, -(p * p.log()).sum(-1))


# ---------------------------------------------------------------- evaluation


@pytest.mark.parametrize("trainer_cls", [SequentialTrainer, StepTrainer])
@pytest.mark.parametrize("stochastic", [False, True])
def test_evaluation_acts_with_mean_actions_unless_stochastic(trainer_cls, stochastic):
    env = spread(num_envs=8)
    agent = make_agent(env, cfg=SMALL)
    seen_obs, sent_actions = [], []
    act, step = agent.act, env.step

    def recording_act(observations, states, **kwargs):
        seen_obs.append(observations["agent_0"].clone())
        return act(observations, states, **kwargs)

    def recording_step(actions):
        sent_actions.append(actions["agent_0"].clone())
        return step(actions)

    agent.act, env.step = recording_act, recording_step
    cfg = {"timesteps": 3, "headless": True, "disable_progressbar": True, "stochastic_evaluation": stochastic}
    trainer = trainer_cls(env=env, agents=agent, cfg=cfg)
    if trainer_cls is StepTrainer:
        for _ in range(3):
            trainer.eval()
    else:
        trainer.eval()
    with torch.no_grad():
        _, out = agent.policies["agent_0"].act({"observations": seen_obs[-1]}, role="policy")
    # the batched act and the model's own call agree to float rounding (their products run in other layouts)
    assert torch.allclose(sent_actions[-1], out["mean_actions"], rtol=0, atol=1e-6) != stochastic


# ---------------------------------------------------------------- optimisation options


def test_a_learning_rate_pair_sets_the_policys_and_the_value_models_rates():
    env = spread(num_envs=4)
    agent = make_agent(env, cfg=dict(SMALL, learning_rate=(1e-3, 5e-3)))
    group = agent.groups[0]
    optimizer = group.optimizer
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 5e-3]
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in group.parameters("policy")]
    assert [id(p) for p in optimizer.param_groups[1]["params"]] == [id(p) for p in group.parameters("value")]


def test_kl_adaptive_lr_divides_both_rates_once_per_epoch_while_the_kl_is_above_twice_its_threshold():
    """skrl's ``KLAdaptiveLR`` (factor 1.5): with a threshold no KL stays below, every epoch divides each rate."""
    env = spread(num_envs=4)
    kwargs = {"kl_threshold": 1e-9, "min_lr": 1e-6}
    cfg = dict(SMALL, learning_rate=(1e-3, 5e-3), learning_rate_scheduler=KLAdaptiveLR)
    agent = drive(make_agent(env, cfg=dict(cfg, learning_rate_scheduler_kwargs=kwargs)), env, SMALL["rollouts"])
    epochs = SMALL["learning_epochs"]
    rates = [g["lr"] for g in agent.groups[0].optimizer.param_groups]
    assert rates == pytest.approx([1e-3 / 1.5**epochs, 5e-3 / 1.5**epochs], rel=1e-12)


def test_a_kl_threshold_stops_each_epoch_at_the_first_mini_batch_past_it():
    """Without input statistics the first mini-batch replays acting (KL 0): it steps; every later mini-batch's KL is
    above a tiny threshold, so each epoch ends there, before its step: one step per update."""
    env = spread(num_envs=4)
    stopped = make_agent(env, cfg=dict(SMALL, learning_epochs=8, kl_threshold=1e-12, learning_rate=1e-2))
    steps = []
    stopped.groups[0].optimizer.register_step_post_hook(lambda *a: steps.append(1))
    drive(stopped, env, SMALL["rollouts"])
    assert len(steps) == 1


def test_a_kl_stop_ends_the_epoch_and_the_schedule_counts_every_epoch(tmp_path):
    # with input statistics refreshed before the epochs the first mini-batch's KL is above a tiny threshold: each epoch
    # stops before its first step and the next tries again (skrl's early stop); the schedule counts every epoch, as
    # skrl's does (torch warns that it stepped before the optimiser)
    env = spread(num_envs=4)
    cfg = dict(
        SMALL,
        kl_threshold=1e-12,
        observation_preprocessor=RunningStandardScaler,
        learning_rate_scheduler=torch.optim.lr_scheduler.StepLR,
        learning_rate_scheduler_kwargs={"step_size": 1, "gamma": 0.5},
    )
    agent = make_agent(env, cfg=cfg)
    steps = []
    agent.groups[0].optimizer.register_step_post_hook(lambda *a: steps.append(1))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*before.*optimizer.step")
        drive(agent, env, SMALL["rollouts"])
    agent.save(str(tmp_path / "agent.pt"))
    scheduler = torch.load(tmp_path / "agent.pt", weights_only=True)["agent_0"]["scheduler"]
    assert not steps and scheduler["last_epoch"] == SMALL["learning_epochs"]


def test_mixed_precision_on_cpu_trains_with_finite_parameters():
    env = spread(num_envs=4)
    agent = make_agent(env, shared=True, cfg=dict(SMALL, mixed_precision=True))
    before = params(agent.groups[0].policy)
    drive(agent, env, 8)
    after = params(agent.groups[0].policy)
    assert torch.isfinite(after).all() and not torch.equal(before, after)


def test_agent_id_input_for_a_shared_policy():
    env = spread(num_envs=4)
    from skrl_marl_ext.models import GaussianMLP, ValueMLP, agent_id_space

    obs_space = agent_id_space(env.observation_space("agent_0"), 3)
    state_space = agent_id_space(env.state_space("agent_0"), 3)
    policy = GaussianMLP(observation_space=obs_space, action_space=env.action_space("agent_0"))
    value = ValueMLP(observation_space=obs_space, state_space=state_space, input="states")
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}
    agent = make_agent(env, models=models, cfg=dict(SMALL, agent_id_input=True))
    agent.init()
    obs, _ = env.reset()
    same = {uid: obs["agent_0"] for uid in env.possible_agents}
    agent.enable_training_mode(False)
    _, outputs = agent.act(same, env.state(), timestep=0, timesteps=1)
    means = outputs["mean_actions"]
    assert not torch.equal(means["agent_0"], means["agent_1"])  # same observation, different id
    drive(agent, env, 4)


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_restores_everything(tmp_path):
    env = spread(num_envs=4)
    cfg = dict(
        SMALL,
        observation_preprocessor=RunningStandardScaler,
        state_preprocessor=RunningStandardScaler,
        value_preprocessor=ValueNorm,
        learning_rate_scheduler=torch.optim.lr_scheduler.StepLR,
        learning_rate_scheduler_kwargs={"step_size": 1, "gamma": 0.5},
    )
    agent = drive(make_agent(env, cfg=cfg), env, 8)
    path = str(tmp_path / "agent.pt")
    agent.save(path)

    fresh = make_agent(env, cfg=cfg)
    fresh.load(path)
    for uid in env.possible_agents:
        a, b = agent.group_of[uid], fresh.group_of[uid]
        assert torch.equal(params(a.policy), params(b.policy)) and torch.equal(params(a.value), params(b.value))
        sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
        assert sa["param_groups"] == sb["param_groups"]
        for k in sa["state"]:
            for name in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(sa["state"][k][name], sb["state"][k][name])
        assert [s.state_dict() for s in a.schedulers] == [s.state_dict() for s in b.schedulers]
        for key in ("observation_preprocessor", "state_preprocessor", "value_preprocessor"):
            for (n, x), (_, y) in zip(
                getattr(a, key).state_dict().items(), getattr(b, key).state_dict().items(), strict=True
            ):
                assert torch.equal(x, y), (uid, key, n)
    assert fresh.scaler.state_dict() == agent.scaler.state_dict()
    # and the restored agent acts the same
    obs, _ = env.reset()
    agent.enable_training_mode(False)
    fresh.enable_training_mode(False)
    states = env.state()
    _, o1 = agent.act(obs, states, timestep=0, timesteps=1)
    _, o2 = fresh.act(obs, states, timestep=0, timesteps=1)
    for uid in env.possible_agents:
        assert torch.equal(o1["mean_actions"][uid], o2["mean_actions"][uid])


def test_same_seed_gives_bitwise_identical_training():
    def run():
        torch.manual_seed(3)
        env = spread(num_envs=4, seed=3)
        agent = drive(make_agent(env, shared=False, cfg=SMALL), env, 8)
        return torch.cat([params(agent.policies[u]) for u in env.possible_agents])

    assert torch.equal(run(), run())


# ---------------------------------------------------------------- configuration errors


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"rolouts": 4}, "unknown config key 'rolouts'.*Did you mean 'rollouts'"),
        ({"rollouts": 0}, "rollouts"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"learning_epochs": {"agent_0": 2, "agent_1": 2}}, "misses agents"),
        ({"learning_epochs": {"agent_0": 2, "agent_1": 2, "agent_2": 2, "bob": 2}}, "not agents"),
    ],
)
def test_bad_config_is_refused_at_construction(cfg, match):
    env = spread(num_envs=4)
    with pytest.raises(ValueError, match=match):
        make_agent(env, cfg=cfg)


def test_mini_batches_larger_than_a_rollout_warn_on_the_first_step_without_memories():
    # without memories num_envs is known at the first step only; skrl accepts the config, so do we (see test_misuse)
    env = spread(num_envs=4)
    agent = make_agent(env, cfg={"mini_batches": 1000, "rollouts": 2, "learning_epochs": 1})
    with pytest.warns(UserWarning, match=r"mini_batches \(1000\).*8 samples"):
        drive(agent, env, 2)
    assert [agent.group_of[uid].mini_batches for uid in env.possible_agents] == [8, 8, 8]


def test_models_dict_without_value_is_refused():
    env = spread()
    models = make_models(env)
    del models["agent_2"]["value"]
    with pytest.raises(ValueError, match="value"):
        make_agent(env, models=models)


def test_wrong_policy_family_is_refused():
    env = spread(continuous=False)
    from skrl_marl_ext.models import GaussianMLP

    models = make_models(env)
    models["agent_0"]["policy"] = GaussianMLP(
        observation_space=env.observation_space("agent_0"), action_space=gymnasium.spaces.Box(-1, 1, (1,))
    )
    with pytest.raises(ValueError, match="Discrete"):
        make_agent(env, models=models)


def test_config_fields_all_have_docstrings_and_defaults():
    fields = dataclasses.fields(MAPPO_CFG)
    skrl_fields = {f.name for f in dataclasses.fields(SKRL_MAPPO_CFG)}
    assert skrl_fields <= {f.name for f in fields}  # a superset of skrl's config
    MAPPO_CFG()  # defaults construct


# ---------------------------------------------------------------- mini-batch order


def _recorded_mini_batches(monkeypatch, order, *, algo="mappo", epochs=2):
    """The sample indexes of every mini-batch the agent trained on in its first update (one list per epoch): each
    sample is known by the log-probability it was acted with (step ``t``, env ``n``: index ``t * N + n``), which the
    loss receives as ``old_log_prob``."""
    env = spread(num_envs=4)
    cfg = {"rollouts": 8, "learning_epochs": epochs, "mini_batches": 4, "mini_batch_order": order}
    cfg["batch_agent_models"] = True  # one group, so one sample order per mini-batch
    agent = make_agent(env, algo, cfg=cfg)
    acted, seen, act, loss = [], [], agent.act, agent.ppo_loss
    uid = env.possible_agents[0]

    def recording_act(observations, states, **kwargs):
        actions, outputs = act(observations, states, **kwargs)
        acted.append(outputs[uid]["log_prob"].view(-1).clone())
        return actions, outputs

    def recording_loss(**kwargs):
        seen.append(kwargs["old_log_prob"][0].view(-1).clone())  # the group's first agent
        return loss(**kwargs)

    monkeypatch.setattr(agent, "act", recording_act)
    monkeypatch.setattr(agent, "ppo_loss", recording_loss)
    drive(agent, env, 8)
    index = {value: i for i, value in enumerate(torch.cat(acted).tolist())}
    assert len(index) == 32 and len(seen) == epochs * 4  # every sample told apart by its log-probability
    seen = [torch.tensor([index[value] for value in batch.tolist()]) for batch in seen]
    return [seen[e * 4 : (e + 1) * 4] for e in range(epochs)]


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_sequential_mini_batches_are_skrls(monkeypatch, algo):
    """``mini_batch_order="sequential"``: every epoch the rollout's samples in order, cut into the blocks skrl 2.1.1's
    ``Memory.sample_all`` cuts (a memory of the same shape holding each sample's index says which)."""
    epochs = _recorded_mini_batches(monkeypatch, "sequential", algo=algo)
    memory = RandomMemory(memory_size=8, num_envs=4)
    memory.create_tensor(name="index", size=1, dtype=torch.float32)
    for step in range(8):
        memory.add_samples(index=torch.arange(step * 4, (step + 1) * 4, dtype=torch.float32).view(4, 1))
    skrl_blocks = [b[0].view(-1).long() for b in memory.sample_all(names=["index"], mini_batches=4)]
    for epoch in epochs:
        assert [b.tolist() for b in epoch] == [b.tolist() for b in skrl_blocks]


def test_shuffled_mini_batches_are_a_fresh_permutation_each_epoch(monkeypatch):
    first, second = _recorded_mini_batches(monkeypatch, "shuffled")
    for epoch in (first, second):
        assert sorted(torch.cat(epoch).tolist()) == list(range(32))
    assert torch.cat(first).tolist() != list(range(32))
    assert torch.cat(first).tolist() != torch.cat(second).tolist()


def test_mini_batch_order_is_checked():
    env = spread(num_envs=2)
    with pytest.raises(ValueError, match=r"cfg.mini_batch_order must be one of \['shuffled', 'sequential'\]"):
        make_agent(env, cfg={"mini_batch_order": "random"})
