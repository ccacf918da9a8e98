"""Agents with models of their own, run as one batch (``torch.func``): the one module that reaches into torch.

``G`` agents whose models have the same class and the same parameter and buffer shapes form a *batched group*: each
model role is one :class:`StackedModel`, whose parameters are the ``G`` agents' parameters stacked into ``(G, ...)``
leaf tensors, and one call of it runs all ``G`` agents (``torch.vmap`` of the first model's ``compute`` with one
agent's parameters swapped in, as ``torch.func.functional_call`` does). The number of tensor operations per call, and
so the kernel launches on a GPU, does not grow with ``G``. Roles that a step calls together (a PPO step's policy and
value, MADDPG's twin critics) run in one map (:func:`act_together`). Recurrent models batch too, their hidden states
``(layers, G * n, H)`` mapped agent by agent, where they run under vmap at all (a dry run tells:
:func:`batching_failure`).

The user's skrl models stay the source of truth: after stacking, each model's parameters and buffers are *views* of
its slice of the stacked tensors, so an optimiser step on the stacked tensors is seen by the models at once, a
``load_state_dict`` on a model writes into the stack, and checkpoints keep the per-agent layout.

How a call runs: only the models' ``compute`` (the network) is vmapped, agent by agent over its own rows; skrl's mixin
``act`` (sampling, clipping, log-probabilities, the distribution kept on the module for ``get_entropy`` and
``distribution``) then runs once, outside the vmap, on the ``(G * n, ...)`` outputs through the first agent's model.
Random sampling thus stays ordinary torch sampling (``vmap`` cannot sample in place per agent), and every mixin works
unchanged.

Also here: the per-agent statistics of stacked preprocessors (:class:`StackedPreprocessor`), gradient-norm clipping per
agent slice (:func:`clip_grad_norm_per_agent_`), the Adam of ``G`` agents in one, each with its own learning rate and
step count (:class:`Adam`, :func:`make_adam`), each agent's view of it for schedulers and checkpoints
(:class:`AgentOptimizerView`), the rule of which models stack (:func:`stack_signature`) and of when they do by default
(:func:`batch_by_default`). What this module does beyond torch's public API, so that a torch upgrade is its concern
alone: it rebinds the ``.data`` of the models' parameters to slices of the stack, swaps ``_parameters`` / ``_buffers``
entries for one call (:meth:`StackedModules.swapped`), answers a model's ``compute`` on the instance for its mixin's
``act``, tells a tensor batched by vmap (:func:`in_vmap`, torch's private ``is_batchedtensor``), steps :class:`Adam` through ``torch.optim.adam.adam`` (the functional form of torch's Adam) and hands its
agents' views to torch's LR schedulers as optimisers (:class:`AgentOptimizerView`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from packaging import version
from skrl.models.torch import Model
from torch import nn
from torch.optim import optimizer as torch_optimizer
from torch.optim.adam import adam as adam_step

from skrl_marl_ext.checkpoint import fit_optimizer_state, optimizer_file_state
from skrl_marl_ext.preprocessors import ValueNorm, fold_moments_, per_agent_moments


def stack_signature(module: nn.Module) -> tuple | None:
    """What must agree for modules to be stacked: the class, every parameter's and buffer's name, shape, dtype and
    device (and whether it requires grad), and the plain settings of every submodule (numbers, strings, flags: e.g.
    a mixin's action clipping, which the first agent's model applies to all). None for a module with lazy parameters
    not yet initialised (skrl's instantiators build such; skrl's Runner initialises them): it cannot be stacked."""
    if any(nn.parameter.is_lazy(t) for t in (*module.parameters(), *module.buffers())):
        return None
    params = tuple((n, tuple(p.shape), p.dtype, p.device, p.requires_grad) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype, b.device) for n, b in module.named_buffers())
    plain = (bool, int, float, str, type(None))
    settings = tuple(
        (name, key, value)
        for name, sub in module.named_modules()
        for key, value in sorted(vars(sub).items())
        if isinstance(value, plain) and key != "training"
    )
    return (type(module), params, buffers, settings)


def _stack(tensors: Sequence[torch.Tensor], *, transposed: bool) -> torch.Tensor:
    """``torch.stack(tensors)``; with ``transposed`` (a linear layer's ``(out, in)`` weights) stored as ``(G, in,
    out)`` in memory: the layout in which the backward of a vmapped ``linear`` produces the weight's gradient
    (``x^T @ grad``), so it is accumulated as it comes instead of copied into ``(G, out, in)`` order at every backward
    (a strided copy of the whole weight at every backward)."""
    stacked = torch.stack(list(tensors))
    if not transposed:
        return stacked
    G, rows, cols = stacked.shape
    out = torch.empty_strided(stacked.shape, (rows * cols, 1, rows), dtype=stacked.dtype, device=stacked.device)
    return out.copy_(stacked)


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ``(G, ...)`` as ``(G, n)`` in its memory order (a view for any dense layout whose first dimension
    is outermost, e.g. :func:`_stack`'s transposed weights): for norms, which do not depend on the order."""
    order = [0, *sorted(range(1, tensor.dim()), key=lambda d: -tensor.stride(d))]
    permuted = tensor.permute(order)
    return permuted.reshape(tensor.shape[0], -1)


def _tensor_slots(module: nn.Module) -> dict[str, list[tuple[dict, str]]]:
    """Where each parameter and buffer of ``module`` is held, by its name in ``named_parameters()`` /
    ``named_buffers()``: the ``(_parameters or _buffers dict of a submodule, key)`` pairs (several for a tied tensor,
    named by its first occurrence, as ``named_parameters()`` names it)."""
    slots: dict[str, list[tuple[dict, str]]] = {}
    first_name: dict[int, str] = {}
    for kind in ("_parameters", "_buffers"):
        for prefix, sub in module.named_modules(remove_duplicate=False):
            store = getattr(sub, kind)
            for key, tensor in store.items():
                if tensor is not None:
                    name = first_name.setdefault(id(tensor), f"{prefix}.{key}" if prefix else key)
                    slots.setdefault(name, []).append((store, key))
    return slots


class StackedModules:
    """``G`` modules of one signature whose parameters and buffers are views of stacked ``(G, ...)`` tensors."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.modules = list(modules)
        self.size = len(self.modules)
        first = self.modules[0]
        linear = {f"{name}.weight".lstrip(".") for name, sub in first.named_modules() if isinstance(sub, nn.Linear)}
        with torch.no_grad():
            self.params = {
                name: _stack(
                    [m.get_parameter(name).detach() for m in self.modules], transposed=name in linear
                ).requires_grad_(p.requires_grad)
                for name, p in first.named_parameters()
            }
            self.buffers = {
                name: torch.stack([m.get_buffer(name) for m in self.modules]) for name, _ in first.named_buffers()
            }
        for i, module in enumerate(self.modules):  # the modules now read and write their slice of the stack
            for name, stacked in self.params.items():
                module.get_parameter(name).data = stacked.data[i]
            for name, stacked in self.buffers.items():
                module.get_buffer(name).data = stacked[i]
        self._slots = _tensor_slots(first)

    def parameters(self) -> list[torch.Tensor]:
        """The stacked ``(G, ...)`` parameters, in the modules' parameter order."""
        return list(self.params.values())

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stacked ``(G, ...)`` parameters and buffers by name (the checkpoints hold each agent's module)."""
        return {name: t.detach() for name, t in {**self.params, **self.buffers}.items()}

    def vmap(self, function, *args, in_dims: Any = 0, out_dims: Any = 0):
        """``torch.vmap`` of ``function(module_state, *args)`` over the agents, ``module_state`` being the stacked
        parameters and buffers of one agent inside the map (see :meth:`swapped`)."""
        state = {**self.params, **self.buffers}
        return torch.vmap(function, in_dims=(0, *in_dims), out_dims=out_dims)(state, *args)

    def swapped(self, state: dict[str, torch.Tensor]) -> contextlib.AbstractContextManager[None]:
        """The first module's parameters and buffers replaced by ``state`` (one agent's, inside the map), every tied
        alias included, and put back after: what ``torch.func.functional_call`` does, written out because that leaves a
        module registered under two names holding the map's tensors after the call (the aliased-module test)."""
        return _swapped(self._slots, state)


@contextlib.contextmanager
def _swapped(slots: dict[str, list[tuple[dict, str]]], state: dict[str, torch.Tensor]) -> Iterator[None]:
    """The tensors held in ``slots`` (:func:`_tensor_slots`) replaced by ``state`` by name, and put back after."""
    saved = []
    try:
        for name, tensor in state.items():
            for store, key in slots[name]:
                saved.append((store, key, store[key]))
                store[key] = tensor
        yield
    finally:
        for store, key, tensor in reversed(saved):
            store[key] = tensor


ADAM_SETTINGS = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")
"""The hyperparameters of an Adam parameter group that say what its step computes (each agent's own in :class:`Adam`)."""


class Adam(torch.optim.Adam):
    """torch's Adam over stacked ``(G, ...)`` parameters. With ``agents`` (a batched group's optimiser) it is ``G``
    Adams in one, each agent keeping the optimiser it would have on its own: its own hyperparameters per parameter
    group (:attr:`agent_param_groups`: its learning rate, which a scheduler adapts through :class:`AgentOptimizerView`),
    its own step count, and ``step(agents=...)`` leaves agents out, their parameters and state as they are (PPO's KL
    early stop of one agent). Without, it is torch's Adam, its ``param_groups`` the hyperparameters.

    When every agent steps, with the same hyperparameters and step counts, one step of torch's kernel updates the
    stacked tensors (``state["step"]`` holds the one count, as torch's Adam does); otherwise each set of agents alike
    steps its slices through the same kernel, and ``state["step"]`` holds each agent's count ``(G,)`` from then on.
    A parameter stored transposed (a batched group's linear weights: ``(G, out, in)`` held as ``(G, in, out)``, see
    :class:`StackedModules`) is stepped through its contiguous transpose, with its gradient and moments: the same
    elementwise update, which torch's fused CPU kernel runs faster on contiguous tensors. Checkpoints hold each agent's
    part in torch's layout (:class:`AgentOptimizerView`).

    :param agents: ``G``, the size of the parameters' first dimension, or None.
    """

    def __init__(self, params: Any, *, agents: int | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.agents = agents
        self.agent_param_groups: list[list[dict[str, Any]]] | None = None
        """With ``agents``, each agent's parameter groups: torch's ``param_groups`` as its own optimiser would have
        them (its hyperparameters; ``params`` are the stacked tensors)."""
        if agents is not None:
            self.agent_param_groups = [[dict(group) for group in self.param_groups] for _ in range(agents)]

    def agent_steps(self) -> list[int]:
        """The steps each agent has taken (one host read)."""
        for group in self.param_groups:
            for param in group["params"]:
                if "step" in self.state.get(param, {}):
                    return [int(step) for step in self.state[param]["step"].expand(self.agents).tolist()]
        return [0] * self.agents

    def init_state(self, param: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        """``param``'s state, made as torch's Adam makes it at the first step (zero moments, one step count 0)."""
        state = self.state[param]
        if not state:
            on_device = group["fused"] or group["capturable"]  # where torch keeps the count
            dtype = torch.float32 if group["fused"] else torch.get_default_dtype()
            state["step"] = torch.zeros((), dtype=dtype, device=param.device if on_device else "cpu")
            moments = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if group["amsgrad"] else ("exp_avg", "exp_avg_sq")
            state.update({name: torch.zeros_like(param, memory_format=torch.preserve_format) for name in moments})
        return state

    @torch.no_grad()
    def step(self, closure: Any = None, *, agents: Sequence[bool] | None = None) -> Any:
        """One Adam step of every agent, or of the agents where ``agents`` (``G`` flags) is True."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._opt_called = True  # what torch's LR schedulers check (through each agent's view)
        owners = self.agent_param_groups or [self.param_groups]  # each agent's groups; without agents, one for all
        stepping = [i for i in range(len(owners)) if agents is None or agents[i]]
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            states = [self.init_state(p, group) for p in params]
            settings = [tuple(groups[index][k] for k in ADAM_SETTINGS) for groups in owners]
            if len(stepping) == len(owners) and len(set(settings)) == 1 and all(s["step"].dim() == 0 for s in states):
                self._adam(group, settings[0], params, states, [slice(None)])  # torch's step, on the stacked tensors
                continue
            for state in states:  # each agent's count from now on
                state["step"] = state["step"].expand(self.agents).clone() if state["step"].dim() == 0 else state["step"]
            for setting in dict.fromkeys(settings[i] for i in stepping):  # each set of agents alike
                self._adam(group, setting, params, states, [i for i in stepping if settings[i] == setting])
        return loss

    def _adam(self, group: dict, setting: tuple, params: list, states: list, rows: list) -> None:
        """torch's Adam step (``torch.optim.adam.adam``, its functional form) with ``setting`` on the ``rows`` of every
        parameter of ``group``: agent slices, or ``[slice(None)]`` for the stacked tensors."""
        tensors: list[list[torch.Tensor]] = [[], [], [], [], [], []]  # params, grads, moments, max moments, steps
        for param, state in zip(params, states, strict=True):
            own = (param, param.grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"))
            for row in rows:
                flip = param[row].dim() >= 2 and not param[row].is_contiguous()  # stored transposed: its contiguous .mT
                for out, tensor in zip(tensors, own, strict=False):
                    if tensor is not None:
                        out.append(tensor[row].mT if flip else tensor[row])
                tensors[5].append(state["step"][row] if state["step"].dim() else state["step"])
        hyper = dict(zip(ADAM_SETTINGS, setting, strict=True))
        beta1, beta2 = hyper.pop("betas")
        flags = {flag: group[flag] for flag in ("foreach", "capturable", "differentiable", "fused")}
        scaler = {"grad_scale": getattr(self, "grad_scale", None), "found_inf": getattr(self, "found_inf", None)}
        adam_step(*tensors, beta1=beta1, beta2=beta2, **hyper, **flags, **scaler)  # scaler: set by a GradScaler


def make_adam(params: list, *, agents: int | None = None, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **kwargs)``: for a batched group's stacked parameters (``agents``: ``G``) or
    parameters stored transposed, as :class:`Adam`; fused where torch has the fused kernel for every parameter's
    device (CPU since torch 2.4, CUDA), multi-tensor (``foreach``) otherwise.

    The same update as skrl's ``torch.optim.Adam(params, lr=...)`` up to float rounding, in fewer passes over memory:
    the fused kernel reads and writes each parameter, gradient and moment once per step, where ``foreach`` runs
    several elementwise ops, each over every tensor. A ``GradScaler`` hands it the scale and the inf check (``_step_supports_amp_scaling``).
    """
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    supported = getattr(torch_optimizer, "_get_fused_kernels_supported_devices", list)()
    if version.parse(torch.__version__) < version.parse("2.4"):
        supported = [d for d in supported if d != "cpu"]  # pragma: no cover - old torch: no CPU kernel
    fused = all(p.device.type in supported and p.dtype.is_floating_point for p in tensors)
    flags = {"fused": True} if fused else {"foreach": True}
    # our Adam for a batched group, or where a parameter is stored transposed (a batched group's linear weights)
    transposed = any(not nn.parameter.is_lazy(p) and p.dim() >= 2 and not p.is_contiguous() for p in tensors)
    if agents is None and not transposed:
        return torch.optim.Adam(params, **kwargs, **flags)
    return Adam(params, agents=agents, **kwargs, **flags)


class StackedModel(StackedModules):
    """``G`` skrl models of one class and shape run as one call (see the module docstring)."""

    def __init__(self, models: Sequence[Model]) -> None:
        super().__init__(models)
        self.base = self.modules[0]


def act_together(
    calls: Sequence[tuple[StackedModel, dict[str, Any], str]],
    *,
    agents: slice = slice(None),
    vmap: Callable | None = None,
) -> list[tuple[torch.Tensor, dict[str, Any]]]:
    """``model.act(inputs, role=role)`` of each ``(model, inputs, role)``, the models being stacked over the same
    ``G`` agents (one group's roles), with every network in **one** ``torch.vmap``: the map's set-up is paid once for
    e.g. the policy and the value of a PPO step, or twin critics.

    Inside the map, each agent's rows ``(G, n, ...)`` run through the first model's ``compute`` with that agent's
    parameters. The mixins' ``act`` (sampling, log-probabilities, the kept distribution) then run once, outside the
    map, on the ``(G * n, ...)`` outputs through the first agent's model, in the order of ``calls`` (sampling draws
    from the generator in that order, as separate calls would).

    :param calls: ``(model, inputs, role)``, every tensor of ``inputs`` ``(G, n, ...)``; a recurrent model's hidden
        states ``inputs["rnn"]`` (skrl's RNN convention) ``(layers, G * n, H)`` each, as one model of all rows takes them.
    :param agents: Only these agents of the stack (their parameters a view of it, so gradients reach it), ``G`` being
        their number in ``inputs`` and the results.
    :param vmap: What maps the networks over the agents: ``torch.vmap`` (None), or its compiled form with
        ``cfg.compile`` (:func:`skrl_marl_ext.compiled.compiled_vmap`).
    :return: ``(output, outputs)`` of each call, in order, as skrl's ``Model.act`` returns them (rows ``(G * n, ...)``;
        hidden states ``outputs["rnn"]`` ``(layers, G * n, H)``).
    """
    # all agents: the stacked tensors as they are, no slicing op per tensor and call
    states = [{k: t[agents] if agents.stop else t for k, t in (m.params | m.buffers).items()} for m, _, _ in calls]
    mapped = [_agent_inputs(inputs, len(range(model.size)[agents])) for model, inputs, _ in calls]

    def compute(states, rows):  # one agent's networks, inside the map
        results = []
        for (model, _, role), state, batch, (_, static) in zip(calls, states, rows, mapped, strict=True):
            with model.swapped(state):
                results.append(_agent_outputs(*model.base.compute({**static, **batch}, role)))
        return results

    results = []
    per_agent = (vmap or torch.vmap)(compute)(states, [agent_inputs for agent_inputs, _ in mapped])
    for (model, inputs, role), (output, outputs) in zip(calls, per_agent, strict=True):
        # the mixin's act through the first agent's model, its compute answered by the map's (G, n, ...) result
        output = output.reshape(-1, *output.shape[2:])
        hidden = outputs.pop(RNN_KEY, None)
        outputs = {k: v.reshape(-1, *v.shape[2:]) for k, v in outputs.items()}
        if hidden is not None:  # recurrent: (G, layers, n, H) -> (layers, G * n, H)
            outputs[RNN_KEY] = [h.transpose(0, 1).reshape(h.shape[1], -1, h.shape[-1]) for h in hidden]
        results.append(act_answered(model.base, {k: _rows(v) for k, v in inputs.items()}, role, output, outputs))
    return results


def act_answered(
    model: Model, inputs: dict[str, Any], role: str, output: torch.Tensor, outputs: dict[str, Any]
) -> tuple[torch.Tensor, dict[str, Any]]:
    """skrl's ``model.act(inputs, role=role)`` with the model's ``compute`` answered by ``(output, outputs)``, computed
    beforehand (by a map over the agents, or a compiled call): the mixin's sampling, log-probabilities and kept
    distribution run as they would on ``compute``'s own result."""
    own = model.__dict__.get("compute")  # a compute set on the instance (e.g. a wrapper) is put back
    model.compute = lambda _inputs, _role="": (output, dict(outputs))
    try:
        return model.act(inputs, role=role)
    finally:
        if own is None:
            del model.compute
        else:
            model.compute = own


RNN_KEY = "rnn"
"""skrl's RNN convention: the hidden states of a recurrent model, a list of ``(layers, rows, H)`` tensors in its inputs
and outputs."""


def _agent_inputs(inputs: dict[str, Any], size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(mapped, static)``: the inputs the map takes agent by agent, every tensor ``(G, n, ...)`` and the hidden states
    ``(layers, G * n, H)`` as ``(G, layers, n, H)``, and the other values, the same for every agent (the mapped
    hidden states take the place of ``static["rnn"]`` in the model's inputs)."""
    mapped = {k: v for k, v in inputs.items() if torch.is_tensor(v)}
    static = {k: v for k, v in inputs.items() if not torch.is_tensor(v)}
    if inputs.get(RNN_KEY) is not None:  # recurrent
        hidden = [h.view(h.shape[0], size, -1, h.shape[-1]).transpose(0, 1).contiguous() for h in inputs[RNN_KEY]]
        mapped[RNN_KEY] = hidden
    return mapped, static


def _agent_outputs(output: torch.Tensor, outputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """One agent's ``compute`` result as the map gives it back: its tensors, those that do not depend on the rows (e.g.
    a log-std parameter) broadcast to them, so that every output stacks agent by agent into ``(G * n, ...)`` rows; a
    recurrent model's hidden states."""
    tensors = {
        k: v.expand(*output.shape[: output.dim() - v.dim()], *v.shape) if v.dim() < output.dim() else v
        for k, v in outputs.items()
        if torch.is_tensor(v)
    }
    if outputs.get(RNN_KEY) is not None:  # recurrent
        tensors[RNN_KEY] = list(outputs[RNN_KEY])
    return output, tensors


def _rows(value: Any) -> Any:
    """A ``(G, n, ...)`` input as the mixins' rows ``(G * n, ...)`` where that is a view; an expanded one (a state
    shared by the agents, which the mixins do not read) as it is, not copied."""
    if not torch.is_tensor(value) or value.stride(0) == 0:
        return value
    return value.reshape(-1, *value.shape[2:])


def batching_failure(model: nn.Module, role: str, runs: Sequence[tuple[bool, dict[str, Any]]]) -> str | None:
    """Why agents with models like ``model`` cannot run as one batch (the error of a dry run), or None when they can:
    ``model.compute`` on each ``(training, inputs)`` of ``runs`` (inputs as :func:`act_together` takes them, for two
    agents) under ``torch.vmap`` over two copies of its parameters and buffers, as a batched group runs it. E.g. a
    skrl-style recurrent model that calls ``nn.GRU`` (no batching rule) or branches on its inputs (``if
    terminated.any()``) cannot.

    It leaves nothing behind: no gradients, the model's own tensors and modes are put back, in-place writes go to the
    copies, and vmap refuses a random operation before it draws.
    """
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    state = {name: torch.stack([t.detach()] * 2) for name, t in named.items()}
    slots, modes = _tensor_slots(model), [(m, m.training) for m in model.modules()]

    def compute(state, rows, static):
        with _swapped(slots, state):
            return _agent_outputs(*model.compute({**static, **rows}, role))

    try:
        with torch.no_grad():
            for training, inputs in runs:
                model.train(training)
                mapped, static = _agent_inputs(inputs, 2)
                torch.vmap(compute, in_dims=(0, 0, None))(state, mapped, static)
    except Exception as error:  # whatever the model raised under vmap: the reason it does not batch
        return f"{type(error).__name__}: {error}".strip()
    finally:
        for module, training in modes:
            module.training = training
    return None


def in_vmap(*tensors: torch.Tensor | None) -> bool:
    """Whether any of ``tensors`` is batched by an enclosing ``torch.vmap`` (for a model that has a faster path which
    vmap cannot batch, e.g. :class:`~skrl_marl_ext.models.RecurrentCore`). torch has no public test of this; without
    its private one, True (the path vmap batches is right everywhere)."""
    is_batched = getattr(getattr(torch._C, "_functorch", None), "is_batchedtensor", None)
    if is_batched is None:  # pragma: no cover - a torch without it
        return True
    return any(t is not None and is_batched(t) for t in tensors)


CPU_MIN_AGENTS = 4
"""``batch_agent_models="auto"`` on a CPU: the fewest agents alike (see :func:`batch_by_default`) that batch."""
CPU_MAX_WIDTH = 128
"""``batch_agent_models="auto"`` on a CPU: the widest layer (output features of a weight; the hidden size of a GRU or
LSTM, whose weights stack 3 or 4 gates of it) that batches."""


def batch_by_default(models: dict[str, dict[str, nn.Module]], uid: str, *, roles: Sequence[str], device: Any) -> bool:
    """The rule of ``batch_agent_models="auto"`` for agent ``uid`` (with models of its own): batched off the CPU; on a
    CPU only where at least :data:`CPU_MIN_AGENTS` agents have models alike (class and parameter shapes, role by role)
    and none of their layers is wider than :data:`CPU_MAX_WIDTH` (on a CPU the stacked call saves per-call overhead,
    which few agents or wide layers do not repay: its large fresh activations cost more there).

    :param models: Every agent's models by role (as handed to the agent).
    :param uid: The agent asking.
    :param roles: The model roles (``"policy"``, ``"value"``).
    :param device: The agent's device.
    """
    if torch.device(device).type != "cpu":
        return True

    def shapes(of: str) -> tuple | None:
        params = [list(models[of][r].parameters()) for r in roles]
        if any(nn.parameter.is_lazy(p) for ps in params for p in ps):
            return None  # not initialised: cannot be stacked (see stack_signature)
        return tuple(
            (type(models[of][r]), tuple(tuple(p.shape) for p in ps)) for r, ps in zip(roles, params, strict=True)
        )

    own = shapes(uid)
    if own is None:
        return False
    alike = {id(models[u][roles[0]]) for u in models if shapes(u) == own}
    widest = max((_width(m) for r in roles for m in models[uid][r].modules()), default=0)
    return len(alike) >= CPU_MIN_AGENTS and widest <= CPU_MAX_WIDTH


PASS_ACTIVATIONS = 2**23
"""``update_agents_at_once="auto"``: the hidden activations (elements, :func:`activation_width` per sample) one pass of
an update's forward and backward may hold before a batched group's agents are split into passes: more agents at once
save kernel launches, fewer keep less alive."""


def activation_width(model: nn.Module) -> int:
    """The hidden activations per sample of ``model``'s forward: the output features of its weights (a GRU's or LSTM's
    hidden size per layer)."""
    return sum(
        module.hidden_size * module.num_layers if isinstance(module, nn.RNNBase) else _width(module)
        for module in model.modules()
    )


def _width(module: nn.Module) -> int:
    """The output features of ``module``'s own widest weight; a GRU's or LSTM's hidden size."""
    if isinstance(module, nn.RNNBase):
        return module.hidden_size
    return max((p.shape[0] for p in module.parameters(recurse=False) if p.dim() >= 2), default=0)


STACKABLE_PREPROCESSORS = (ValueNorm,)
"""Preprocessor classes whose statistics updates :class:`StackedPreprocessor` knows, besides skrl's
``RunningStandardScaler`` (checked by name in :func:`stackable_preprocessor`)."""


def stackable_preprocessor(cls: Any) -> bool:
    """Whether agents with preprocessors of class ``cls`` (None: none) can form a batched group."""
    from skrl.resources.preprocessors.torch import RunningStandardScaler

    return not cls or (isinstance(cls, type) and issubclass(cls, (RunningStandardScaler, *STACKABLE_PREPROCESSORS)))


class StackedPreprocessor(StackedModules):
    """The preprocessors of a batched group's ``G`` agents (skrl's ``RunningStandardScaler`` or :class:`ValueNorm`),
    each agent's statistics its own, applied and updated in one call. A statistic's name (``running_mean``, ...)
    gives the stacked ``(G, ...)`` tensor whose slices are the agents' own."""

    def __getattr__(self, name: str) -> torch.Tensor:
        buffers = self.__dict__.get("buffers", {})
        if name in buffers:
            return buffers[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __call__(self, x: torch.Tensor, *, agent_dim: int, inverse: bool = False) -> torch.Tensor:
        """Each agent's slice of ``x`` (the agents along ``agent_dim``; a size-1 agent dimension is one tensor for
        all agents) through that agent's preprocessor; the agent dimension of the result has size ``G``."""
        if x.shape[agent_dim] == 1 and self.size > 1:
            x = x.expand(*x.shape[:agent_dim], self.size, *x.shape[agent_dim + 1 :])

        def forward(state, rows):
            with self.swapped(state):
                return self.modules[0](rows, inverse=inverse)

        return self.vmap(forward, x, in_dims=(agent_dim,), out_dims=agent_dim)

    def same_for_all(self) -> bool:
        """Whether every agent's statistics are the same (one host read): then any agent's preprocessor gives what each
        agent's would."""
        return bool(torch.stack([(t == t[:1]).all() for t in self.buffers.values()]).all())

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None, *, agent_dim: int) -> None:
        """Fold each agent's unmasked rows of ``x`` (agents along ``agent_dim``; size 1: the same rows for all) into
        its own statistics, summed over ranks (:func:`~skrl_marl_ext.preprocessors.per_agent_moments`: a shared ``x``
        is not expanded to the agents)."""
        shift = self.buffers.get("running_mean")
        moments = per_agent_moments(x, mask, agents=self.size, agent_dim=agent_dim, shift=shift)
        fold_moments_(_Stack(self), *moments)


class _Stack:
    """The stacked buffers of ``G`` preprocessors by name, counts shaped ``(G, 1)`` (views of the stack), with the
    modules' settings: what :func:`~skrl_marl_ext.preprocessors.fold_moments_` updates in place."""

    def __init__(self, stacked: StackedPreprocessor) -> None:
        for name, tensor in stacked.buffers.items():
            setattr(self, name, tensor.unsqueeze(-1) if name == "current_count" else tensor)
        if isinstance(stacked.modules[0], ValueNorm):
            self.beta = stacked.modules[0].beta


NORMS_PER_TENSOR_ON = frozenset({"cpu"})
"""Device types on which :func:`clip_grad_norm_per_agent_` takes one norm per gradient tensor (no copy; one op per
tensor) rather than one norm of all the gradients concatenated (a copy of every gradient; two ops in all)."""


@torch.no_grad()
def clip_grad_norm_per_agent_(
    parameters: Sequence[torch.Tensor], max_norm: float, *, per_tensor: bool | None = None
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for each agent's slice of stacked ``(G, ...)`` parameters, as ``G``
    separate optimisers would clip: the same formula (``max_norm / (norm + 1e-6)``, at most 1) per agent.

    :param per_tensor: How the per-agent norms are taken (the same up to float rounding). True: a norm per gradient
        tensor and agent, then the norm of those (as ``clip_grad_norm_`` does it); False: the norm of each agent's
        row of all gradients concatenated. None: True on the device types of :data:`NORMS_PER_TENSOR_ON` (a CPU,
        where the concatenation's copy costs more than the clip), False elsewhere (a GPU, where per tensor is one
        kernel launch each).
    :return: The per-agent total norms ``(G,)``.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    G = grads[0].shape[0]
    if per_tensor is None:
        per_tensor = grads[0].device.type in NORMS_PER_TENSOR_ON
    if per_tensor:
        rows = [g.float() if g.dim() > 1 else g.float().unsqueeze(1) for g in grads]  # (G,): dim=() would be all
        norms = [torch.linalg.vector_norm(r, dim=tuple(range(1, r.dim()))) for r in rows]
        total = torch.linalg.vector_norm(torch.stack(norms, dim=1), dim=1)
    else:
        total = torch.linalg.vector_norm(torch.cat([_flat(g).float() for g in grads], dim=1), dim=1)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    # one multi-tensor multiply, as torch's clip_grad_norm_ does it (foreach), not one kernel per parameter
    torch._foreach_mul_(grads, [coef.view(G, *([1] * (g.dim() - 1))).to(g.dtype) for g in grads])
    return total


class AgentOptimizerView(torch.optim.Optimizer):
    """Agent ``index``'s part of a batched group's optimiser, as the optimiser that agent would have on its own: its
    parameter groups (of an :class:`Adam`, the agent's own hyperparameters, so that a learning rate scheduler built on
    the view adapts that agent's rate alone) and its state dict (each tensor of the state sliced at ``index``), so
    that checkpoints keep the per-agent layout and load into either form. It is written in skrl's layout where it can
    be (one parameter group, see :func:`~skrl_marl_ext.checkpoint.optimizer_file_state`) and loads from either layout.
    It holds no parameters and takes no step of its own: the group's optimiser steps every agent."""

    def __init__(self, optimizer: torch.optim.Optimizer, index: int) -> None:  # a view: not Optimizer.__init__
        self.optimizer, self.index = optimizer, index
        self.defaults = optimizer.defaults

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        agent_param_groups = getattr(self.optimizer, "agent_param_groups", None)
        return self.optimizer.param_groups if agent_param_groups is None else agent_param_groups[self.index]

    @property
    def _opt_called(self) -> bool:
        """Whether the group's optimiser has stepped (torch's LR schedulers warn when they step before it)."""
        return getattr(self.optimizer, "_opt_called", False)

    def step(self, closure: Any = None) -> None:
        raise RuntimeError(f"{type(self).__name__} takes no step: step the group's optimiser, which steps every agent")

    def __getstate__(self) -> dict[str, Any]:  # a view's own attributes (torch's Optimizer pickles its state)
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _slice(self, value: Any) -> Any:
        stacked = torch.is_tensor(value) and value.dim() > 0
        return value[self.index].clone() if stacked else value

    def state_dict(self) -> dict[str, Any]:
        optimizer, ids, groups, state = self.optimizer, {}, [], {}
        for own, group in zip(self.param_groups, optimizer.param_groups, strict=True):
            keys = [ids.setdefault(id(p), len(ids)) for p in group["params"]]  # numbered as torch numbers them
            groups.append({**{k: v for k, v in own.items() if k != "params"}, "params": keys})
            for key, param in zip(keys, group["params"], strict=True):
                if optimizer.state.get(param):
                    state[key] = {name: self._slice(v) for name, v in optimizer.state[param].items()}
        return optimizer_file_state({"state": state, "param_groups": groups})

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        optimizer = self.optimizer
        groups = fit_optimizer_state(state_dict, self)["param_groups"]
        for own, saved in zip(self.param_groups, groups, strict=True):
            own.update({k: v for k, v in saved.items() if k != "params"})
        # the file's parameter ids -> this optimiser's parameters and their groups (as torch maps them)
        params = {
            key: (param, group)
            for group, saved in zip(optimizer.param_groups, groups, strict=True)
            for key, param in zip(saved["params"], group["params"], strict=True)
        }
        counts = getattr(optimizer, "agent_param_groups", None) is not None  # each agent's own step count
        on_device = {
            id(p) for g in optimizer.param_groups if g.get("fused") or g.get("capturable") for p in g["params"]
        }
        for key, saved in state_dict["state"].items():
            param, group = params[key]
            state = optimizer.init_state(param, group) if counts else optimizer.state[param]
            for name, value in saved.items():
                if name == "step" and counts:
                    if state[name].dim() == 0:
                        state[name] = state[name].expand(optimizer.agents).clone()
                    state[name][self.index].copy_(torch.as_tensor(value))
                elif torch.is_tensor(value) and value.dim() > 0:
                    if name not in state:
                        state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state[name][self.index].copy_(value)
                elif name == "step" and torch.is_tensor(value) and id(param) in on_device:  # as torch loads it
                    state[name] = value.to(device=param.device, dtype=torch.float32, copy=True)
                else:
                    state[name] = value.clone() if torch.is_tensor(value) else value
            if counts and bool((state["step"] == state["step"][0]).all()):  # every agent's count alike: one count
                state["step"] = state["step"][0].clone()


__all__ = [
    "Adam",
    "make_adam",
    "AgentOptimizerView",
    "StackedModel",
    "StackedModules",
    "StackedPreprocessor",
    "act_answered",
    "act_together",
    "activation_width",
    "batching_failure",
    "clip_grad_norm_per_agent_",
    "in_vmap",
    "stack_signature",
    "stackable_preprocessor",
]
