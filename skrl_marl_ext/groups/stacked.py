"""Agents with models of their own, run as one batch (``torch.func``): the one module that reaches into torch.

``G`` agents whose models have the same class and the same parameter and buffer shapes form a *batched group*: each
model role is one :class:`StackedModel`, whose parameters are the ``G`` agents' parameters stacked into ``(G, ...)``
leaf tensors, and one call of it runs all ``G`` agents (``torch.vmap`` of the first model's ``compute`` with one
agent's parameters swapped in, as ``torch.func.functional_call`` does). The number of tensor operations per call, and
so the kernel launches on a GPU, does not grow with ``G``. Roles that a step calls together (a PPO step's policy and
value, MADDPG's twin critics) run in one map (:func:`act_together`).

The user's skrl models stay the source of truth: after stacking, each model's parameters and buffers are *views* of
its slice of the stacked tensors, so an optimiser step on the stacked tensors is seen by the models at once, a
``load_state_dict`` on a model writes into the stack, and checkpoints keep the per-agent layout.

How a call runs: only the models' ``compute`` (the network) is vmapped, agent by agent over its own rows; skrl's mixin
``act`` (sampling, clipping, log-probabilities, the distribution kept on the module for ``get_entropy`` and
``distribution``) then runs once, outside the vmap, on the ``(G * n, ...)`` outputs through the first agent's model.
Random sampling thus stays ordinary torch sampling (``vmap`` cannot sample in place per agent), and every mixin works
unchanged.

Also here: the per-agent statistics of stacked preprocessors (:class:`StackedPreprocessor`), gradient-norm clipping per
agent slice (:func:`clip_grad_norm_per_agent_`), the per-agent view of a stacked optimiser's state for checkpoints
(:class:`AgentOptimizerView`), the rule of which models stack (:func:`stack_signature`) and of when they do by default
(:func:`batch_by_default`), and the fused Adam that steps transposed weights (:func:`make_adam`). What this module does beyond torch's public API, so that a torch upgrade is
its concern alone: it rebinds the ``.data`` of the models' parameters to slices of the stack, swaps ``_parameters`` /
``_buffers`` entries for one call (:meth:`StackedModules.swapped`), answers a model's ``compute`` on the instance
for its mixin's ``act``, and overrides ``torch.optim.Adam._init_group`` (:class:`Adam`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from packaging import version
from skrl.models.torch import Model
from torch import nn
from torch.optim import optimizer as torch_optimizer

from skrl_marl_ext.checkpoint import fit_optimizer_state, optimizer_file_state
from skrl_marl_ext.preprocessors import ValueNorm, fold_sums_, per_agent_sums


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

    @contextlib.contextmanager
    def swapped(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        """The first module's parameters and buffers replaced by ``state`` (one agent's, inside the map), every tied
        alias included, and put back after: what ``torch.func.functional_call`` does, written out because that leaves a
        module registered under two names holding the map's tensors after the call (the aliased-module test)."""
        saved = []
        try:
            for name, tensor in state.items():
                for store, key in self._slots[name]:
                    saved.append((store, key, store[key]))
                    store[key] = tensor
            yield
        finally:
            for store, key, tensor in reversed(saved):
                store[key] = tensor


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` that steps a parameter stored transposed (a batched group's linear weights: ``(G, out,
    in)`` held as ``(G, in, out)`` in memory, see :class:`StackedModules`) through its contiguous transpose, with its
    gradient and moments: the same elementwise update, which torch's fused CPU kernel runs faster on contiguous
    tensors. This overrides a private method of torch's Adam (stable since torch 2.0; the tests spy on
    the fused kernel's inputs). Its state and checkpoints are torch's Adam's, tensor for tensor."""

    def _init_group(self, group, params, *lists):
        result = super()._init_group(group, params, *lists)  # fills the lists: grads, moments, steps
        for i, param in enumerate(params):
            if param.dim() >= 2 and not param.is_contiguous() and param.mT.is_contiguous():
                params[i] = param.mT
                for tensors in lists:  # the same index of every list (none when empty, e.g. without amsgrad)
                    if len(tensors) == len(params) and tensors[i].dim() >= 2:
                        tensors[i] = tensors[i].mT
        return result


def make_adam(params: list, **kwargs: Any) -> torch.optim.Adam:
    """:class:`Adam` (``torch.optim.Adam(params, **kwargs)``), fused where torch has the fused kernel for every
    parameter's device (CPU since torch 2.4, CUDA), multi-tensor (``foreach``) otherwise.

    The same update as skrl's ``torch.optim.Adam(params, lr=...)`` up to float rounding, in fewer passes over memory:
    the fused kernel reads and writes each parameter, gradient and moment once per step, where ``foreach`` runs
    several elementwise ops, each over every tensor. A ``GradScaler`` hands it the scale and the inf check (``_step_supports_amp_scaling``).
    """
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    supported = getattr(torch_optimizer, "_get_fused_kernels_supported_devices", list)()
    if version.parse(torch.__version__) < version.parse("2.4"):
        supported = [d for d in supported if d != "cpu"]  # pragma: no cover - old torch: no CPU kernel
    fused = all(p.device.type in supported and p.dtype.is_floating_point for p in tensors)
    # torch's own Adam unless a parameter is stored transposed (a batched group's linear weights, see _stack)
    transposed = any(not nn.parameter.is_lazy(p) and p.dim() >= 2 and not p.is_contiguous() for p in tensors)
    cls = Adam if transposed else torch.optim.Adam
    return cls(params, **kwargs, **({"fused": True} if fused else {"foreach": True}))


class StackedModel(StackedModules):
    """``G`` skrl models of one class and shape run as one call (see the module docstring)."""

    def __init__(self, models: Sequence[Model]) -> None:
        super().__init__(models)
        self.base = self.modules[0]


def act_together(
    calls: Sequence[tuple[StackedModel, dict[str, Any], str]],
) -> list[tuple[torch.Tensor, dict[str, Any]]]:
    """``model.act(inputs, role=role)`` of each ``(model, inputs, role)``, the models being stacked over the same
    ``G`` agents (one group's roles), with every network in **one** ``torch.vmap``: the map's set-up is paid once for
    e.g. the policy and the value of a PPO step, or twin critics.

    Inside the map, each agent's rows ``(G, n, ...)`` run through the first model's ``compute`` with that agent's
    parameters. The mixins' ``act`` (sampling, log-probabilities, the kept distribution) then run once, outside the
    map, on the ``(G * n, ...)`` outputs through the first agent's model, in the order of ``calls`` (sampling draws
    from the generator in that order, as separate calls would).

    :param calls: ``(model, inputs, role)``, every tensor of ``inputs`` ``(G, n, ...)``.
    :return: ``(output, outputs)`` of each call, in order, as skrl's ``Model.act`` returns them (rows ``(G * n, ...)``).
    """
    tensors = [{k: v for k, v in inputs.items() if torch.is_tensor(v)} for _, inputs, _ in calls]
    statics = [{k: v for k, v in inputs.items() if not torch.is_tensor(v)} for _, inputs, _ in calls]

    def compute(states, rows):  # one agent's networks, inside the map
        results = []
        for (model, _, role), state, batch, static in zip(calls, states, rows, statics, strict=True):
            with model.swapped(state):
                output, outputs = model.base.compute({**static, **batch}, role)
            # outputs that do not depend on the rows (e.g. a log-std parameter) are broadcast to them, so that every
            # output of the map stacks agent by agent into (G * n, ...) rows
            outputs = {
                k: v.expand(*output.shape[: output.dim() - v.dim()], *v.shape) if v.dim() < output.dim() else v
                for k, v in outputs.items()
                if torch.is_tensor(v)
            }
            results.append((output, outputs))
        return results

    states = [{**model.params, **model.buffers} for model, _, _ in calls]
    results = []
    for (model, inputs, role), (output, outputs) in zip(calls, torch.vmap(compute)(states, tensors), strict=True):
        # the mixin's act through the first agent's model, its compute answered by the map's (G, n, ...) result
        output = output.reshape(-1, *output.shape[2:])
        outputs = {k: v.reshape(-1, *v.shape[2:]) for k, v in outputs.items()}
        base = model.base
        own = base.__dict__.get("compute")  # a compute set on the instance (e.g. a wrapper) is put back
        base.compute = lambda _inputs, _role="", output=output, outputs=outputs: (output, dict(outputs))
        try:
            results.append(base.act({k: _rows(v) for k, v in inputs.items()}, role=role))
        finally:
            if own is None:
                del base.compute
            else:
                base.compute = own
    return results


def _rows(value: Any) -> Any:
    """A ``(G, n, ...)`` input as the mixins' rows ``(G * n, ...)`` where that is a view; an expanded one (a state
    shared by the agents, which the mixins do not read) as it is, not copied."""
    if not torch.is_tensor(value) or value.stride(0) == 0:
        return value
    return value.reshape(-1, *value.shape[2:])


CPU_MIN_AGENTS = 4
"""``batch_agent_models="auto"`` on a CPU: the fewest agents alike (see :func:`batch_by_default`) that batch."""
CPU_MAX_WIDTH = 128
"""``batch_agent_models="auto"`` on a CPU: the widest layer (output features of a weight) that batches."""


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
    widest = max((p.shape[0] for r in roles for p in models[uid][r].parameters() if p.dim() >= 2), default=0)
    return len(alike) >= CPU_MIN_AGENTS and widest <= CPU_MAX_WIDTH


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

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None, *, agent_dim: int) -> None:
        """Fold each agent's unmasked rows of ``x`` (agents along ``agent_dim``; size 1: the same rows for all) into
        its own statistics, summed over ranks."""
        G = self.size
        x = x.movedim(agent_dim, 0)
        x = x.expand(G, *x.shape[1:]).reshape(G, -1, x.shape[-1])
        if mask is not None:
            mask = mask.movedim(agent_dim, 0)
            mask = mask.expand(G, *mask.shape[1:]).reshape(G, -1, 1)
        fold_sums_(_Stack(self), *per_agent_sums(x, mask))


class _Stack:
    """The stacked buffers of ``G`` preprocessors by name, counts shaped ``(G, 1)`` (views of the stack), with the
    modules' settings: what :func:`~skrl_marl_ext.preprocessors.fold_sums_` updates in place."""

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


class AgentOptimizerView:
    """Agent ``index``'s part of a batched group's optimiser, with the state dict of the optimiser that agent would
    have on its own (each tensor of the state sliced at ``index``), so that checkpoints keep the per-agent layout and
    load into either form. It is written in skrl's layout where it can be (one parameter group, see
    :func:`~skrl_marl_ext.checkpoint.optimizer_file_state`) and loads from either layout."""

    def __init__(self, optimizer: torch.optim.Optimizer, index: int) -> None:
        self.optimizer, self.index = optimizer, index

    def _slice(self, value: Any) -> Any:
        stacked = torch.is_tensor(value) and value.dim() > 0
        return value[self.index].clone() if stacked else value

    def state_dict(self) -> dict[str, Any]:
        full = self.optimizer.state_dict()
        state = {k: {name: self._slice(v) for name, v in s.items()} for k, s in full["state"].items()}
        return optimizer_file_state({"state": state, "param_groups": full["param_groups"]})

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        optimizer = self.optimizer
        groups = fit_optimizer_state(state_dict, optimizer)["param_groups"]
        for group, saved in zip(optimizer.param_groups, groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        # the file's parameter ids -> this optimiser's parameters, group by group (as torch maps them)
        params = {
            key: param
            for group, saved in zip(optimizer.param_groups, groups, strict=True)
            for key, param in zip(saved["params"], group["params"], strict=True)
        }
        on_device = {
            id(p) for g in optimizer.param_groups if g.get("fused") or g.get("capturable") for p in g["params"]
        }
        for key, saved in state_dict["state"].items():
            param = params[key]
            state = optimizer.state[param]
            for name, value in saved.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    if name not in state:
                        state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state[name][self.index].copy_(value)
                elif name == "step" and torch.is_tensor(value) and id(param) in on_device:  # as torch loads it
                    state[name] = value.to(device=param.device, dtype=torch.float32, copy=True)
                else:
                    state[name] = value.clone() if torch.is_tensor(value) else value


__all__ = [
    "Adam",
    "make_adam",
    "AgentOptimizerView",
    "StackedModel",
    "StackedModules",
    "StackedPreprocessor",
    "act_together",
    "clip_grad_norm_per_agent_",
    "stack_signature",
    "stackable_preprocessor",
]
