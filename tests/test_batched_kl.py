"""A batched group adapts to each agent's own KL as the agents run one by one do: ``KLAdaptiveLR`` adapts each agent's
learning rates to its own epoch-mean KL, and ``kl_threshold`` stops only the agent whose mini-batch KL passed it, for
the rest of that epoch (skrl 2.1.1's early stop: the next epoch tries again). Batched equals one by one, and the
checkpoints move between the two and skrl's MAPPO."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from helpers import (  # noqa: F401  (one_thread: autouse)
    QUIET,
    assert_same_checkpoints,
    drive,
    lockstep,
    make_agent,
    make_models,
    one_thread,
    params,
)
from skrl.memories.torch import RandomMemory
from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO
from skrl.multi_agents.torch.mappo import MAPPO_CFG as SkrlMAPPO_CFG
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext.envs import make_spread_env

ROLLOUTS, EPOCHS, MINI_BATCHES = 6, 3, 3
BASE = {"rollouts": ROLLOUTS, "learning_epochs": EPOCHS, "mini_batches": MINI_BATCHES, "grad_norm_clip": 0.5}
KL_ADAPTIVE = {
    "learning_rate": (3e-3, 1e-3),  # two parameter groups, each agent's both scaled by its scheduler
    "learning_rate_scheduler": KLAdaptiveLR,
    "learning_rate_scheduler_kwargs": {"kl_threshold": 0.004, "min_lr": 1e-5},
}
KL_STOP = {"learning_rate": 3e-3, "kl_threshold": 0.008}
CASES = {"kl-adaptive": KL_ADAPTIVE, "kl-threshold": KL_STOP, "both": {**KL_ADAPTIVE, "kl_threshold": 0.008}}


def spread():
    return make_spread_env(num_envs=4, num_agents=3, episode_length=5)


def pair(env, cfg, seed=0):
    """A batched agent and a one-by-one agent with the same models and config."""
    torch.manual_seed(seed)
    models = make_models(env, hidden=(16, 16))
    batched = make_agent(env, cfg={**BASE, **cfg, "batch_agent_models": True}, models=models)
    loop = make_agent(env, cfg={**BASE, **cfg, "batch_agent_models": False}, models=copy.deepcopy(models))
    assert [(g.size, g.batched) for g in batched.groups] == [(3, True)]
    assert [(g.size, g.batched) for g in loop.groups] == [(1, False)] * 3
    return batched, loop


def learning_rates(agent, env):
    """Each agent's learning rates (policy, value), from its optimiser's checkpoint entry."""
    rates = {}
    for uid in env.possible_agents:
        state = agent.checkpoint_modules[uid]["optimizer"].state_dict()
        rates[uid] = tuple(group["lr"] for group in state["param_groups"])
    return rates


def adam_steps(agent, env):
    """The Adam steps each agent took, from its optimiser's checkpoint entry."""
    steps = {}
    for uid in env.possible_agents:
        state = agent.checkpoint_modules[uid]["optimizer"].state_dict()["state"]
        steps[uid] = int(state[0]["step"]) if state else 0
    return steps


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_batched_update_equals_the_per_agent_loop(case):
    """Several updates on the same rollouts, each from equal states: parameters, Adam moments and step counts, each
    agent's learning rates and scheduler state within 1e-6. Each agent's learning rates move, apart from the others';
    in an update some agents stop in the middle of an epoch while others take more steps.

    Once the agents' learning rates differ, the batched group steps them in one vectorised Adam step whose rounding
    differs from torch's kernel by an ulp or so; over many updates training amplifies that (the loop's next gradients
    are taken at other parameters), so each update starts from the batched agent's state and one update is compared."""
    env = spread()
    cfg = CASES[case]
    # mini-batches in order: the loop draws one permutation per agent, a batched group one for all
    batched, loop = pair(env, {**cfg, "mini_batch_order": "sequential"})
    before = {uid: params(batched.models[uid]["policy"]) for uid in env.possible_agents}
    rates, steps, taken = [], [], {uid: 0 for uid in env.possible_agents}
    for _ in lockstep(batched, loop, env, 4 * ROLLOUTS, rollouts=ROLLOUTS):
        assert_same_checkpoints(batched, loop, env)
        for uid in env.possible_agents:  # the next update starts from equal states
            for name, module in loop.checkpoint_modules[uid].items():
                module.load_state_dict(copy.deepcopy(batched.checkpoint_modules[uid][name].state_dict()))
        rates.append(learning_rates(batched, env))
        total = adam_steps(batched, env)
        steps.append([total[uid] - taken[uid] for uid in env.possible_agents])  # this update's steps, per agent
        taken = total
    initial = tuple(cfg["learning_rate"]) if isinstance(cfg["learning_rate"], tuple) else (cfg["learning_rate"],)
    if "learning_rate_scheduler" in cfg:  # each agent's rates moved, and apart from the others'
        for uid in env.possible_agents:
            assert any(abs(r[uid][0] / initial[0] - 1) > 0.1 for r in rates), rates
        assert any(len({round(rate[0], 9) for rate in r.values()}) > 1 for r in rates), rates
    else:
        assert all(rate == initial for r in rates for rate in r.values())
    every = EPOCHS * MINI_BATCHES
    if "kl_threshold" in cfg:  # an agent stopped mid-epoch while another went on
        assert any(max(s) > min(s) and any(n % MINI_BATCHES for n in s) for s in steps), steps
    else:
        assert all(n == every for s in steps for n in s)
    after = {uid: params(batched.models[uid]["policy"]) for uid in env.possible_agents}
    assert all((after[uid] - before[uid]).abs().max() > 1e-3 for uid in env.possible_agents)  # they all learned


# ---------------------------------------------------------------- checkpoints


def skrl_mappo(env, cfg):
    """skrl 2.1.1's own MAPPO with ``cfg`` (its per-agent ``*_kwargs`` dicts and memories, as it needs them)."""
    uids = env.possible_agents
    cfg = dict(cfg, learning_rate_scheduler_kwargs={uid: cfg["learning_rate_scheduler_kwargs"] for uid in uids})
    for kind in ("observation", "state", "value"):
        cfg[f"{kind}_preprocessor_kwargs"] = {uid: {} for uid in uids}
    return SkrlMAPPO(
        possible_agents=uids,
        models=make_models(env, hidden=(16, 16)),
        memories={uid: RandomMemory(memory_size=ROLLOUTS, num_envs=env.num_envs) for uid in uids},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=SkrlMAPPO_CFG(**cfg, experiment=QUIET),
    )


def assert_same_as_skrl(skrl_agent, ours, env):
    """Every agent's models, learning rate and Adam state (step count, moments) equal, parameter by parameter."""
    for uid in env.possible_agents:
        for role in ("policy", "value"):
            a, b = skrl_agent.models[uid][role].state_dict(), ours.models[uid][role].state_dict()
            assert all(torch.equal(a[k], b[k]) for k in a), (uid, role)
        theirs = skrl_agent.optimizers[uid].state_dict()
        mine = ours.checkpoint_modules[uid]["optimizer"].state_dict()
        assert [g["lr"] for g in theirs["param_groups"]] == [g["lr"] for g in mine["param_groups"]], uid
        assert theirs["state"].keys() == mine["state"].keys(), uid
        for key, state in theirs["state"].items():
            assert float(state["step"]) == float(mine["state"][key]["step"]), (uid, key)
            for name in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(state[name], mine["state"][key][name]), (uid, key, name)


def test_checkpoints_move_between_batched_one_by_one_and_skrl(tmp_path):
    """A batched group's checkpoint holds each agent's own learning rate, Adam step count and scheduler state: it loads
    one by one and into skrl's MAPPO with every tensor and number equal, and their files load into it."""
    env = spread()
    cfg = {**BASE, **KL_ADAPTIVE, "learning_rate": 3e-3, "kl_threshold": 0.008}  # one rate: skrl's one group

    def ours(batched, seed):
        torch.manual_seed(seed)
        models = make_models(env, hidden=(16, 16))
        return make_agent(env, cfg={**cfg, "batch_agent_models": batched}, models=models)

    writer = ours(True, 0)
    assert writer.groups[0].batched
    drive(writer, env, 3 * ROLLOUTS)
    rates, steps = learning_rates(writer, env), adam_steps(writer, env)
    assert len(set(rates.values())) > 1 and len(set(steps.values())) > 1  # each agent has its own to carry
    writer.save(str(tmp_path / "batched.pt"))

    loop = ours(False, 1)  # batched -> one by one
    loop.load(str(tmp_path / "batched.pt"))
    assert_same_checkpoints(loop, writer, env, atol=0)
    loop.save(str(tmp_path / "loop.pt"))
    again = ours(True, 2)  # one by one -> batched
    again.load(str(tmp_path / "loop.pt"))
    assert_same_checkpoints(again, writer, env, atol=0)

    skrl_cfg = {k: v for k, v in cfg.items() if k != "batch_agent_models"}
    reader = skrl_mappo(env, skrl_cfg)  # batched -> skrl's own load
    reader.load(str(tmp_path / "batched.pt"))
    assert_same_as_skrl(reader, writer, env)

    torch.manual_seed(0)
    skrl_writer = skrl_mappo(env, skrl_cfg)  # skrl -> batched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer_cfg = {"timesteps": 3 * ROLLOUTS, "headless": True, "disable_progressbar": True}
        SequentialTrainer(env=env, agents=skrl_writer, cfg=trainer_cfg).train()
    theirs = {uid: skrl_writer.optimizers[uid] for uid in env.possible_agents}
    assert len({optimizer.param_groups[0]["lr"] for optimizer in theirs.values()}) > 1
    assert len({int(next(iter(optimizer.state.values()))["step"]) for optimizer in theirs.values()}) > 1
    skrl_writer.save(str(tmp_path / "skrl.pt"))
    batched = ours(True, 3)
    batched.load(str(tmp_path / "skrl.pt"))
    assert_same_as_skrl(skrl_writer, batched, env)


# ---------------------------------------------------------------- mixed precision


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-by-one"])
def test_with_mixed_precision_an_epoch_the_grad_scaler_skipped_leaves_the_rates(batched):
    """The grad scaler skips every step whose gradients are not finite (an inf injected by a hook here): the scheduler
    does not count such epochs, so ``KLAdaptiveLR`` keeps each agent's rate (the policy did not move: its KL of about 0
    would raise the rate); without the inf the same run moves the rates."""
    env = spread()
    cfg = {**BASE, **KL_ADAPTIVE, "learning_rate": 3e-3, "mixed_precision": True, "batch_agent_models": batched}
    rates = {}
    for inf in (True, False):
        torch.manual_seed(0)
        agent = make_agent(env, cfg=cfg, models=make_models(env, hidden=(16, 16)))
        assert agent.groups[0].batched == batched
        if inf:
            for group in agent.groups:
                group.trainable[0].register_hook(lambda grad: torch.full_like(grad, float("inf")))
        drive(agent, env, ROLLOUTS)
        rates[inf] = learning_rates(agent, env)
    assert all(rate == (3e-3,) for rate in rates[True].values()), rates
    assert any(abs(rate[0] / 3e-3 - 1) > 0.1 for rate in rates[False].values()), rates


# ---------------------------------------------------------------- the per-agent Adam


@pytest.mark.parametrize(
    "settings",
    [{}, {"weight_decay": 0.01}, {"weight_decay": 0.01, "decoupled_weight_decay": True}, {"amsgrad": True}],
    ids=["adam", "l2", "adamw", "amsgrad"],
)
def test_the_per_agent_adam_equals_one_torch_adam_per_agent(settings):
    """A batched group's Adam over stacked parameters, each agent at its own learning rate (changed mid-run, as a
    scheduler does through the agent's view) and some agents left out of some steps (the KL stop), equals one
    ``torch.optim.Adam`` per agent over 300 steps of the same gradients to 1e-6: the vectorised step's per-agent
    scalars are float64, as torch's kernel takes them, and its elementwise ops round like torch's to an ulp or so; the
    gradients do not depend on the parameters here, so those ulps do not grow with the run."""
    from skrl_marl_ext.groups.optim import make_adam
    from skrl_marl_ext.groups.stacked import StackedModules

    G = 5
    torch.manual_seed(0)
    agents = [torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)) for _ in range(G)]
    alone = copy.deepcopy(agents)
    stacked = StackedModules(agents)
    ours = make_adam([{"params": stacked.parameters(), "lr": 1e-3}], agents=G, stacked=True, **settings)
    theirs = [torch.optim.Adam(model.parameters(), lr=1e-3, fused=True, **settings) for model in alone]
    views = ours.views()
    for step in range(300):
        if step in (0, 150):  # each agent's own rate, as its scheduler would set it
            for i, (view, optimizer) in enumerate(zip(views, theirs, strict=True)):
                view.param_groups[0]["lr"] = optimizer.param_groups[0]["lr"] = 1e-3 * (1 + i) / (1 + step // 150)
        stepping = [(step + i) % 4 != 0 for i in range(G)]
        for model in alone:
            for p in model.parameters():
                p.grad = torch.randn_like(p)
        for name, p in stacked.params.items():
            p.grad = torch.empty_like(p).copy_(torch.stack([model.get_parameter(name).grad for model in alone]))
        ours.step(agents=stepping)
        for optimizer, steps in zip(theirs, stepping, strict=True):
            if steps:
                optimizer.step()
    with torch.no_grad():
        for model, own in zip(agents, alone, strict=True):
            for name, p in own.named_parameters():
                assert (model.get_parameter(name) - p).abs().max() <= 1e-6, name
    assert ours.agent_steps() == [int(next(iter(o.state.values()))["step"]) for o in theirs]
