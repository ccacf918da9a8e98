"""The opt-in compiled path of the on-policy agents (``cfg.compile``): ``torch.compile`` of the networks as the agent
calls them and of the loss. The agent enters here once, at the end of its construction (:func:`compile_agent`).

What is compiled:

- each group's networks: a batched group's one ``torch.vmap`` of its models' ``compute`` over the stacked parameters
  (the map of :meth:`~skrl_marl_ext.groups.AgentGroup.act_many`), another group's model ``compute``. Acting, the
  bootstrap value and every mini-batch's forward and backward pass run through them. skrl's mixins' ``act`` (sampling,
  log-probabilities, the kept distribution) stays eager on their result
  (:func:`~skrl_marl_ext.groups.stacked.act_answered`), so actions are drawn from torch's generator as eager draws
  them;
- the loss: the agent's ``ppo_loss`` (and HAPPO's team-critic ``value_loss``), replaced on the instance by its
  compiled form, as the agent's class lets an instance replace its math.

What stays eager: the preprocessors, GAE (once per update, a loop over the rollout's steps), gradient clipping and the
optimiser step (torch's fused Adam, one kernel over every parameter already; compiling it saved too little to pay for
a second, compiled, form of the per-agent Adam). Recurrent groups stay eager too: their models hold an ``nn.GRU`` or
``nn.LSTM``, which the compiler does not trace (a graph break; inside a batched group's parameter swap it makes the
whole map run eager).

Functions are compiled, never modules, so the models, their state dicts and the checkpoints are the eager path's (no
``_orig_mod.`` prefix). Shapes follow torch's default (``dynamic=None``): a call is compiled for the shapes it first
sees, and a second size of the batch dimension (a mini-batch after the acting step, a last mini-batch of another size)
recompiles it once with that dimension dynamic. Grad mode, the roles called together and the model classes are part of
what a compiled graph is specialised for, so an agent compiles a handful of graphs in its first rollout and update and
none after (evaluation acting adds one).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

OPTIONS = ("mode", "dynamic", "fullgraph", "backend", "options")
"""The keyword arguments of ``torch.compile`` that ``cfg.compile`` may give as a dict."""
LOSSES = ("ppo_loss", "value_loss")
"""The agent's loss functions that are compiled, where it has them (``value_loss``: HAPPO's team critic)."""


def compile_options(value: Any, *, owner: str = "agent") -> dict[str, Any] | None:
    """``cfg.compile`` as ``torch.compile``'s keyword arguments, or None when off.

    :param value: False (off), True (torch's defaults) or a dict of :data:`OPTIONS`.
    :raises ValueError: On any other value, or a dict key that is not one of :data:`OPTIONS`.
    """
    if value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, dict) and set(value) <= set(OPTIONS):
        return dict(value)
    raise ValueError(
        f"{owner}: cfg.compile must be False, True or a dict of torch.compile's keyword arguments {list(OPTIONS)} "
        f"(e.g. {{'mode': 'reduce-overhead'}} for CUDA graphs), got {value!r}"
    )


def _map(compute: Callable, states: Any, inputs: Any) -> Any:
    """``torch.vmap(compute)(states, inputs)``: a batched group's networks over its agents, one function to compile."""
    return torch.vmap(compute)(states, inputs)


def _network(model: torch.nn.Module, inputs: dict[str, Any], role: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """``model.compute(inputs, role)``: a model's network, as one function to compile."""
    return model.compute(inputs, role)


def compiled_vmap(options: dict[str, Any]) -> Callable[[Callable], Callable]:
    """A stand-in for ``torch.vmap`` that runs the map, and the networks inside it, compiled (``options``: keyword
    arguments of ``torch.compile``)."""
    mapped = torch.compile(_own_code(_map), **options)
    return lambda compute: functools.partial(mapped, compute)


def _own_code(function: Callable) -> Callable:
    """``function`` with a code object of its own. torch keeps compiled graphs per code object, up to a limit of
    recompilations (8 by default) past which it runs the function eagerly; each agent's calls, and each kind of group's,
    thus keep to a cache of their own rather than filling one shared by every agent of the process."""
    if not isinstance(function, types.FunctionType):
        return function
    code, name = function.__code__.replace(), function.__name__
    copy = types.FunctionType(code, function.__globals__, name, function.__defaults__, function.__closure__)
    copy.__kwdefaults__, copy.__doc__ = function.__kwdefaults__, function.__doc__
    return copy


def compile_agent(agent: Any) -> None:
    """Compile what ``agent.cfg.compile`` asks (see the module docstring): the networks of each group that is not
    recurrent, one compiled call per kind of group (batched or not, its models' classes) shared by the groups alike,
    and the agent's losses. Nothing happens when it is off."""
    options = compile_options(agent.cfg.compile, owner=type(agent).__name__)
    if options is None:
        return
    kinds: dict[tuple, Callable] = {}
    for group in agent.groups:
        if getattr(group, "recurrent", None) is not None:
            continue  # recurrent: eager (see the module docstring)
        kind = (bool(group.stacked), *(type(model) for model in group.models.values()))
        if kind not in kinds:
            kinds[kind] = compiled_vmap(options) if group.stacked else torch.compile(_own_code(_network), **options)
        if group.stacked:
            group.vmap = kinds[kind]
        else:
            group.compiled_compute = kinds[kind]
    for name in LOSSES:
        if hasattr(agent, name):
            setattr(agent, name, torch.compile(_own_code(getattr(agent, name)), **options))


__all__ = ["OPTIONS", "compile_agent", "compile_options", "compiled_vmap"]
