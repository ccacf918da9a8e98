"""Agents with models of their own run as one batch (``torch.func``): the batched group trains exactly as the
per-agent loop does, keeps the per-agent checkpoint layout, and is used where the models allow it."""

from __future__ import annotations

import copy

import gymnasium
import helpers
import pytest
import torch
from helpers import (  # noqa: F401
    QUIET,
    drive,
    lockstep,
    make_maddpg,
    make_maddpg_models,
    make_models,
    max_difference,
    one_thread,
    params,
    state_of,
)
from skrl.memories.torch import RandomMemory
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR

from skrl_marl_ext import MADDPG, ValueNorm, joint_action_space
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.groups.optim import AgentOptimizerView, clip_grad_norm_per_agent_, make_adam
from skrl_marl_ext.groups.stacked import StackedModules
from skrl_marl_ext.models import QMLP, GaussianMLP

ROLLOUTS = 6


def make_agent(env, algo="mappo", shared=False, cfg=None, models=None, **kwargs):
    """:func:`helpers.make_agent` with ``batch_agent_models=True`` unless ``cfg`` says otherwise: this file tests the
    batched path, which ``"auto"`` leaves for the loop on a CPU with few agents."""
    cfg = {"batch_agent_models": True, **(cfg or {})}
    return helpers.make_agent(env, algo, shared=shared, cfg=cfg, models=models, **kwargs)


CASES = {
    "mappo-continuous": dict(algo="mappo", continuous=True, cfg={}),
    "ippo-continuous": dict(algo="ippo", continuous=True, cfg={}),
    "mappo-discrete": dict(algo="mappo", continuous=False, cfg={"entropy_loss_scale": 0.01}),
    "ippo-discrete": dict(algo="ippo", continuous=False, cfg={"entropy_loss_scale": 0.01}),
    "mappo-preprocessors": dict(
        algo="mappo",
        continuous=True,
        cfg={
            "observation_preprocessor": RunningStandardScaler,
            "state_preprocessor": RunningStandardScaler,
            "value_preprocessor": ValueNorm,
            "huber_delta": 10.0,
            "time_limit_bootstrap": True,
        },
    ),
    "ippo-scaler-values": dict(algo="ippo", continuous=True, cfg={"value_preprocessor": RunningStandardScaler}),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_batched_update_equals_the_per_agent_loop(case):
    """Several updates on the same rollouts: parameters, optimiser moments and statistics within 1e-6."""
    spec = CASES[case]
    torch.manual_seed(0)
    env = make_spread_env(num_envs=4, num_agents=3, continuous=spec["continuous"], episode_length=5)
    models = make_models(env, spec["algo"])
    cfg = {"rollouts": ROLLOUTS, "learning_epochs": 2, "mini_batches": 3, "grad_norm_clip": 0.05, **spec["cfg"]}
    cfg["mini_batch_order"] = "sequential"  # the loop draws one permutation per agent, a batched group one for all
    batched = make_agent(env, spec["algo"], cfg=dict(cfg), models=models)
    loop = make_agent(env, spec["algo"], cfg=dict(cfg, batch_agent_models=False), models=copy.deepcopy(models))
    assert [(g.uids, g.batched) for g in batched.groups] == [(env.possible_agents, True)]
    assert [g.size for g in loop.groups] == [1, 1, 1]
    before = [params(m) for uid in env.possible_agents for m in models[uid].values()]
    for _ in lockstep(batched, loop, env, 3 * ROLLOUTS, rollouts=ROLLOUTS):
        assert max_difference(state_of(batched, env), state_of(loop, env)) < 1e-6
    after = [params(m) for uid in env.possible_agents for m in models[uid].values()]
    assert max_difference(after, before) > 1e-3  # it learned: the comparison compares something


def test_agent_masks_count_per_agent():
    """A dead agent's samples count in no loss: its model does not move; the others train as in the loop."""
    torch.manual_seed(1)
    env = make_spread_env(num_envs=4, num_agents=3)
    models = make_models(env, "mappo")
    cfg = {"rollouts": ROLLOUTS, "learning_epochs": 2, "mini_batches": 2, "mini_batch_order": "sequential"}
    batched = make_agent(env, cfg=dict(cfg), models=models)
    loop = make_agent(env, cfg=dict(cfg, batch_agent_models=False), models=copy.deepcopy(models))
    dead = [p.detach().clone() for p in models["agent_1"]["policy"].parameters()]

    def kill_agent_1(t, infos):
        infos["agent_mask"] = {"agent_1": torch.zeros(env.num_envs, 1, dtype=torch.bool)}
        return infos

    for _ in lockstep(batched, loop, env, 2 * ROLLOUTS, rollouts=ROLLOUTS, infos_fn=kill_agent_1):
        assert max_difference(state_of(batched, env), state_of(loop, env)) < 1e-6
    assert max_difference(list(models["agent_1"]["policy"].parameters()), dead) == 0.0


def test_user_models_are_views_of_the_stack():
    """An optimiser step on the stack is seen by the user's models, and loading a model writes into the stack."""
    env = make_spread_env(num_envs=2, num_agents=3)
    models = make_models(env)
    agent = make_agent(env, models=models)
    (group,) = agent.groups
    stacked = group.stacked["policy"].params
    name, first = next(iter(models["agent_2"]["policy"].named_parameters()))
    with torch.no_grad():
        stacked[name][2].add_(1.0)
    assert torch.equal(first, stacked[name][2])
    state = copy.deepcopy(models["agent_0"]["policy"].state_dict())
    models["agent_2"]["policy"].load_state_dict(state)
    assert torch.equal(stacked[name][2], stacked[name][0])


def test_checkpoints_keep_the_per_agent_layout(tmp_path):
    """A checkpoint of the loop loads into a batched agent and back, optimiser moments included."""
    torch.manual_seed(2)
    env = make_spread_env(num_envs=4, num_agents=3)
    cfg = {
        "rollouts": ROLLOUTS,
        "learning_epochs": 1,
        "mini_batches": 1,
        "observation_preprocessor": RunningStandardScaler,
    }
    loop = make_agent(env, cfg=dict(cfg, batch_agent_models=False))
    drive(loop, env, ROLLOUTS)  # one update: optimiser moments and statistics are not at their initial values
    loop.save(str(tmp_path / "loop.pt"))
    batched = make_agent(env, cfg=dict(cfg))
    assert batched.groups[0].batched
    batched.load(str(tmp_path / "loop.pt"))
    assert max_difference(state_of(batched, env), state_of(loop, env)) == 0.0
    batched.save(str(tmp_path / "batched.pt"))
    again = make_agent(env, cfg=dict(cfg, batch_agent_models=False))
    again.load(str(tmp_path / "batched.pt"))
    assert max_difference(state_of(again, env), state_of(loop, env)) == 0.0


def test_optimizer_view_refuses_other_parameter_groups():
    env = make_spread_env(num_envs=2, num_agents=2)
    agent = make_agent(env, cfg={"learning_rate": (1e-3, 5e-4)})  # two parameter groups in the state dict
    view = AgentOptimizerView(agent.groups[0].optimizer, 0)
    state = view.state_dict()
    state["param_groups"] = state["param_groups"][:1]
    with pytest.raises(ValueError, match="other parameter groups"):
        view.load_state_dict(state)


def test_linear_weights_are_stored_in_the_gradient_layout():
    """A batched group keeps each linear weight as ``(G, out, in)`` with ``(G, in, out)`` memory order, the order the
    backward of the vmapped ``linear`` gives its gradient: after a backward the gradient has the weight's strides."""
    env = make_spread_env(num_envs=4, num_agents=3)
    models = make_models(env)
    agent = make_agent(env, models=models)
    (group,) = agent.groups
    stack = group.stacked["policy"]
    weights = [n for n, m in models["agent_0"]["policy"].named_modules() if isinstance(m, torch.nn.Linear)]
    assert weights
    obs = torch.randn(3, 4, env.observation_space("agent_0").shape[0])
    actions, outputs = group.act("policy", {"observations": obs})
    outputs["mean_actions"].square().sum().backward()
    for name in (f"{w}.weight" for w in weights):
        weight = stack.params[name]
        G, out, inp = weight.shape
        assert weight.stride() == (out * inp, 1, out)
        assert weight.grad is not None and weight.grad.stride() == weight.stride()
        # each user's model reads its own slice, the same values in the (out, in) shape
        assert torch.equal(models["agent_1"]["policy"].get_parameter(name), weight[1])


@pytest.mark.parametrize("per_tensor", [None, True, False])
@pytest.mark.parametrize("transposed", [False, True])
def test_clip_per_agent_slice_equals_torch_per_agent(transposed, per_tensor):
    torch.manual_seed(3)
    # a weight, a bias and a scalar parameter per agent (stacked: one number per agent)
    stacked = [torch.randn(3, 4, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True), torch.randn(3)]
    stacked[2].requires_grad_()
    if transposed:  # the layout of a batched group's linear weights (and so of their gradients)
        stacked[0] = torch.randn(3, 5, 4).transpose(1, 2).requires_grad_()
    for p in stacked:
        p.grad = torch.randn_like(p) * torch.tensor([0.01, 1.0, 10.0]).view(3, *([1] * (p.dim() - 1)))
    assert stacked[0].grad.is_contiguous() != transposed
    expected = []
    for i in range(3):
        own = [p[i].detach().clone().requires_grad_() for p in stacked]
        for o, p in zip(own, stacked, strict=True):
            o.grad = p.grad[i].clone()
        torch.nn.utils.clip_grad_norm_(own, 0.5)
        expected.append([o.grad for o in own])
    norms = clip_grad_norm_per_agent_(stacked, 0.5, per_tensor=per_tensor)
    assert norms.shape == (3,) and (norms > 0.5).sum() >= 2  # the clip clipped something
    for i in range(3):
        for got, want in zip((p.grad[i] for p in stacked), expected[i], strict=True):
            torch.testing.assert_close(got, want)


def test_which_agents_batch():
    """Batched where the models allow it, an update that adapts to each agent's own KL included (``KLAdaptiveLR``,
    ``kl_threshold``); the loop where the class or shapes differ or a model serves two roles; never for shared
    models."""
    env = make_spread_env(num_envs=2, num_agents=4)
    models = make_models(env)
    wide = GaussianMLP(
        observation_space=env.observation_space("agent_3"), action_space=env.action_space("agent_3"), hidden_sizes=(8,)
    )
    models["agent_3"] = {"policy": wide, "value": models["agent_3"]["value"]}
    agent = make_agent(env, models=models)
    assert [(g.uids, g.batched) for g in agent.groups] == [
        (["agent_0", "agent_1", "agent_2"], True),
        (["agent_3"], False),
    ]
    assert [(g.uids, g.batched) for g in make_agent(env, cfg={"learning_rate_scheduler": KLAdaptiveLR}).groups] == [
        (env.possible_agents, True)
    ]
    assert [(g.size, g.batched) for g in make_agent(env, cfg={"kl_threshold": 0.1}).groups] == [(4, True)]
    shared = make_agent(env, models=make_models(env, shared=True))
    assert [(g.size, g.batched) for g in shared.groups] == [(4, False)]


def test_auto_batches_on_a_cpu_where_many_narrow_agents_are_alike():
    """``batch_agent_models="auto"`` (the default) on a CPU: one batched group for 4 agents with narrow models, the
    loop for 3 such agents or for 4 with a layer wider than 128 units; True and False force either way."""
    four, three = make_spread_env(num_envs=2, num_agents=4), make_spread_env(num_envs=2, num_agents=3)

    def layout(env, hidden=(32, 32), **cfg):
        agent = helpers.make_agent(env, cfg=cfg, models=make_models(env, hidden=hidden))
        return [(g.size, g.batched) for g in agent.groups]

    assert layout(four) == [(4, True)]
    assert layout(three) == [(1, False)] * 3
    assert layout(four, hidden=(32, 129)) == [(1, False)] * 4
    assert layout(four, hidden=(128,)) == [(4, True)]
    assert layout(three, batch_agent_models=True) == [(3, True)]
    assert layout(four, hidden=(256,), batch_agent_models=True) == [(4, True)]
    assert layout(four, batch_agent_models=False) == [(1, False)] * 4


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_batch_agent_models_refuses_other_values(value):
    env = make_spread_env(num_envs=2, num_agents=3)
    with pytest.raises(ValueError, match=r"MAPPO: cfg\.batch_agent_models must be True, False or 'auto'"):
        helpers.make_agent(env, cfg={"batch_agent_models": value})


def test_mixed_precision_trains_batched():
    """Autocast and the grad scaler run through the batched call (bf16 on CPU) and the parameters stay finite."""
    torch.manual_seed(4)
    env = make_spread_env(num_envs=4, num_agents=3)
    agent = make_agent(env, cfg={"rollouts": ROLLOUTS, "mixed_precision": True, "value_preprocessor": ValueNorm})
    assert agent.groups[0].batched
    before = [params(m) for m in agent.groups[0].unique_models()]
    drive(agent, env, 2 * ROLLOUTS)
    after = [params(m) for m in agent.groups[0].unique_models()]
    assert all(torch.isfinite(a).all() for a in after)
    assert max_difference(before, after) > 0


# ---------------------------------------------------------------- MADDPG


def same_noise_gumbel_softmax(logits, tau=1.0, hard=False):
    """torch's straight-through Gumbel-softmax with noise that depends on the row of the batch only: each agent's
    block of a batched call gets what the loop draws for that agent (torch draws the noise of G * B rows at once in
    one, and of B rows G times in the other, which are different numbers)."""
    rows, batch = logits.shape[0], 24
    noise = -torch.empty(batch, logits.shape[-1]).exponential_(generator=torch.Generator().manual_seed(0)).log()
    y_soft = ((logits + noise.repeat(rows // batch, 1)) / tau).softmax(dim=-1)
    index = y_soft.argmax(dim=-1, keepdim=True)
    return torch.zeros_like(y_soft).scatter_(-1, index, 1.0) - y_soft.detach() + y_soft


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "discrete"])
@pytest.mark.parametrize("preprocessors", ["plain", "scalers", "scalers-joint", "twin"])
def test_batched_maddpg_equals_the_per_agent_loop(continuous, preprocessors, monkeypatch):
    """Both agents read one replay (the same memories) and take gradient steps from the same seed: the N critics, N
    target critics and N policies as one call each train as the loop does, within 1e-6 (``scalers-joint``: no env
    state, the critics read the joint observation, each agent's state scaler fed it where that agent is alive;
    ``twin``: second critics (clipped double Q) and a policy delay of 2)."""
    monkeypatch.setattr(torch.nn.functional, "gumbel_softmax", same_noise_gumbel_softmax)
    torch.manual_seed(5)
    env = make_spread_env(num_envs=4, num_agents=3, continuous=continuous, episode_length=6)
    models = make_maddpg_models(env, twin=preprocessors == "twin")
    memories = {uid: RandomMemory(memory_size=32, num_envs=env.num_envs) for uid in env.possible_agents}
    cfg = {
        "batch_size": 24,
        "learning_starts": 10**9,
        "gradient_steps": 1,  # one update is one gradient step
        "grad_norm_clip": 0.05,
        "polyak": 0.3,
        "experiment": QUIET,
    }
    if preprocessors == "twin":
        cfg["policy_delay"] = 2
    elif preprocessors != "plain":
        cfg.update(observation_preprocessor=RunningStandardScaler, state_preprocessor=RunningStandardScaler)
    build = make_maddpg
    if preprocessors == "scalers-joint":  # critics sized for the joint observation
        joint_obs = gymnasium.spaces.Box(
            -float("inf"), float("inf"), (sum(env.observation_space(u).shape[0] for u in models),)
        )
        joint = joint_action_space(env.action_spaces, env.possible_agents)
        torch.manual_seed(6)
        for uid in models:
            critics = [QMLP(state_space=joint_obs, action_space=joint, hidden_sizes=(16,)) for _ in range(2)]
            models[uid].update(critic=critics[0], target_critic=critics[1])
        spaces = dict(observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, device=env.device)

        def build(env, **kwargs):
            return MADDPG(possible_agents=env.possible_agents, state_spaces=None, **spaces, **kwargs)

    batched = build(env, models=models, memories=memories, cfg=dict(cfg))
    loop_models = copy.deepcopy(models)
    loop = build(env, models=loop_models, memories=memories, cfg=dict(cfg, batch_agent_models=False))
    assert batched.env_states == (preprocessors != "scalers-joint")
    assert [(g.size, g.batched) for g in batched.groups] == [(3, True)]
    assert [g.size for g in loop.groups] == [1, 1, 1]
    drive(batched, env, 16)  # fills the shared replay; no learning yet
    loop.init()
    loop.enable_training_mode(True)
    before = [params(m) for uid in env.possible_agents for m in models[uid].values()]
    for step in range(4):
        for agent in (batched, loop):
            torch.manual_seed(100 + step)  # the same rows (and Gumbel noise) for both
            agent.update(timestep=0, timesteps=1, uid=env.possible_agents[0])
        assert max_difference(state_of(batched, env), state_of(loop, env)) < 1e-6
    after = [params(m) for uid in env.possible_agents for m in models[uid].values()]
    assert max_difference(after, before) > 1e-4


def test_models_with_other_settings_do_not_batch():
    """The mixin's settings (here: action clipping) are the first agent's for the whole batch, so they must agree."""
    env = make_spread_env(num_envs=2, num_agents=3)
    models = make_models(env)
    space = env.action_space("agent_2")
    models["agent_2"]["policy"] = GaussianMLP(
        observation_space=env.observation_space("agent_2"), action_space=space, hidden_sizes=(32, 32), clip_actions=True
    )
    agent = make_agent(env, models=models)
    assert [(g.uids, g.batched) for g in agent.groups] == [(["agent_0", "agent_1"], True), (["agent_2"], False)]


class _Tied(torch.nn.Module):
    """Two linear layers sharing one weight, a submodule registered twice and a buffer: what the swap must cover."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)
        self.b.weight = self.a.weight
        self.again = self.a
        self.register_buffer("shift", torch.randn(3))

    def forward(self, x):
        return self.b(torch.tanh(self.again(x))) + self.shift


def test_swapped_gives_each_agents_own_result():
    """``StackedModules.swapped`` inside the map gives each agent's own module's result (what ``functional_call``
    is for), tied weights and buffers included, and puts the first module's own tensors back."""
    torch.manual_seed(5)
    modules = [_Tied() for _ in range(3)]
    own = {n: t for n, t in modules[0].state_dict(keep_vars=True).items()}
    stack = StackedModules(modules)
    x = torch.randn(3, 4, 3)

    def one_agent(state, rows):
        with stack.swapped(state):
            return modules[0](rows)

    got = stack.vmap(one_agent, x, in_dims=(0,))
    for i, module in enumerate(modules):
        torch.testing.assert_close(got[i], module(x[i]))
    assert all(t is own[n] for n, t in modules[0].state_dict(keep_vars=True).items())
    assert modules[0].b.weight is modules[0].a.weight


def test_optimizer_view_loads_the_step_as_torch_does():
    """A fused Adam keeps its step count as a float32 tensor on the parameter's device (torch's load_state_dict puts
    it there); the per-agent view loads it the same way, whatever dtype the checkpoint holds."""
    stacked = [torch.zeros(3, 2, requires_grad=True)]
    optimizer = make_adam(stacked, lr=1e-3, agents=3, stacked=True)
    saved = {
        "state": {
            0: {"step": torch.tensor(5.0, dtype=torch.float64), "exp_avg": torch.ones(2), "exp_avg_sq": torch.ones(2)}
        },
        "param_groups": [dict(optimizer.param_groups[0], params=[0])],
    }
    AgentOptimizerView(optimizer, 1).load_state_dict(copy.deepcopy(saved))
    alone = [torch.zeros(2, requires_grad=True)]
    reference = make_adam(alone, lr=1e-3)
    reference.load_state_dict(copy.deepcopy(saved))
    step, want = optimizer.state[stacked[0]]["step"], reference.state[alone[0]]["step"]
    assert (step.dtype, step.device, step.tolist()) == (want.dtype, want.device, [0.0, 5.0, 0.0])
    assert want.dtype == torch.float32 and want.item() == 5.0
    assert torch.equal(optimizer.state[stacked[0]]["exp_avg"][1], torch.ones(2))


def test_the_agents_optimisers_step_as_torchs_adam():
    """MAPPO's, IPPO's and MADDPG's optimisers (batched groups and one by one) make torch's Adam update: one step on
    the same gradients from the same parameters equals ``torch.optim.Adam``'s to float32 rounding."""
    env = make_spread_env(num_envs=4, num_agents=3)
    agents = [
        make_agent(env, "mappo", cfg={"rollouts": ROLLOUTS}),
        make_agent(env, "ippo", cfg={"batch_agent_models": False}),
        make_maddpg(env, models=make_maddpg_models(env)),
    ]
    torch.manual_seed(4)
    for agent in agents:
        for group in agent.groups:
            for name in ("optimizer", "policy_optimizer", "critic_optimizer"):
                optimizer = getattr(group, name, None)
                if optimizer is None:
                    continue
                params = [p for g in optimizer.param_groups for p in g["params"]]
                reference = [p.detach().clone().requires_grad_() for p in params]
                for p, r in zip(params, reference, strict=True):
                    r.grad = torch.randn_like(r)
                    p.grad = r.grad.clone()
                theirs = torch.optim.Adam(reference, lr=optimizer.param_groups[0]["lr"])
                optimizer.step()
                theirs.step()
                for p, r in zip(params, reference, strict=True):
                    torch.testing.assert_close(p.detach(), r.detach())


def _record_maps(monkeypatch, models: dict) -> list[list[str]]:
    """The roles whose network each ``torch.vmap`` call runs, in order: ``models`` (role -> the first agent's model,
    whose ``compute`` a batched group runs inside the map) record their role when computed inside a map."""
    maps, inside, vmap = [], [], torch.vmap

    def counting_vmap(function, *args, **kwargs):
        mapped = vmap(function, *args, **kwargs)

        def run(*a, **k):
            maps.append([])
            inside.append(True)
            try:
                return mapped(*a, **k)
            finally:
                inside.pop()

        return run

    monkeypatch.setattr(torch, "vmap", counting_vmap)
    for role, model in models.items():
        compute = model.compute

        def recording(inputs, role_name="", _role=role, _compute=compute):
            if inside:
                maps[-1].append(_role)
            return _compute(inputs, role_name)

        monkeypatch.setattr(model, "compute", recording)
    return maps


def test_roles_of_a_step_run_in_one_map(monkeypatch):
    """A batched group runs its policy and value (MAPPO's act and each mini-batch) and MADDPG's twin critics and twin
    target critics in one ``torch.vmap`` each (one ``act_many`` call), with the results of separate calls to the
    bit (sampling included: the mixins draw in call order)."""
    env = make_spread_env(num_envs=4, num_agents=3)
    agent = make_agent(env, "mappo", cfg={"rollouts": 2, "learning_epochs": 1, "mini_batches": 2})
    maps = _record_maps(monkeypatch, agent.models["agent_0"])
    drive(agent, env, 2)  # 2 acts, the bootstrap, 2 mini-batches
    both = ["policy", "value"]
    assert maps == [both, both, ["value"], both, both]  # one map per call, both roles in it
    monkeypatch.undo()

    (group,) = agent.groups
    observations = torch.randn(3, 4, env.observation_space("agent_0").shape[0])
    state = env.state()["agent_0"]
    inputs = {"observations": observations, "states": state.expand(3, *state.shape)}
    pairs = [("policy", inputs), ("value", inputs)]
    torch.manual_seed(3)
    joint = group.act_many(*pairs)
    torch.manual_seed(3)
    separate = [group.act_many(pair)[0] for pair in pairs]
    for (a, a_out), (b, b_out) in zip(joint, separate, strict=True):
        assert torch.equal(a, b)
        assert a_out.keys() == b_out.keys() and all(torch.equal(a_out[k], b_out[k]) for k in a_out)
    assert "log_prob" in joint[0][1]

    maddpg = make_maddpg(env, models=make_maddpg_models(env, twin=True), cfg={"batch_size": 8})
    maps = _record_maps(monkeypatch, maddpg.models["agent_0"])
    drive(maddpg, env, 6)
    assert ["critic", "critic_2"] in maps and ["target_critic", "target_critic_2"] in maps
    assert not [m for m in maps if m in (["critic_2"], ["target_critic_2"])]


def test_adam_steps_transposed_weights_as_torch_does():
    """A batched group's linear weights are stored transposed; its Adam makes torch's fused update to the bit, state
    kept in the parameter's own shape and layout."""
    torch.manual_seed(6)
    stacked = StackedModules([torch.nn.Linear(3, 4) for _ in range(2)])
    weight = stacked.params["weight"]
    assert not weight.is_contiguous() and weight.mT.is_contiguous()
    reference = [p.detach().clone().contiguous().requires_grad_() for p in stacked.parameters()]
    ours = make_adam(stacked.parameters(), lr=0.1, agents=2, stacked=True)
    theirs = torch.optim.Adam(reference, lr=0.1, fused=True)
    for _ in range(3):
        for p, r in zip(stacked.parameters(), reference, strict=True):
            r.grad = torch.randn_like(r)
            p.grad = torch.empty_like(p).copy_(r.grad)  # the gradient in the parameter's layout, as autograd makes it
        ours.step()
        theirs.step()
    for p, r in zip(stacked.parameters(), reference, strict=True):
        assert torch.equal(p, r)
        assert torch.equal(ours.state[p]["exp_avg_sq"], theirs.state[r]["exp_avg_sq"])
    assert ours.state[weight]["exp_avg"].stride() == weight.stride()
