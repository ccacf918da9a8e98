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
from skrl.resources.schedulers.torch import KLAdaptiveLR
from torch.optim import optimizer as torch_optimizer
from torch.optim.adam import adam as adam_step

from skrl_marl_ext import distributed
from skrl_marl_ext.checkpoints import fit_optimizer_state, optimizer_file_state

ADAM_SETTINGS = ("betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")
"""The hyperparameters of an Adam parameter group besides the learning rate that say what its step computes."""


class Adam(torch.optim.Adam):
    """torch's Adam as the optimiser of a group's ``agents`` (``K``): ``G`` agents with models of their own, whose
    parameters are stacked ``(G, ...)`` (``stacked``), or one set of models (agents that share them, or one agent).

    Each agent keeps the optimiser it would have on its own: its parameter groups (:attr:`agent_param_groups`, whose
    learning rates a scheduler adapts through the agent's view, :meth:`views`), its step count, and ``step(agents=...)``
    leaves agents out, their parameters and state as they are (PPO's KL early stop of one agent). One set of models
    steps as torch's Adam does, its ``param_groups`` its one agent's.

    Stacked, every agent stepping with one learning rate and one step count takes one step of torch's kernel on the
    stacked tensors (``state["step"]`` holds the one count, as torch's Adam does; a parameter stored transposed, a
    batched group's linear weight, is stepped through its contiguous transpose, which torch's fused CPU kernel runs
    faster). Otherwise one vectorised step serves all agents: the learning rates and step counts as ``(K,)`` tensors
    and a mask of the agents that step, the same ``torch._foreach_*`` ops whatever ``K``; ``state["step"]`` then holds
    each agent's count ``(K,)``. The other hyperparameters (:data:`ADAM_SETTINGS`) are the group's.
    """

    def __init__(self, params: Any, *, agents: int = 1, stacked: bool = False, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.agents, self.stacked = agents, stacked
        self._own_groups = [[dict(g) for g in self.param_groups] for _ in range(agents)] if stacked else None

    @property
    def agent_param_groups(self) -> list[list[dict[str, Any]]]:
        """Each agent's parameter groups: torch's ``param_groups`` as its own optimiser would have them (one set of
        models: ``param_groups`` itself, which torch's ``load_state_dict`` replaces)."""
        return self._own_groups if self.stacked else [self.param_groups]

    def views(self) -> list[torch.optim.Optimizer]:
        """Each agent's optimiser, for its LR scheduler and checkpoint: a view of its part (:class:`AgentOptimizerView`),
        or this optimiser for one set of models."""
        return [AgentOptimizerView(self, i) for i in range(self.agents)] if self.stacked else [self]

    def agent_steps(self) -> list[int]:
        """The steps each agent has taken (one host read)."""
        for group in self.param_groups:
            for param in group["params"]:
                if "step" in self.state.get(param, {}):
                    return [int(step) for step in self.state[param]["step"].expand(self.agents).tolist()]
        return [0] * self.agents

    def learning_rates(self) -> torch.Tensor:
        """Each agent's learning rate of its first parameter group, ``(K,)``."""
        return torch.tensor([groups[0]["lr"] for groups in self.agent_param_groups], dtype=torch.float64)

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
        """One Adam step of every agent, or of the agents where ``agents`` (``K`` flags) is True."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._opt_called = True  # what torch's LR schedulers check (through each agent's view)
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self.init_state(p, group) for p in params]
            own = [groups[index] for groups in self.agent_param_groups]
            if any(tuple(g[k] for k in ADAM_SETTINGS) != tuple(group[k] for k in ADAM_SETTINGS) for g in own):
                raise ValueError(
                    "Adam: the agents' parameter groups differ in a setting other than the learning rate "
                    f"({', '.join(ADAM_SETTINGS)}); a group's agents share them, each with its own learning rate"
                )
            rates = [g["lr"] for g in own]
            if agents is None and len(set(rates)) == 1 and states[0]["step"].dim() == 0:
                self._fused_step(group, rates[0], params, states)
            else:
                self._per_agent_step(group, rates, params, states, agents)
        return loss

    def _fused_step(self, group: dict, lr: float, params: list, states: list) -> None:
        """torch's Adam step (``torch.optim.adam.adam``, its functional form) of every agent at one learning rate."""
        tensors: list[list[torch.Tensor]] = [[], [], [], [], [], []]  # params, grads, moments, max moments, steps
        for param, state in zip(params, states, strict=True):
            own = (param, param.grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"))
            flip = param.dim() >= 2 and not param.is_contiguous()  # stored transposed: its contiguous .mT
            for out, tensor in zip(tensors, own, strict=False):
                if tensor is not None:
                    out.append(tensor.mT if flip else tensor)
            tensors[5].append(state["step"])
        (beta1, beta2), hyper = group["betas"], {k: group[k] for k in ADAM_SETTINGS if k != "betas"}
        flags = {flag: group[flag] for flag in ("foreach", "capturable", "differentiable", "fused")}
        scaler = {"grad_scale": getattr(self, "grad_scale", None), "found_inf": getattr(self, "found_inf", None)}
        adam_step(*tensors, lr=lr, beta1=beta1, beta2=beta2, **hyper, **flags, **scaler)  # scaler: set by a GradScaler

    def _per_agent_step(
        self, group: dict, rates: list[float], params: list, states: list, agents: Sequence[bool] | None
    ) -> None:
        """Adam's update written out with each agent's learning rate and step count as ``(K,)`` tensors and a mask of
        the agents that step: an agent left out keeps its parameters, moments and count."""
        if getattr(self, "found_inf", None) is not None and bool(self.found_inf):  # the grad scaler's skipped step
            return
        device, K, dtype = params[0].device, self.agents, params[0].dtype
        (beta1, beta2), eps, weight_decay = group["betas"], group["eps"], group["weight_decay"]
        flags = [True] * K if agents is None else list(agents)
        live = torch.tensor(flags, dtype=torch.float64, device=device)
        for state in states:  # each agent's count from now on
            if state["step"].dim() == 0:
                state["step"] = state["step"].expand(K).clone()
        steps = [state["step"] for state in states]
        torch._foreach_add_(steps, [live.to(steps[0])] * len(steps))
        # per agent, in float64 as torch's kernels take them (1 - beta2**t loses digits in float32): the moments'
        # weights, and the step folded into the denominator, p -= m / ((sqrt(v) / sqrt(1 - beta2**t) + eps) * (1 -
        # beta1**t) / lr); for an agent left out the weights are 0 and the denominator infinite (no step)
        lr = torch.tensor(rates, dtype=torch.float64, device=device)
        count = steps[0].to(device, torch.float64).clamp(min=1)  # an agent that never stepped: no 0 / 0
        size, root = lr / (1 - beta1**count), (1 - beta2**count).sqrt()
        scalars = [(1 - beta1) * live, (1 - beta2) * live, live / (root * size), eps / size / live]
        first, second, scale, shift = torch.stack(scalars).to(dtype)

        def per_agent(x: torch.Tensor) -> list[torch.Tensor]:  # (K,) as (K, 1, ...) against each parameter
            return [x.view(K, *[1] * (p.dim() - 1)) for p in params]

        grads = [p.grad for p in params]
        if getattr(self, "grad_scale", None) is not None:  # scaled gradients the grad scaler did not unscale
            grads = torch._foreach_div(grads, self.grad_scale)
        if group["maximize"]:
            grads = torch._foreach_neg(grads)
        if weight_decay and group["decoupled_weight_decay"]:
            torch._foreach_mul_(params, per_agent((1 - lr * weight_decay * live).to(dtype)))
        elif weight_decay:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        torch._foreach_lerp_(exp_avgs, grads, per_agent(first))
        torch._foreach_lerp_(exp_avg_sqs, torch._foreach_mul(grads, grads), per_agent(second))
        if group["amsgrad"]:
            exp_avg_sqs = [s["max_exp_avg_sq"] for s in states]
            torch._foreach_maximum_(exp_avg_sqs, [s["exp_avg_sq"] for s in states])
        denominator = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_mul_(denominator, per_agent(scale))
        torch._foreach_add_(denominator, per_agent(shift))
        torch._foreach_addcdiv_(params, exp_avgs, denominator, value=-1.0)


def make_adam(params: list, *, agents: int = 1, stacked: bool = False, **kwargs: Any) -> Adam:
    """:class:`Adam` over ``params`` for ``agents`` (``stacked``: the parameters' first dimension), fused where torch
    has the fused kernel for every parameter's device (CPU since torch 2.4, CUDA), multi-tensor (``foreach``)
    otherwise.

    The same update as skrl's ``torch.optim.Adam(params, lr=...)`` up to float rounding, in fewer passes over memory:
    the fused kernel reads and writes each parameter, gradient and moment once per step, where ``foreach`` runs
    several elementwise ops, each over every tensor. A ``GradScaler`` hands it the scale and the inf check
    (``_step_supports_amp_scaling``).
    """
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    supported = getattr(torch_optimizer, "_get_fused_kernels_supported_devices", list)()
    if version.parse(torch.__version__) < version.parse("2.4"):
        supported = [d for d in supported if d != "cpu"]  # pragma: no cover - old torch: no CPU kernel
    fused = all(p.device.type in supported and p.dtype.is_floating_point for p in tensors)
    flags = {"fused": True} if fused else {"foreach": True}
    return Adam(params, agents=agents, stacked=stacked, **kwargs, **flags)


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


def scaled_step(
    scaler: Any, optimizer: Adam, *, clip_sets: list[list[torch.Tensor]], max_norm: float, agents: Any = None
) -> None:
    """The optimiser step after a scaled backward: the gradients averaged over the ranks of a distributed run,
    unscaled and clipped to global norm ``max_norm`` when it is above 0 (each list of ``clip_sets`` apart; stacked
    parameters each agent's own norm, as ``G`` optimisers would clip), then the grad scaler's step (``agents``: the
    flags of the agents that step, None: all). The caller runs ``scaler.update()`` once its iteration is complete."""
    distributed.all_reduce_gradients_([p for parameters in clip_sets for p in parameters])
    if max_norm > 0:
        scaler.unscale_(optimizer)
        clip = clip_grad_norm_per_agent_ if optimizer.stacked else torch.nn.utils.clip_grad_norm_
        for parameters in clip_sets:
            clip(parameters, max_norm)
    scaler.step(optimizer, **({} if agents is None else {"agents": agents}))


class UpdateSteps:
    """The optimiser steps of one PPO update of a group, agent by agent (the ``K`` agents of its :class:`Adam`).

    Within an epoch, an agent whose mini-batch KL passes ``kl_threshold`` steps no more (as skrl breaks its
    mini-batch loop there; the next epoch tries again). At the end of each epoch each agent's scheduler steps,
    a ``KLAdaptiveLR`` with the agent's mean KL over the epoch's mini-batches (the one that stopped it included, as
    skrl's); with mixed precision, not for an agent all of whose steps of the epoch the grad scaler skipped (inf/NaN
    gradients: no training).

    Read by the update: :attr:`stepping` and :attr:`live`, the agents still stepping in the epoch as flags and as
    weights ``(K,)``; :attr:`taken`, the steps each agent took in the update ``(K,)``, for the per-agent means it
    tracks; :attr:`count`, the optimiser steps of the update. With a ``KLAdaptiveLR``, :attr:`kl` holds the epoch's KL
    sum and count of each agent still stepping ``(2, K)``.
    """

    def __init__(self, optimizer: Adam, schedulers: list, *, kl_threshold: float, scaler: Any) -> None:
        self.optimizer, self.schedulers, self.kl_threshold, self.scaler = optimizer, schedulers, kl_threshold, scaler
        self.taken = torch.zeros(optimizer.agents, device=optimizer.param_groups[0]["params"][0].device)
        self.count, self.kl = 0, None

    def start_epoch(self) -> None:
        self.stepping, self.live = [True] * self.optimizer.agents, torch.ones_like(self.taken)
        if any(isinstance(scheduler, KLAdaptiveLR) for scheduler in self.schedulers):
            self.kl = torch.zeros(2, len(self.live), device=self.live.device)
        if self.scaler.is_enabled() and self.schedulers:  # mixed precision: one host read, to tell skipped steps
            self.before = (self.optimizer.agent_steps(), self.taken.tolist())

    def keep_stepping(self, kl: torch.Tensor) -> bool:
        """Note a mini-batch's KL ``(K,)`` before its step; with ``kl_threshold``, leave out of the epoch the agents
        whose rank-mean KL passes it (one host read). False when no agent steps any more."""
        if self.kl is not None:
            self.kl.add_(torch.stack([kl * self.live, self.live]))
        if self.kl_threshold:
            over = (distributed.all_reduce_mean_(kl.clone()) > self.kl_threshold).tolist()
            if any(s and o for s, o in zip(self.stepping, over, strict=True)):
                self.stepping = [s and not o for s, o in zip(self.stepping, over, strict=True)]
                if not any(self.stepping):
                    return False
                self.live = torch.tensor(self.stepping, dtype=torch.float32, device=self.live.device)
        return True

    def step(self, *, clip_sets: list[list[torch.Tensor]], max_norm: float) -> None:
        """The step of the agents still stepping (:func:`scaled_step`), counted."""
        agents = None if all(self.stepping) else self.stepping
        scaled_step(self.scaler, self.optimizer, clip_sets=clip_sets, max_norm=max_norm, agents=agents)
        self.scaler.update()
        self.taken += self.live
        self.count += 1

    def end_epoch(self) -> None:
        """Each agent's scheduler steps once (see the class docstring)."""
        if not self.schedulers:
            return
        counted = [True] * self.optimizer.agents
        if self.scaler.is_enabled():  # an agent all of whose tries the grad scaler skipped did not train
            (steps, taken), now = self.before, self.optimizer.agent_steps()
            tried = [a - b for a, b in zip(self.taken.tolist(), taken, strict=True)]
            counted = [n == 0 or a > b for n, a, b in zip(tried, now, steps, strict=True)]
        kl = distributed.all_reduce_mean_(self.kl[0] / self.kl[1]).tolist() if self.kl is not None else None
        for k, scheduler in enumerate(self.schedulers):
            if counted[k]:
                scheduler.step(kl[k]) if isinstance(scheduler, KLAdaptiveLR) else scheduler.step()


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
        counts = getattr(optimizer, "stacked", False)  # each agent's own step count
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


__all__ = ["Adam", "AgentOptimizerView", "UpdateSteps", "clip_grad_norm_per_agent_", "make_adam", "scaled_step"]
