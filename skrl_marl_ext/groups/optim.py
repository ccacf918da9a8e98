"""The optimiser of a group: torch's Adam for its agents, each with its own learning rate and step count, and the
per-agent gradient clip.

A group of ``G`` agents with models of their own trains ``G`` models per role on stacked ``(G, ...)`` parameters
(:mod:`~skrl_marl_ext.groups.stacked`); agents that share a model, and an agent alone, train one. :class:`Adam` is
the one optimiser of every kind of group, its agents the models it trains: each keeps the optimiser it would have on
its own (its learning rates, which a scheduler adapts through its view, :class:`AgentOptimizerView`, its step count),
and a step may leave agents out (PPO's KL early stop of one agent).

Beyond torch's public API (with :mod:`~skrl_marl_ext.groups.stacked`, the package's only such code): the step runs
torch's ``torch.optim.adam.adam`` (the functional form of its Adam) or ``torch._foreach_*`` ops on the stacked tensors,
and the per-agent views stand in for optimisers in torch's LR schedulers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from packaging import version
from torch import nn
from torch.optim import optimizer as torch_optimizer
from torch.optim.adam import adam as adam_step

from skrl_marl_ext.checkpoints import fit_optimizer_state, optimizer_file_state

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
    be (one parameter group, see :func:`~skrl_marl_ext.checkpoints.optimizer_file_state`) and loads from either layout.
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


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ``(G, ...)`` as ``(G, n)`` in its memory order (a view for any dense layout whose first dimension
    is outermost, e.g. :func:`_stack`'s transposed weights): for norms, which do not depend on the order."""
    order = [0, *sorted(range(1, tensor.dim()), key=lambda d: -tensor.stride(d))]
    permuted = tensor.permute(order)
    return permuted.reshape(tensor.shape[0], -1)


__all__ = ["Adam", "AgentOptimizerView", "clip_grad_norm_per_agent_", "make_adam"]
