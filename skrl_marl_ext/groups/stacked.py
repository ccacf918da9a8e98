"""Agents with models of their own, run as one batch (``torch.func``).

``G`` agents whose models have the same class and the same parameter and buffer shapes form a *batched group*: each
model role is one :class:`StackedModel`, whose parameters are the ``G`` agents' parameters stacked into ``(G, ...)``
leaf tensors, and one call of it runs all ``G`` agents (``torch.vmap`` of the first model's ``compute`` with one
agent's parameters swapped in, as ``torch.func.functional_call`` does). The number of tensor operations per call, and
so the kernel launches on a GPU, does not grow with ``G``. Roles that a step calls together (a PPO step's policy and
value, MADDPG's twin critics) run in one map (:meth:`~skrl_marl_ext.groups.AgentGroup.act_many`). Recurrent models batch too, their hidden states
``(layers, G * n, H)`` mapped agent by agent, where they run under vmap at all (a dry run tells:
:func:`batching_failure`).

The user's skrl models stay the source of truth: after stacking, each model's parameters and buffers are *views* of
its slice of the stacked tensors, so an optimiser step on the stacked tensors is seen by the models at once, a
``load_state_dict`` on a model writes into the stack, and checkpoints keep the per-agent layout.

How a call runs: only the models' ``compute`` (the network) is vmapped, agent by agent over its own rows; skrl's mixin
``act`` (sampling, clipping, log-probabilities, the distribution kept on the module for ``get_entropy`` and
``distribution``) then runs once, outside the vmap, on the ``(G * n, ...)`` outputs through the first agent's model.
Random sampling thus stays ordinary torch sampling (``vmap`` cannot sample in place per agent), and every mixin works
unchanged. :meth:`~skrl_marl_ext.groups.AgentGroup.act_many` runs such a call with the pieces here:
:func:`agent_inputs`, :func:`agent_outputs`, :meth:`StackedModules.swapped` inside the map, :func:`act_answered`
after it.

What this module does beyond torch's public API (with :mod:`~skrl_marl_ext.groups.optim`, the package's only such
code): it rebinds the ``.data`` of the models' parameters to slices of the stack, swaps ``_parameters`` / ``_buffers``
entries for one call (:meth:`StackedModules.swapped`), answers a model's ``compute`` on the instance for its mixin's
``act``, and tells a tensor batched by vmap (:func:`in_vmap`, torch's private ``is_batchedtensor``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from skrl.models.torch import Model
from torch import nn


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


class StackedModel(StackedModules):
    """``G`` skrl models of one class and shape run as one call (see the module docstring)."""

    def __init__(self, models: Sequence[Model]) -> None:
        super().__init__(models)
        self.base = self.modules[0]


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


def agent_inputs(inputs: dict[str, Any], size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(mapped, static)``: the inputs the map takes agent by agent, every tensor ``(G, n, ...)`` and the hidden states
    ``(layers, G * n, H)`` as ``(G, layers, n, H)``, and the other values, the same for every agent (the mapped
    hidden states take the place of ``static["rnn"]`` in the model's inputs)."""
    mapped = {k: v for k, v in inputs.items() if torch.is_tensor(v)}
    static = {k: v for k, v in inputs.items() if not torch.is_tensor(v)}
    if inputs.get(RNN_KEY) is not None:  # recurrent
        hidden = [h.view(h.shape[0], size, -1, h.shape[-1]).transpose(0, 1).contiguous() for h in inputs[RNN_KEY]]
        mapped[RNN_KEY] = hidden
    return mapped, static


def agent_outputs(output: torch.Tensor, outputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
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


def mixin_rows(value: Any) -> Any:
    """A ``(G, n, ...)`` input as the mixins' rows ``(G * n, ...)`` where that is a view; an expanded one (a state
    shared by the agents, which the mixins do not read) as it is, not copied."""
    if not torch.is_tensor(value) or value.stride(0) == 0:
        return value
    return value.reshape(-1, *value.shape[2:])


def batching_failure(model: nn.Module, role: str, runs: Sequence[tuple[bool, dict[str, Any]]]) -> str | None:
    """Why agents with models like ``model`` cannot run as one batch (the error of a dry run), or None when they can:
    ``model.compute`` on each ``(training, inputs)`` of ``runs`` (inputs as :meth:`~skrl_marl_ext.groups.AgentGroup.act_many` takes them, for two
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
            return agent_outputs(*model.compute({**static, **rows}, role))

    try:
        with torch.no_grad():
            for training, inputs in runs:
                model.train(training)
                mapped, static = agent_inputs(inputs, 2)
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


__all__ = [
    "StackedModel",
    "StackedModules",
    "act_answered",
    "agent_inputs",
    "agent_outputs",
    "batching_failure",
    "in_vmap",
    "mixin_rows",
    "stack_signature",
]
