"""Agent groups: the unit every agent of the package runs as one batch.

A group is ``G`` agents whose inputs are stacked agent-major into ``(G * n, size)`` rows, so that each model role is
called once for all of them, one loss is taken over all of them and each optimiser steps once. A group is either

- agents that hold the *same* model objects (parameter sharing), or
- a *batched group*: agents with models of their own, of one class and shape, whose parameters are stacked and run as
  one ``torch.func`` call (:mod:`~skrl_marl_ext.groups.stacked`); each agent keeps its own loss, statistics and
  gradient clipping.

An agent with models of its own that stack with no other is a group of one. Every model call goes through
:meth:`AgentGroup.act`. This module also holds the grouping rules (:func:`group_agents`, :func:`batch_groups`) and the
stacking of per-agent tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium
import torch
from skrl.models.torch import Model

from skrl_marl_ext.checkpoints import OptimizerCheckpoint
from skrl_marl_ext.config import MarlCfg
from skrl_marl_ext.groups.forming import PASS_ACTIVATIONS, activation_width
from skrl_marl_ext.groups.optim import Adam, make_adam
from skrl_marl_ext.groups.preprocessors import StackedPreprocessor
from skrl_marl_ext.groups.stacked import RNN_KEY, StackedModel, act_answered, agent_inputs, agent_outputs, mixin_rows
from skrl_marl_ext.preprocessors import identity, make_preprocessor, update_statistics


@dataclasses.dataclass(eq=False)
class AgentGroup:
    """Agents that run as one batch: sharing their models, or batched (see the module docstring)."""

    index: int
    """Position in the agent's ``groups`` list."""
    uids: list[str]
    """Agent names, in ``possible_agents`` order (the order of the stacked dimension)."""
    models: dict[str, Model]
    """The group's model of each role (of a batched group: the first agent's, which runs skrl's mixins)."""
    observation_space: gymnasium.Space
    state_space: gymnasium.Space | None
    action_space: gymnasium.Space
    cfg: MarlCfg
    """The agent's config with each per-agent field holding the group's value (:meth:`MarlCfg.for_agent`)."""
    observation_preprocessor: Callable = identity
    state_preprocessor: Callable = identity
    mask_in_observations: bool = False
    """Whether the action mask is the ``"action_mask"`` entry of a Dict observation space."""
    masks_seen: bool = False
    """Whether ``infos["action_mask"]`` has carried a mask for an agent of the group (its policy was checked)."""
    agent_models: dict[str, list[Model]] | None = None
    """Of a batched group: each role's models, one per agent in ``uids`` order (None for shared models)."""
    stacked: dict[str, StackedModel] = dataclasses.field(default_factory=dict)
    """Of a batched group: each role's stacked models (built by :meth:`stack_models`)."""
    activations_per_sample: int = 1
    """Of a batched group: one agent's hidden activations per sample, every role's model (:meth:`agent_passes`)."""
    vmap: Callable | None = None
    """Of a batched group with ``cfg.compile``: the compiled stand-in for ``torch.vmap`` that maps its networks over the
    agents (:mod:`~skrl_marl_ext.features.compiled`); None: ``torch.vmap``."""
    compiled_compute: Callable | None = None
    """Of another group, with ``cfg.compile``: the compiled network call, ``model.compute(inputs, role)`` of ``(model,
    inputs, role)``, whose result answers the model's ``compute`` in its mixin's ``act``
    (:mod:`~skrl_marl_ext.features.compiled`); None: the models' own ``act``."""

    size: int = dataclasses.field(init=False, default=0)
    """``G``: the number of agents."""
    batched: bool = dataclasses.field(init=False, default=False)
    """Whether the agents have models of their own, run as one batch (each agent its own loss)."""
    discrete: bool = dataclasses.field(init=False, default=False)
    """Whether the action space is ``Discrete``."""
    id_size: int = dataclasses.field(init=False, default=0)
    """Number of one-hot agent-id entries appended to the model inputs (0 when off or for a group of one)."""

    def __post_init__(self) -> None:
        self.size = len(self.uids)
        self.batched = self.agent_models is not None
        self.discrete = isinstance(self.action_space, gymnasium.spaces.Discrete)
        shared = getattr(self.cfg, "agent_id_input", False) and self.size > 1 and not self.batched
        self.id_size = self.size if shared else 0

    @property
    def own_models(self) -> bool:
        """Whether each agent has models of its own (stacked into one call): then each agent has its own loss,
        statistics and gradient clip (``per_agent=`` of the losses); agents sharing a model have one."""
        return self.batched

    def make_optimizer(self, param_groups: list[dict[str, Any]], **kwargs: Any) -> Adam:
        """The group's :class:`~skrl_marl_ext.groups.optim.Adam` over ``param_groups``: of ``G`` agents, each its own
        learning rates and step count, for models of their own; of one set of models otherwise."""
        return make_adam(param_groups, agents=self.size if self.batched else 1, stacked=self.batched, **kwargs)

    def make_preprocessor(self, cls: Any, kwargs: dict | None, *, size: Any, device: Any) -> Callable:
        """A preprocessor of class ``cls`` (None: the identity) for the group: each agent's own, stacked, for models of
        their own; one for all otherwise."""
        if not cls:
            return identity
        if not self.batched:
            return make_preprocessor(cls, kwargs, size=size, device=device)
        return StackedPreprocessor([make_preprocessor(cls, kwargs, size=size, device=device) for _ in self.uids])

    def stack_models(self) -> None:
        """Stack a batched group's models (their parameters become views of the stack)."""
        if self.batched and not self.stacked:
            self.stacked = {role: StackedModel(models) for role, models in self.agent_models.items()}
            self.activations_per_sample = max(1, sum(activation_width(m.base) for m in self.stacked.values()))

    @property
    def num_actions(self) -> int:
        """``n`` of a ``Discrete(n)`` action space."""
        return int(self.action_space.n)

    def act(self, role: str, inputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        """skrl's ``Model.act`` of the model of ``role`` for the group's ``G`` agents.

        :param inputs: Every tensor ``(G, N, ...)`` (agents of the group, envs or samples); other values (e.g. the
            hidden states of a recurrent model) as the model takes them.
        :return: ``(output, outputs)``, the output and every per-row tensor of ``outputs`` as ``(G, N, ...)``.
        """
        if self.stacked:
            return self.act_many((role, inputs))[0]
        if self.compiled_compute is not None:  # compiled
            output, outputs = self._act_compiled(role, inputs)
        else:
            output, outputs = self.models[role].act(_rows(inputs), role=role)
        return _per_agent(self.size, output, outputs)

    def act_many(
        self, *calls: tuple[str, dict[str, Any]], agents: slice = slice(None)
    ) -> list[tuple[torch.Tensor, dict[str, Any]]]:
        """:meth:`act` for each ``(role, inputs)``, in order. A batched group runs every role's network in **one**
        ``torch.vmap`` (its set-up paid once for a PPO step's policy and value, or twin critics): inside the map each
        agent's rows run through the first agent's model with that agent's parameters swapped in
        (:mod:`~skrl_marl_ext.groups.stacked`); the mixins' ``act`` (sampling, log-probabilities, the kept
        distribution) then run once, outside the map, on the ``(G * n, ...)`` rows, in the order of ``calls`` (sampling
        draws from the generator in that order, as separate calls would). Other groups call their models in turn.

        :param calls: ``(role, inputs)``, inputs as :meth:`act` takes them; a recurrent model's hidden states
            ``inputs["rnn"]`` (skrl's RNN convention) ``(layers, G * n, H)`` each, as one model of all rows takes them.
        :param agents: A batched group's agents to run (one of :meth:`agent_passes`), the inputs holding theirs only
            (their parameters a view of the stack, so gradients reach it).
        """
        G = len(range(self.size)[agents])
        if self.compiled_compute is not None and not self.stacked:  # compiled
            return [_per_agent(G, *self._act_compiled(role, inputs)) for role, inputs in calls]
        if not self.stacked:
            return [_per_agent(G, *self.models[role].act(_rows(inputs), role=role)) for role, inputs in calls]
        models = [self.stacked[role] for role, _ in calls]
        # all agents: the stacked tensors as they are, no slicing op per tensor and call
        states = [{k: t[agents] if agents.stop else t for k, t in (m.params | m.buffers).items()} for m in models]
        mapped = [agent_inputs(inputs, G) for _, inputs in calls]

        def compute(states, rows):  # one agent's networks, inside the map
            results = []
            for model, (role, _), state, batch, (_, static) in zip(models, calls, states, rows, mapped, strict=True):
                with model.swapped(state):
                    results.append(agent_outputs(*model.base.compute({**static, **batch}, role)))
            return results

        results = []
        per_agent = (self.vmap or torch.vmap)(compute)(states, [agent_rows for agent_rows, _ in mapped])
        for model, (role, inputs), (output, outputs) in zip(models, calls, per_agent, strict=True):
            # the mixin's act through the first agent's model, its compute answered by the map's (G, n, ...) result
            hidden = outputs.pop(RNN_KEY, None)
            outputs = {k: v.reshape(-1, *v.shape[2:]) for k, v in outputs.items()}
            if hidden is not None:  # recurrent: (G, layers, n, H) -> (layers, G * n, H)
                outputs[RNN_KEY] = [h.transpose(0, 1).reshape(h.shape[1], -1, h.shape[-1]) for h in hidden]
            rows = {k: mixin_rows(v) for k, v in inputs.items()}
            answered = act_answered(model.base, rows, role, output.reshape(-1, *output.shape[2:]), outputs)
            results.append(_per_agent(G, *answered))
        return results

    def agent_passes(self, at_once: int | str, rows: int) -> list[slice]:
        """The agents of a batched group in passes of at most ``at_once`` (``"auto"``: as many as keep a pass's
        activations within :data:`~skrl_marl_ext.groups.forming.PASS_ACTIVATIONS`, at least one), for mini-batches of
        ``rows`` samples per agent; one pass of all agents for any other group (they share models, or run one by one).
        """
        if at_once == "auto" and self.stacked:
            at_once = max(1, PASS_ACTIVATIONS // (rows * self.activations_per_sample))
        if not self.stacked or at_once >= self.size:
            return [slice(None)]
        return [slice(i, i + at_once) for i in range(0, self.size, at_once)]

    def _act_compiled(self, role: str, inputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        """skrl's ``Model.act`` of the model of ``role`` on the rows of ``inputs``, its network run by the compiled
        :attr:`compiled_compute` and the mixin's ``act`` (sampling, log-probabilities) eager on that result."""
        model, rows = self.models[role], _rows(inputs)
        return act_answered(model, rows, role, *self.compiled_compute(model, rows, role))

    def split(self, present: Any, output: torch.Tensor, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """``{agent: output[i]}`` for the agents of the group in ``present`` (a dict or list of names), or with
        ``outputs`` ``{agent: (output[i], outputs of agent i)}``: what :meth:`act` returned, per agent."""
        if outputs is None:
            return {uid: output[i] for i, uid in enumerate(self.uids) if uid in present}
        return {
            uid: (output[i], {k: v[i] if _agent_major(v, output) else v for k, v in outputs.items()})
            for i, uid in enumerate(self.uids)
            if uid in present
        }

    def preprocess(self, kind: str, x: torch.Tensor, *, agent_dim: int, inverse: bool = False) -> torch.Tensor:
        """``x`` (the agents along ``agent_dim``) through the group's ``<kind>_preprocessor`` (``inverse``: back to
        the original scale): each agent's own statistics in a batched group, one statistic for all rows otherwise."""
        preprocessor = getattr(self, f"{kind}_preprocessor")
        if preprocessor is identity:
            return x
        if isinstance(preprocessor, StackedPreprocessor):
            return preprocessor(x, agent_dim=agent_dim, inverse=inverse)
        if inverse:
            return preprocessor(x, inverse=True)
        return preprocessor(x.reshape(-1, x.shape[-1])).view(x.shape)

    def common_preprocessor(self, kind: str) -> Callable | None:
        """The ``<kind>_preprocessor`` as one preprocessor of all the agents, for an input they share (agent dimension
        of size 1) to be preprocessed once: a batched group's where every agent's statistics are the same (one host
        read), else None; the group's one preprocessor otherwise."""
        preprocessor = getattr(self, f"{kind}_preprocessor")
        if isinstance(preprocessor, StackedPreprocessor):
            return preprocessor.modules[0] if preprocessor.same_for_all() else None
        return preprocessor

    def update_statistics(self, kind: str, x: torch.Tensor, mask: torch.Tensor | None, *, agent_dim: int) -> None:
        """Fold the unmasked rows of ``x`` (agents along ``agent_dim``) into the ``<kind>_preprocessor``'s
        statistics: each agent's own in a batched group, all rows into one otherwise."""
        preprocessor = getattr(self, f"{kind}_preprocessor")
        if isinstance(preprocessor, StackedPreprocessor):
            preprocessor.update(x, mask, agent_dim=agent_dim)
        else:
            update_statistics(preprocessor, x, mask)

    def parameters(self, *roles: str) -> list[torch.nn.Parameter]:
        """The parameters of the models of ``roles`` (all roles when none), each once; of a batched group the
        stacked ``(G, ...)`` parameters."""
        seen, parameters = set(), []
        for role in roles or tuple(self.models):
            source = self.stacked[role] if self.stacked else self.models[role]
            for parameter in source.parameters():
                if id(parameter) not in seen:
                    seen.add(id(parameter))
                    parameters.append(parameter)
        return parameters

    def unique_models(self, *roles: str) -> list[Model]:
        """The model objects of ``roles`` (all roles when none), each once (a model may serve two roles); every
        agent's of a batched group."""
        roles = roles or tuple(self.models)
        models = [m for r in roles for m in self.agent_models[r]] if self.batched else [self.models[r] for r in roles]
        return list({id(m): m for m in models}.values())

    def checkpoint_entries(self, modules: dict[str, Any]) -> dict[str, Any]:
        """``modules`` (name -> module) as the group's agents save them: a batched group's models are each agent's
        own, its optimisers each agent's part (:meth:`~skrl_marl_ext.groups.optim.Adam.views`, in skrl's layout where
        it can be), its stacked preprocessors each agent's own; lists hold one entry per agent, in ``uids`` order (one
        entry: the same for every agent)."""
        entries = dict(modules)
        if self.batched:
            entries.update(self.agent_models)
        for name, module in entries.items():
            if isinstance(module, StackedPreprocessor):
                entries[name] = module.modules
            elif isinstance(module, Adam):
                entries[name] = [OptimizerCheckpoint(v) if v is module else v for v in module.views()]
        return entries

    def stack(self, tensors: dict[str, torch.Tensor] | None, out: torch.Tensor | None = None) -> torch.Tensor | None:
        """The agents' tensors stacked ``(G, N, size)``, zeros for agents absent from the dict.

        :param tensors: ``{agent: (N, size)}``; may lack agents (they are zero-filled) or be None.
        :param out: Preallocated ``(G, N, size)`` destination (dtype converted when it differs).
        :return: The stacked tensor (``out`` when given), or None when no agent of the group is present.
        """
        items = [tensors.get(uid) if tensors else None for uid in self.uids]
        if out is None:
            like = next((x for x in items if x is not None), None)
            if like is None:
                return None
            if len(items) == 1:
                return like.unsqueeze(0)
            items = [x if x is not None else torch.zeros_like(like) for x in items]
            return torch.stack(items)
        if all(x is not None and x.dtype == out.dtype for x in items):
            return torch.stack(items, out=out)
        for i, x in enumerate(items):
            if x is None:
                out[i].zero_()
            else:
                out[i].copy_(x.reshape(out[i].shape))
        return out


def _rows(inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs ``(G, N, ...)`` as a model's rows ``(G * N, ...)``, agent-major."""
    return {k: v.reshape(-1, *v.shape[2:]) if torch.is_tensor(v) else v for k, v in inputs.items()}


def _per_agent(size: int, output: torch.Tensor, outputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """A model's ``(G * N, ...)`` output and the row tensors of its outputs as ``(G, N, ...)``."""
    rows = output.shape[0]
    keys = [k for k, v in outputs.items() if torch.is_tensor(v) and v.dim() and v.shape[0] == rows]
    outputs = {**outputs, **{k: outputs[k].view(size, -1, *outputs[k].shape[1:]) for k in keys}}
    return output.view(size, -1, *output.shape[1:]), outputs


def _agent_major(value: Any, output: torch.Tensor) -> bool:
    """Whether ``value`` is one of :meth:`AgentGroup.act`'s per-agent ``(G, N, ...)`` outputs."""
    return torch.is_tensor(value) and value.shape[:2] == output.shape[:2]
