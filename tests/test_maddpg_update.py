"""MADDPG's gradient step through public behaviour (``update``, ``post_interaction``, skrl's trainers): critic
targets, losses and gradients against hand computations and the functional losses, target updates, policy delay,
twin critics, masks, schedulers, distributed ranks."""

import copy
import warnings

import pytest
import torch
from helpers import drive, make_maddpg, one_thread, params, spread  # noqa: F401  (one_thread: autouse)
from maddpg_helpers import (
    NEVER,
    ConstantNoise,
    RandomMaskSpread,
    fix_indexes,
    hand_critic_losses,
    joint_part,
    record_grads,
    record_role_grads,
    spy,
    step,
)
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext.functional import (
    actor_loss,
    critic_loss,
    critic_target,
    joint_with_own_actions,
    smooth_target_actions,
    td_target,
)

TWIN_TARGETS = ("target_critic", "target_critic_2")

# ---------------------------------------------------------------- the agent's step is the functional losses'


def _hand_gradients(agent, models, batch, *, twin, regularization, smoothing=None, time_limit_bootstrap=False):
    """The gradients of one gradient step built by hand from the functional losses, group by group as the agent
    takes them: ``critic_loss`` w.r.t. the critics of ``models`` (copies from before the step) and ``actor_loss``
    w.r.t. their policies, through the agent's critics as its critic step left them.

    :return: ``{role: {uid: [gradient of each parameter]}}``.
    """
    uids, b = agent.possible_agents, batch
    width = b[uids[0]]["actions"].shape[-1]
    joint_taken = torch.cat([b[u]["actions"] for u in uids], dim=-1)
    with torch.no_grad():
        next_actions = [models[u]["target_policy"].net(b[u]["next_observations"]).tanh() for u in uids]
        if smoothing is not None:
            bounds = torch.ones(width)
            next_actions = [
                smooth_target_actions(
                    actions=a, noise=torch.full_like(a, smoothing), noise_clip=0.5, low=-bounds, high=bounds
                )
                for a in next_actions
            ]
        joint_next = torch.cat(next_actions, dim=-1)
    critic_roles = ("critic", "critic_2") if twin else ("critic",)
    out = {role: {} for role in (*critic_roles, "policy")}

    def grads(loss, group, roles):
        modules = {id(models[u][r]): models[u][r] for r in roles for u in group.uids}  # a shared model once
        flat = iter(torch.autograd.grad(loss, [p for m in modules.values() for p in m.parameters()]))
        per_module = {key: [next(flat) for _ in m.parameters()] for key, m in modules.items()}
        for r in roles:
            for u in group.uids:
                out[r][u] = per_module[id(models[u][r])]

    for group in agent.groups:

        def stack(key, group=group):
            return torch.stack([b[u][key] for u in group.uids])

        def call(role, inputs, group=group, source=models):
            return torch.stack([source[u][role].net(inputs(i, u)) for i, u in enumerate(group.uids)])

        agent_mask = stack("agent_mask")
        mask = agent_mask if time_limit_bootstrap else agent_mask & ~stack("truncated")
        with torch.no_grad():
            next_q = [
                call(f"target_{r}", lambda i, u: torch.cat([b[u]["next_states"], joint_next], -1)) for r in critic_roles
            ]
            y = critic_target(
                rewards=stack("rewards"), next_q_values=next_q, terminated=stack("terminated"), discount_factor=0.9
            )
        q = [call(r, lambda i, u: torch.cat([b[u]["states"], joint_taken], -1)) for r in critic_roles]
        grads(critic_loss(q_values=q, targets=y, mask=mask, per_agent=group.batched)["loss"], group, critic_roles)

        pre_tanh = call("policy", lambda i, u: b[u]["observations"])
        columns = torch.stack([uids.index(u) * width + torch.arange(width) for u in group.uids])
        joint = joint_with_own_actions(joint_actions=joint_taken, own_actions=pre_tanh.tanh(), columns=columns)
        q_pi = call("critic", lambda i, u, joint=joint: torch.cat([b[u]["states"], joint[i]], -1), source=agent.models)
        loss = actor_loss(
            q_values=q_pi, mask=agent_mask, pre_tanh=pre_tanh, regularization=regularization, per_agent=group.batched
        )
        grads(loss["loss"], group, ("policy",))
    return out


MATCH_CASES = {
    "loop-penalty": ({"batch_agent_models": False, "policy_regularization": 0.01}, {}),
    "batched-penalty": ({"batch_agent_models": True, "policy_regularization": 0.01}, {}),
    "shared-twin-smoothing": (
        {"smooth_regularization_noise": ConstantNoise(0.8), "smooth_regularization_clip": 0.5},
        {"shared": True, "twin": True},
    ),
    "batched-twin-agent-masks-bootstrap": (
        {"policy_regularization": 0.01, "time_limit_bootstrap": True},
        {"twin": True, "agent_masks": True},
    ),
}


@pytest.mark.parametrize("case", list(MATCH_CASES))
def test_gradient_step_takes_the_gradients_of_the_functional_losses(case):
    """One public gradient step: every critic's and policy's gradient (before clipping) is that of
    ``functional.critic_loss`` / ``actor_loss`` built by hand from the models on the sampled batch (one mean over a
    shared group's rows, each agent's own loss in a batched one); the actor's includes the pre-tanh penalty."""
    cfg, kinds = MATCH_CASES[case]
    env = spread(num_envs=4, num_agents=3, continuous=True, seed=9, agent_masks=kinds.get("agent_masks", False))
    cfg = {"batch_size": 32, "discount_factor": 0.9, "learning_starts": NEVER, "gradient_steps": 1, **cfg}
    twin = kinds.get("twin", False)
    agent = make_maddpg(env, cfg, shared=kinds.get("shared", False), twin=twin)
    drive(agent, env, 20)
    batch = fix_indexes(agent)
    models = copy.deepcopy({uid: agent.models[uid] for uid in env.possible_agents})
    roles = ("critic", "critic_2", "policy") if twin else ("critic", "policy")
    recorders = {role: record_role_grads(agent, role) for role in roles}
    step(agent)
    regularization = cfg.get("policy_regularization", 0.0)
    kwargs = dict(
        twin=twin,
        smoothing=0.8 if "smooth_regularization_noise" in cfg else None,
        time_limit_bootstrap=cfg.get("time_limit_bootstrap", False),
    )
    hand = _hand_gradients(agent, models, batch, regularization=regularization, **kwargs)
    for role, recorder in recorders.items():
        for uid, per_parameter in recorder().items():
            # one backward pass each: the critics are frozen while the policies step (no weight gradients there)
            assert all(len(g) == 1 for g in per_parameter), (role, uid)
            for g, expected in zip(per_parameter, hand[role][uid], strict=True):
                torch.testing.assert_close(g[0], expected, rtol=1e-5, atol=1e-7)
    if regularization:  # the penalty shows in the policies' gradients
        without = _hand_gradients(agent, models, batch, regularization=0.0, **kwargs)["policy"]
        got = recorders["policy"]()
        for uid in env.possible_agents:
            assert any(not torch.allclose(g[0], w, rtol=1e-3) for g, w in zip(got[uid], without[uid], strict=True))


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_policy_regularization_adds_the_mean_square_of_the_pre_tanh_output(batched):
    """The actor loss grows by weight x each agent's mean over rows and action dimensions of net(o)^2 (each agent's
    own mean in a batched group): a public gradient step's policy gradients are those of -mean Q + that penalty,
    computed here from the models by hand, and not those without it."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=5)
    cfg = {
        "batch_size": 16,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "policy_regularization": 0.01,
        "batch_agent_models": batched,
    }
    agent = make_maddpg(env, cfg)
    drive(agent, env, 10)
    batch = fix_indexes(agent)
    uids = env.possible_agents
    policies = copy.deepcopy({u: agent.models[u]["policy"] for u in uids})
    recorder = record_role_grads(agent, "policy")
    step(agent)
    joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
    for i, uid in enumerate(uids):
        pre_tanh = policies[uid].net(batch[uid]["observations"])
        width = pre_tanh.shape[-1]
        joint_pi = torch.cat([joint[:, : i * width], pre_tanh.tanh(), joint[:, (i + 1) * width :]], dim=-1)
        q = agent.models[uid]["critic"].net(torch.cat([batch[uid]["states"], joint_pi], -1))
        penalty = pre_tanh.square().mean()
        assert penalty > 0
        with_penalty = torch.autograd.grad(
            -q.mean() + 0.01 * penalty, list(policies[uid].parameters()), retain_graph=True
        )
        without = torch.autograd.grad(-q.mean(), list(policies[uid].parameters()))
        got = [g[0] for g in recorder()[uid]]
        for g, expected in zip(got, with_penalty, strict=True):
            torch.testing.assert_close(g, expected, rtol=1e-5, atol=1e-7)
        assert any(not torch.allclose(g, w, rtol=1e-3) for g, w in zip(got, without, strict=True))


# ---------------------------------------------------------------- critic targets and losses by hand


@pytest.mark.parametrize("time_limit_bootstrap", [False, True])
def test_critic_target_matches_hand_computation(time_limit_bootstrap):
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=1)
    cfg = {
        "batch_size": 32,
        "discount_factor": 0.9,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "time_limit_bootstrap": time_limit_bootstrap,
    }
    agent = make_maddpg(env, cfg)
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
    batch = fix_indexes(agent)

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

    agent.tracking_data.clear()
    step(agent)
    for uid in env.possible_agents:
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(expected[uid].item(), rel=1e-5)


@pytest.mark.parametrize("value", [0.8, -0.3], ids=["clipped", "inside"])
def test_target_policy_smoothing_matches_hand_computation(value):
    """y = r + gamma (1 - d) Q'(s', clip(mu'(o') + clip(noise, -c, c), low, high)): 0.8 is clipped to c = 0.5, and
    target actions near the bounds cross them."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=4)
    cfg = {
        "batch_size": 32,
        "discount_factor": 0.9,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "smooth_regularization_noise": ConstantNoise(value),
        "smooth_regularization_clip": 0.5,
    }
    agent = make_maddpg(env, cfg)
    drive(agent, env, 30)
    models = agent.models
    with torch.no_grad():  # target actions near the bounds, so that the noise crosses them in some rows
        for p in agent.groups[0].parameters("target_policy"):
            p.mul_(4.0)
    batch = fix_indexes(agent)
    noise = max(min(value, 0.5), -0.5)
    expected, _ = hand_critic_losses(
        models,
        batch,
        env.possible_agents,
        target_action=lambda u, o: (models[u]["target_policy"].net(o).tanh() + noise).clamp(-1.0, 1.0),
        keep_truncated=False,
    )
    agent.tracking_data.clear()
    step(agent)
    for uid in env.possible_agents:
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(expected[uid].item(), rel=1e-5)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_twin_critics_target_and_loss_match_hand_computation(batched):
    """y = r + gamma (1 - d) min(Q'_1(s', a'), Q'_2(s', a')) and L = mean (Q_1 - y)^2 + mean (Q_2 - y)^2 per agent,
    worked out from the four critics by hand: a public gradient step's gradients of both critics are those of this L,
    and its tracked target mean and critic loss are those of this target."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=6)
    cfg = {
        "batch_size": 32,
        "discount_factor": 0.9,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "batch_agent_models": batched,
    }
    agent = make_maddpg(env, cfg, twin=True)
    drive(agent, env, 30)
    generator = torch.Generator().manual_seed(1)
    for uid in env.possible_agents:  # rewards in the scale of Q, so that the target's min matters
        memory = agent.memories[uid]
        memory.tensors["rewards"].copy_(torch.randn(memory.tensors["rewards"].shape, generator=generator))
    batch = fix_indexes(agent)
    uids = env.possible_agents
    models = copy.deepcopy({u: agent.models[u] for u in uids})  # as they are before the step
    with torch.no_grad():
        next_joint = torch.cat([models[u]["target_policy"].net(batch[u]["next_observations"]).tanh() for u in uids], -1)
    joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
    expected, targets, picks = {}, {}, []
    for uid in uids:
        b = batch[uid]
        with torch.no_grad():
            next_q = [models[uid][r].net(torch.cat([b["next_states"], next_joint], -1)) for r in TWIN_TARGETS]
        picks.append(next_q[0] < next_q[1])
        y = b["rewards"] + 0.9 * (1.0 - b["terminated"].float()) * torch.minimum(*next_q)
        keep = ~b["truncated"].view(-1)
        q = [models[uid][r].net(torch.cat([b["states"], joint], -1)) for r in ("critic", "critic_2")]
        losses = [((qi - y) ** 2)[keep].mean() for qi in q]
        critics = [p for r in ("critic", "critic_2") for p in models[uid][r].parameters()]
        expected[uid] = torch.autograd.grad(sum(losses), critics)
        targets[uid] = (y[keep].mean(), losses[0].detach())
    picks = torch.cat(picks)
    assert picks.any() and not picks.all()  # both target critics give the minimum in some rows
    recorders = [record_role_grads(agent, role) for role in ("critic", "critic_2")]
    agent.tracking_data.clear()
    step(agent)
    for uid in uids:
        got = [g for recorder in recorders for g in recorder()[uid]]
        assert all(g for g in got)  # (the first critic's again in the actor loss's backward pass)
        for g, e in zip(got, expected[uid], strict=True):
            torch.testing.assert_close(g[0], e, rtol=1e-5, atol=1e-7)
        target_mean, critic_1_loss = targets[uid]
        assert agent.tracking_data[f"Target / Target ({uid}) (mean)"][-1] == pytest.approx(target_mean.item(), rel=1e-5)
        assert agent.tracking_data[f"Loss / Critic loss ({uid})"][-1] == pytest.approx(critic_1_loss.item(), rel=1e-5)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "loop"])
def test_twin_critics_both_learn_and_the_actor_follows_the_first(batched):
    """Both critics step (one optimiser over both), both targets follow their own critic, and the actor loss is
    -mean Q_1(s, a with the agent's own action from its policy), not Q_2's: its gradients are those of Q_1's."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=7)
    cfg = {
        "batch_size": 16,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "polyak": 0.25,
        "batch_agent_models": batched,
    }
    agent = make_maddpg(env, cfg, twin=True)
    drive(agent, env, 10)
    models, uids = agent.models, env.possible_agents
    batch = fix_indexes(agent)
    joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
    policies = copy.deepcopy({u: models[u]["policy"] for u in uids})
    before = {(u, r): params(models[u][r]).clone() for u in uids for r in models[u]}
    recorder = record_role_grads(agent, "policy")
    step(agent)
    for i, uid in enumerate(uids):
        own = policies[uid].net(batch[uid]["observations"]).tanh()
        width = own.shape[-1]
        joint_pi = torch.cat([joint[:, : i * width], own, joint[:, (i + 1) * width :]], dim=-1)
        hand = {}
        for role in ("critic", "critic_2"):  # the critics as the critic step left them
            q = models[uid][role].net(torch.cat([batch[uid]["states"], joint_pi], -1))
            hand[role] = torch.autograd.grad(-q.mean(), list(policies[uid].parameters()), retain_graph=True)
        got = [g[0] for g in recorder()[uid]]
        for g, expected in zip(got, hand["critic"], strict=True):
            torch.testing.assert_close(g, expected, rtol=1e-5, atol=1e-7)
        assert any(not torch.allclose(g, e, rtol=1e-3) for g, e in zip(got, hand["critic_2"], strict=True))
    for uid in uids:
        for role in ("critic", "critic_2", "policy"):
            assert not torch.equal(params(models[uid][role]), before[uid, role])
            expected = 0.25 * params(models[uid][role]) + 0.75 * before[uid, f"target_{role}"]
            assert torch.allclose(params(models[uid][f"target_{role}"]), expected, atol=1e-6)


# ---------------------------------------------------------------- targets, policy delay, schedulers


def test_targets_follow_polyak_after_each_gradient_step():
    env = spread(num_envs=4, num_agents=2, continuous=True)
    agent = make_maddpg(env, {"batch_size": 16, "polyak": 0.2, "learning_starts": NEVER, "gradient_steps": 1})
    drive(agent, env, 10)
    models = agent.models["agent_1"]
    assert torch.equal(params(models["target_critic"]), params(models["critic"]))  # hard copy at construction
    before = {role: params(models[f"target_{role}"]) for role in ("policy", "critic")}
    step(agent)
    for role in ("policy", "critic"):
        online, target = params(models[role]), params(models[f"target_{role}"])
        assert not torch.equal(online, before[role])
        torch.testing.assert_close(target, 0.2 * online + 0.8 * before[role], rtol=0, atol=1e-7)
        assert all(not p.requires_grad for p in models[f"target_{role}"].parameters())


@pytest.mark.parametrize("twin", [False, True], ids=["one-critic", "twin"])
def test_policy_delay_steps_the_actor_and_the_targets_every_nth_gradient_step(twin):
    """policy_delay 2 (TD3's): the critics step every gradient step; the policy and every target on the 2nd, 4th, ..
    (target = polyak online + (1 - polyak) target, from the online models of that step); the policy loss is tracked
    on those steps only, as skrl's TD3 does."""
    env = spread(num_envs=4, num_agents=2, continuous=True, seed=8)
    cfg = {"batch_size": 16, "learning_starts": NEVER, "gradient_steps": 1, "polyak": 0.5, "policy_delay": 2}
    agent = make_maddpg(env, cfg, twin=twin)
    drive(agent, env, 10)
    models, uids = agent.models, env.possible_agents
    critics = ("critic", "critic_2") if twin else ("critic",)
    snapshot = lambda: {(u, r): params(models[u][r]).clone() for u in uids for r in models[u]}  # noqa: E731
    agent.tracking_data.clear()
    start = snapshot()
    step(agent)  # 1st: critics only
    first = snapshot()
    for uid in uids:
        for role in critics:
            assert not torch.equal(first[uid, role], start[uid, role])
        for role in ("policy", "target_policy", *(f"target_{c}" for c in critics)):
            assert torch.equal(first[uid, role], start[uid, role])
    assert f"Loss / Policy loss ({uids[0]})" not in agent.tracking_data
    step(agent)  # 2nd: critics, the policy, then every target from this step's online models
    second = snapshot()
    for uid in uids:
        assert not torch.equal(second[uid, "policy"], first[uid, "policy"])
        for role in ("policy", *critics):
            expected = 0.5 * second[uid, role] + 0.5 * first[uid, f"target_{role}"]
            assert torch.allclose(second[uid, f"target_{role}"], expected, atol=1e-6)
    assert len(agent.tracking_data[f"Loss / Policy loss ({uids[0]})"]) == 1
    assert len(agent.tracking_data[f"Loss / Critic loss ({uids[0]})"]) == 2


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
        agent = drive(make_maddpg(env, cfg), env, 10)
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
    agent = make_maddpg(env, cfg)
    for uid in env.possible_agents:
        next(agent.models[uid]["policy"].parameters()).register_hook(lambda grad: torch.full_like(grad, float("inf")))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*lr_scheduler")
        drive(agent, env, 6)
    for uid in env.possible_agents:
        modules = agent.checkpoint_modules[uid]
        assert modules["policy_scheduler"].last_epoch == 0 and modules["critic_scheduler"].last_epoch == 6


# ---------------------------------------------------------------- which agents' models a loss reaches


def test_discrete_actor_gradient_flows_through_gumbel_into_the_acting_agent_only():
    """The critics read the stored discrete actions one-hot; each agent's actor loss puts its own Gumbel-softmax
    action into the joint action, and its gradient reaches its own policy only: in one public gradient step every
    policy gets exactly one gradient (from its own agent's loss), agent_1's non-zero."""
    env = spread(num_envs=4, num_agents=3, continuous=False)
    cfg = {"batch_size": 32, "learning_starts": NEVER, "gradient_steps": 1, "batch_agent_models": False}
    agent = make_maddpg(env, cfg)  # the loop: gradients reach each model's own parameters (batched: test_batched.py)
    drive(agent, env, 20)
    batch = fix_indexes(agent)
    uids = env.possible_agents
    seen = spy(agent.models["agent_1"]["critic"], "taken_actions", roles=("critic",))
    grads = {uid: record_grads(list(agent.models[uid]["policy"].parameters())) for uid in uids}
    step(agent)
    stored, with_own = seen  # the critic step's call, then the actor step's
    one_hot = torch.cat([torch.nn.functional.one_hot(batch[u]["actions"].long().view(-1), 5).float() for u in uids], -1)
    assert torch.equal(stored, one_hot) and torch.all(joint_part(agent, "agent_0", stored).sum(-1) == 1)
    own = joint_part(agent, "agent_1", with_own.detach())
    assert torch.all(own.sum(-1) == 1) and torch.all((own == 0) | (own == 1))
    for uid in ("agent_0", "agent_2"):
        assert torch.equal(joint_part(agent, uid, with_own.detach()), joint_part(agent, uid, one_hot))
    for uid in uids:
        assert all(len(g) == 1 for g in grads[uid]), uid
    assert sum(g[0].abs().sum() for g in grads["agent_1"]) > 0


def test_masked_agents_contribute_zero_gradient():
    env = spread(num_envs=4, num_agents=2, continuous=True, agent_masks=True)
    cfg = {"batch_size": 32, "learning_starts": NEVER, "gradient_steps": 1, "batch_agent_models": False}
    agent = make_maddpg(env, cfg)  # the loop: gradients reach each model's own parameters (batched: test_batched.py)
    drive(agent, env, 30)
    assert agent.memories["agent_0"].tensors["agent_mask"].dtype == torch.bool
    agent.memories["agent_1"].tensors["agent_mask"].fill_(False)  # agent_1 dead in every stored step
    grads = {
        uid: record_grads([p for role in ("critic", "policy") for p in agent.models[uid][role].parameters()])
        for uid in env.possible_agents
    }
    before = {uid: params(agent.models[uid]["policy"]) for uid in env.possible_agents}
    step(agent)
    for uid in env.possible_agents:
        assert all(g for g in grads[uid])  # the critic's and the policy's gradients were computed
        norm = sum(x.abs().sum() for g in grads[uid] for x in g)
        assert (norm == 0) == (uid == "agent_1")
    # the dead agent's models do not move, the live one's do
    assert torch.equal(params(agent.models["agent_1"]["policy"]), before["agent_1"])
    assert not torch.equal(params(agent.models["agent_0"]["policy"]), before["agent_0"])


def test_shared_models_form_one_group():
    env = spread(num_envs=4, num_agents=3, continuous=True)
    agent = make_maddpg(env, {"batch_size": 16, "learning_starts": 5}, shared=True)
    assert len(agent.groups) == 1 and agent.groups[0].uids == env.possible_agents
    before = params(agent.models["agent_0"]["policy"])
    drive(agent, env, 10)
    assert not torch.equal(params(agent.models["agent_2"]["policy"]), before)
    assert set(agent.tracking_data) >= {"Loss / Critic loss (agent_2)", "Q-network / Q (agent_0) (max)"}


# ---------------------------------------------------------------- action masks in the update


def test_target_next_actions_are_allowed_greedy_actions_of_the_stored_next_masks():
    """The next joint action a target critic reads in a public gradient step: each agent's one-hot argmax of its
    target policy's logits among the actions its stored ``next_action_mask`` allows."""
    env = RandomMaskSpread(num_envs=8)
    cfg = {"batch_size": 64, "learning_starts": NEVER, "gradient_steps": 1, "batch_agent_models": False}
    agent = drive(make_maddpg(env, cfg), env, 12)
    batch = fix_indexes(agent)
    seen = spy(agent.models["agent_0"]["target_critic"], "taken_actions")
    step(agent)
    (joint_next,) = seen
    hits = 0
    for uid in env.possible_agents:
        next_mask = batch[uid]["next_action_mask"]
        action = joint_part(agent, uid, joint_next)
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
    cfg = {
        "batch_size": 64,
        "learning_starts": NEVER,
        "gradient_steps": 1,
        "gumbel_temperature": 0.25,
        "batch_agent_models": False,  # the loop: gradients reach each model's own parameters
    }
    agent = drive(make_maddpg(env, cfg), env, 12)
    batch = fix_indexes(agent)
    seen = spy(agent.models["agent_1"]["critic"], "taken_actions", roles=("critic",))
    grads = record_grads(list(agent.models["agent_1"]["policy"].parameters()))
    step(agent)
    own = joint_part(agent, "agent_1", seen[-1].detach())  # the actor step's: agent_1's Gumbel-softmax action
    mask = batch["agent_1"]["action_mask"]
    assert torch.all(own.sum(-1) == 1) and torch.all(own[~mask] == 0)
    assert bool((~mask).any())
    assert all(len(g) == 1 and torch.isfinite(g[0]).all() for g in grads) and sum(g[0].abs().sum() for g in grads) > 0


# ---------------------------------------------------------------- distributed


def _gloo_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(100 + rank)  # different initial weights per rank: the broadcast must fix that
        env = spread(num_envs=4, num_agents=2, continuous=True, seed=10 + rank)  # different data per rank
        cfg = {"batch_size": 16, "state_preprocessor": RunningStandardScaler}
        agent = make_maddpg(env, cfg)
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
