"""MAPPO and IPPO: PPO per agent (Schulman et al. 2017) with a centralised or an independent critic.

MAPPO's critic reads the global state (Yu et al. 2022, https://arxiv.org/abs/2103.01955); IPPO's reads what its value
model chooses, usually the agent's own observation (de Witt et al. 2020, https://arxiv.org/abs/2011.09533). Both feed
every model the agent's observation under ``"observations"`` and the env's state under ``"states"``, as skrl's do.

The file reads in skrl's lifecycle order: construction, ``init``, ``act`` (one forward pass per group; it stores
nothing), ``record_transition`` (the only writer of the rollout), ``post_interaction``, ``update`` and the update of
one group, one sequence read top to bottom (``_update_group``: bootstrap and GAE, statistics, epochs of mini-batches
with the loss and the step, tracking).

Layouts, named once: a group of ``G`` agents acting in ``N`` envs stacks a step's inputs as ``(G, N, size)`` (a state
the whole group shares as ``(1, N, size)``), the shape its models take and give (:class:`~skrl_marl_ext.groups.
AgentGroup`); its rollout is ``(T, G, N, width)`` (:mod:`~skrl_marl_ext.storage.rollout`); the update reads it per
agent as ``(G, T * N, width)`` and a mini-batch as ``(G, B, width)``. Recurrent hidden states (the agent's part in
:class:`~skrl_marl_ext.features.recurrent.RecurrentModels`), action masks and non-finite handling enter at the places marked
``# recurrent``, ``# masks`` and ``# non-finite``; the opt-in compiled
path (``cfg.compile``, :mod:`~skrl_marl_ext.features.compiled`) at the one marked ``# compiled``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, Model
from skrl.utils.spaces.torch import compute_space_limits, compute_space_size

from skrl_marl_ext.algorithms.base import GroupedMultiAgent
from skrl_marl_ext.algorithms.mappo_cfg import IPPO_CFG, MAPPO_CFG, OnPolicyCfg
from skrl_marl_ext.checks.arguments import check_policy_family, dry_run
from skrl_marl_ext.features import recurrent
from skrl_marl_ext.features.compiled import compile_agent
from skrl_marl_ext.features.masks import agent_mask
from skrl_marl_ext.features.recurrent import RecurrentState
from skrl_marl_ext.functional import (
    approx_kl,
    compute_gae,
    explained_variance,
    masked_mean,
    normalize_advantages,
    ppo_loss,
)
from skrl_marl_ext.groups import AgentGroup
from skrl_marl_ext.groups.forming import batch_by_default
from skrl_marl_ext.groups.optim import Adam, UpdateSteps
from skrl_marl_ext.groups.preprocessors import stackable_preprocessor
from skrl_marl_ext.keys import (
    ACTION_MASK_KEY,
    AGENT_MASK_KEY,
    FINAL_OBSERVATIONS_KEY,
    FINAL_STATES_KEY,
    MEAN_ACTIONS_KEY,
)
from skrl_marl_ext.models.agent_id import append_agent_id, with_agent_ids
from skrl_marl_ext.models.clipping import clips_gaussian_samples, unclipped_sampling
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.storage.rollout import RolloutBuffer, TrainingData, check_finite

STATISTICS = ("objective", "critic", "entropy", "kl", "clip_fraction", "std")
"""The per-agent statistics an update tracks: the terms of :func:`~skrl_marl_ext.functional.ppo_loss`, the policy's
standard deviation."""
LOSS_HYPERPARAMETERS = ("ratio_clip", "value_clip", "huber_delta", "value_loss_scale", "entropy_loss_scale")
"""The config fields :func:`~skrl_marl_ext.functional.ppo_loss` takes, by their names."""
TRACKED = {
    "Loss / Policy loss": "objective",
    "Loss / Value loss": "critic",
    "Loss / Entropy loss": "entropy",
    "Policy / Approx KL": "kl",
    "Policy / Clip fraction": "clip_fraction",
    "Policy / Standard deviation": "std",
    "Value / Explained variance": "explained",
    "Learning / Learning rate": "lr",
}
"""TensorBoard name (``"<name> (<agent>)"``) of each per-agent value an update tracks (a Gaussian policy's standard
deviation, the value loss of a group that trains its critic, the entropy loss where it is on)."""


@dataclasses.dataclass(eq=False)
class OnPolicyGroup(AgentGroup):
    """An on-policy group: its optimiser over policy and value, value normaliser and rollout."""

    optimizer: Adam | None = None
    """One Adam over the group's trainable parameters; agents with models of their own each with their own learning
    rates and step count (:class:`~skrl_marl_ext.groups.optim.Adam`)."""
    schedulers: list = dataclasses.field(default_factory=list)
    """The learning rate schedulers, one per agent of the optimiser (a batched group: each agent's own, adapting its
    rates through its view; none without a scheduler)."""
    value_preprocessor: Callable = identity
    trainable: list[torch.nn.Parameter] = dataclasses.field(default_factory=list)
    """Every parameter the optimiser steps, each once."""
    clip_sets: list[list[torch.nn.Parameter]] = dataclasses.field(default_factory=list)
    """The parameter lists whose gradients are clipped apart (``cfg.grad_norm_clip_mode``): all of ``trainable``, or
    the policy's and the value model's."""
    trains_value: bool = True
    """Whether the group's loss trains its value model (False: HAPPO's team critic, trained on its own)."""
    action_limits: tuple[torch.Tensor, torch.Tensor] | None = None
    """The action space's bounds where the policy clips its samples and ``cfg.log_prob_of_unclipped_actions`` is on:
    the agent samples unclipped and clips the env's action itself (:mod:`~skrl_marl_ext.models.clipping`)."""
    rollout: RolloutBuffer | None = None
    shared_state: bool | None = None
    """Whether every agent of the group receives the very same state tensor (stored once, not G times); None until
    the first ``act``."""
    mini_batches: int = 0
    """Mini-batches per epoch: ``cfg.mini_batches``, at most the sequences per agent of a rollout (0: not known)."""
    recurrent: RecurrentState | None = None
    """Hidden states of recurrent models (:mod:`~skrl_marl_ext.features.recurrent`); None when no model is."""

    policy = property(lambda self: self.models["policy"])
    value = property(lambda self: self.models["value"])


@dataclasses.dataclass
class Decision:
    """What ``act`` decided for a group, for ``record_transition`` to store."""

    observations: torch.Tensor
    """``(G, N, size)``, as the env gave them (the rollout stores raw inputs)."""
    states: torch.Tensor | None
    """``(G or 1, N, size)``, as the env gave them."""
    log_prob: torch.Tensor
    """``(G * N, 1)``."""
    actions: torch.Tensor | None
    """``(G, N, size)``: the unclipped samples to store in place of the env's clipped actions, or None (store what the
    env received)."""
    values: torch.Tensor
    """``(G * N, 1)`` fp32: the critic's own output (normalised space under a value preprocessor)."""
    action_mask: torch.Tensor | None
    """``(G * N, num_actions)`` bool, or None."""
    hidden: dict[str, list[torch.Tensor]] | None = None
    """Recurrent models: the hidden states the step started from, by role."""
    next_hidden: dict[str, list[torch.Tensor] | None] | None = None
    """Recurrent models: the hidden states the models returned (before any reset), by role."""


class OnPolicyAgent(GroupedMultiAgent):
    """PPO per agent: the algorithm of :class:`MAPPO` and :class:`IPPO` (see the module docstring)."""

    cfg_class: type = OnPolicyCfg
    roles = ("policy", "value")
    group_class = OnPolicyGroup
    requires_states: bool = True

    # the update's math, called through the agent: a subclass (or an instance) may replace one to change or observe it
    compute_gae = staticmethod(compute_gae)
    ppo_loss = staticmethod(ppo_loss)

    # ------------------------------------------------------------------ construction

    def __init__(
        self,
        *,
        possible_agents: list[str],
        models: dict[str, dict[str, Model]],
        memories: dict[str, Memory] | None = None,
        observation_spaces: dict[str, gymnasium.Space] | None = None,
        state_spaces: dict[str, gymnasium.Space] | None = None,
        action_spaces: dict[str, gymnasium.Space] | None = None,
        device: str | torch.device | None = None,
        cfg: Any = None,
    ) -> None:
        """Check the arguments, form the groups, then set each up: its optimiser, preprocessors and hidden-state
        keeper, checked with one dry run of its models. Parameters: see :class:`MAPPO`."""
        super().__init__(
            possible_agents=possible_agents,
            models=models,
            memories=memories,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces,
            action_spaces=action_spaces,
            device=device,
            cfg=cfg,
        )
        self.cfg: OnPolicyCfg
        failures: dict[tuple, tuple[str, str | None]] = {}  # recurrent: vmap dry runs, per kind of model
        self._form_groups(batchable=lambda uid: self._batchable(uid, failures), roles=self._grouping_roles())
        if self.cfg.batch_agent_models is True:  # recurrent: say which models run one by one, and why
            recurrent.warn_unbatched(type(self).__name__, failures, self.models)
        self.policies = {uid: self.models[uid]["policy"] for uid in self.possible_agents}
        self.values = {uid: self.models[uid]["value"] for uid in self.possible_agents}
        num_envs = self._check_memories()
        for group in self.groups:
            self._set_up_group(group)
            if num_envs is not None:
                self._set_mini_batches(group, num_envs)
        self._warn_clipped_log_prob()
        self._broadcast_models()  # models start identical on every rank of a distributed run
        compile_agent(self)  # compiled: cfg.compile's torch.compile of the networks and the loss

        self._rollout_step = 0
        self._next_observations: dict[str, torch.Tensor] | None = None
        self._next_states: dict[str, torch.Tensor] | None = None
        self._decisions: dict[int, Decision] = {}
        self._next_hidden: dict[int, dict[str, Any]] = {}

    def _grouping_roles(self) -> tuple[str, ...]:
        """The roles whose model objects define the groups: all of them (HAPPO's team critic: the policy alone)."""
        return self.roles

    def _warn_clipped_log_prob(self) -> None:
        """One warning naming the agents whose Gaussian policy clips its samples and is trained on the
        log-probability of the clipped action (``cfg.log_prob_of_unclipped_actions`` off)."""
        trapped = [
            uid
            for group in self.groups
            if clips_gaussian_samples(group.policy) and not group.cfg.log_prob_of_unclipped_actions
            for uid in group.uids
        ]
        if trapped:
            warnings.warn(
                f"{type(self).__name__}: the policies of agents {trapped} clip their Gaussian samples "
                "(clip_actions=True) and skrl then trains on the log-probability of the clipped action, which biases "
                "the update (on VMAS balance it halved the return). Set cfg.log_prob_of_unclipped_actions=True to "
                "train on the unclipped sample (the env still receives the clipped action), or build the policy with "
                "clip_actions=False and let the env clip",
                stacklevel=3,
            )

    def _batchable(self, uid: str, failures: dict) -> bool:
        """Agents with models of their own batch where ``cfg.batch_agent_models`` is True, or ``"auto"`` and
        :func:`~skrl_marl_ext.groups.forming.batch_by_default` says so, unless a preprocessor's statistics cannot be
        stacked, or a recurrent model cannot run under ``torch.vmap`` (:func:`~skrl_marl_ext.features.recurrent.
        models_batch`, its dry runs kept in ``failures``)."""
        cfg = self.cfg
        preprocessors = ("observation_preprocessor", "state_preprocessor", "value_preprocessor")
        wanted = cfg.batch_agent_models
        if wanted == "auto":
            wanted = batch_by_default(self.models, uid, roles=self.roles, device=self.device)
        spaces = {"observations": self.observation_spaces[uid], "states": self.state_spaces[uid]}
        widths = {k: compute_space_size(v, occupied_size=True) if v else None for k, v in spaces.items()}
        return (
            wanted is True
            and all(stackable_preprocessor(cfg.value_for(name, uid)) for name in preprocessors)
            and recurrent.models_batch(
                type(self).__name__,
                {role: self.models[uid][role] for role in self.roles},
                widths=widths,
                device=self.device,
                failures=failures,
                uid=uid,
            )
        )

    def _check_memories(self) -> int | None:
        """Memories are optional: the rollout lives in one buffer per group. Given ones must fit the rollout.

        :return: The memories' ``num_envs``, or None without memories.
        """
        if not self.memories:
            self.memories = None
            return None
        name = type(self).__name__
        for uid in self.possible_agents:
            memory = self.memories.get(uid) if isinstance(self.memories, dict) else None
            if memory is None:
                raise ValueError(f"{name}: memories has no entry for agent '{uid}'; give one per agent or none at all")
            if memory.memory_size != self.cfg.rollouts:
                raise ValueError(
                    f"{name}: memories['{uid}'].memory_size is {memory.memory_size} but cfg.rollouts is "
                    f"{self.cfg.rollouts}; an on-policy rollout fills exactly rollouts steps. Create "
                    f"RandomMemory(memory_size={self.cfg.rollouts}, num_envs=env.num_envs), or pass memories=None"
                )
        sizes = {uid: self.memories[uid].num_envs for uid in self.possible_agents}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"{name}: the memories were created with different num_envs {sizes}; use env.num_envs")
        return next(iter(sizes.values()))

    def _set_mini_batches(self, group: OnPolicyGroup, num_envs: int) -> None:
        """Fix the group's mini-batches per epoch once ``num_envs`` is known: ``cfg.mini_batches``, or the number of
        samples per agent of a rollout when that is smaller (with a warning; skrl 2.1.1 then splits the rollout into
        empty mini-batches, whose mean loss is NaN, and trains on it)."""
        if group.mini_batches:
            return
        L = group.recurrent.sequence_length if group.recurrent is not None else 1
        requested, samples = group.cfg.mini_batches, self.cfg.rollouts * num_envs // L
        group.mini_batches = min(requested, samples)
        if requested > samples:
            what = "samples" if L == 1 else f"sequences of {L} steps"
            warnings.warn(
                f"{type(self).__name__}: cfg.mini_batches ({requested}) for agents {group.uids} is larger than the "
                f"{samples} {what} per agent a rollout gives (rollouts {self.cfg.rollouts} x num_envs {num_envs}); "
                f"using {samples} mini-batches of one. skrl 2.1.1 would add empty mini-batches, whose loss is "
                "NaN. Lower mini_batches or raise rollouts to silence this",
                stacklevel=3,
            )

    def _set_up_group(self, group: OnPolicyGroup) -> None:
        name = type(self).__name__
        check_policy_family(owner=name, uids=group.uids, policy=group.policy, action_space=group.action_space)
        self.action_masks.note_observation_mask(group)
        self._make_optimizer(group)
        self._make_preprocessors(group)
        if group.cfg.log_prob_of_unclipped_actions and clips_gaussian_samples(group.policy):
            low, high = compute_space_limits(group.action_space, device=self.device, none_if_unbounded="any")
            group.action_limits = (low, high) if low is not None else None  # unbounded: skrl does not clip either
        group.recurrent = recurrent.recurrent_state(name, group, roles=self.roles, rollouts=self.cfg.rollouts)
        obs, states = self._zero_inputs(group)
        policy_inputs, value_inputs = {"observations": obs, "states": states}, {"observations": obs, "states": states}
        if group.recurrent is None:
            dry_run(owner=name, group=group, policy_inputs=policy_inputs, value_inputs=value_inputs, device=self.device)
        else:  # recurrent: one acting step (evaluation mode) from zero hidden states
            group.recurrent.ensure(obs.shape[0], self.device)
            modes = [(m, m.training) for m in group.unique_models()]
            for model, _ in modes:
                model.train(False)
            policy_inputs.update(group.recurrent.inputs("policy"))
            value_inputs.update(group.recurrent.inputs("value"))
            dry_run(owner=name, group=group, policy_inputs=policy_inputs, value_inputs=value_inputs, device=self.device)
            for model, mode in modes:
                model.train(mode)
            group.recurrent.current = None
        # the optimiser in skrl's checkpoint layout where it can be (one parameter group), so skrl's agents load it
        modules = {"policy": group.policy, "value": group.value, "optimizer": group.optimizer}
        modules["scheduler"] = group.schedulers or None
        for key in ("observation_preprocessor", "state_preprocessor", "value_preprocessor"):
            modules[key] = getattr(group, key)
        self._register_checkpoint(group, modules)

    def _make_optimizer(self, group: OnPolicyGroup) -> None:
        """One Adam per group (``eps``: ``cfg.optimizer_eps``, torch's when None): the policy's and the value model's
        parameters as two parameter groups (a model in both roles counts once; a team critic's are not the group's),
        each with its learning rate (agents with models of their own: each agent's own); the learning rate scheduler of
        each agent of the optimiser; the parameter lists clipped apart."""
        cfg = group.cfg
        policy_lr, value_lr = cfg.learning_rate
        policy_params = group.parameters("policy")
        seen = {id(p) for p in policy_params}
        value_params = [p for p in group.parameters("value") if id(p) not in seen] if group.trains_value else []
        if (
            cfg.grad_norm_clip_mode == "separate"
            and group.trains_value
            and len(value_params) < len(group.parameters("value"))
        ):
            raise ValueError(
                f"{type(self).__name__}: cfg.grad_norm_clip_mode='separate' clips the policy's and the value model's "
                f"gradients apart, but the policy and value of agents {group.uids} share parameters; use "
                "grad_norm_clip_mode='joint' or separate models"
            )
        param_groups = [{"params": policy_params, "lr": policy_lr}]
        if value_params:
            param_groups.append({"params": value_params, "lr": value_lr})
        group.trainable = policy_params + value_params
        separate = cfg.grad_norm_clip_mode == "separate" and value_params
        group.clip_sets = [policy_params, value_params] if separate else [group.trainable]
        eps = {} if cfg.optimizer_eps is None else {"eps": cfg.optimizer_eps}
        group.optimizer = group.make_optimizer(param_groups, **eps)
        if cfg.learning_rate_scheduler:  # each agent's rates adapted on their own, as its own optimiser's would be
            scheduler, kwargs = cfg.learning_rate_scheduler, cfg.learning_rate_scheduler_kwargs
            group.schedulers = [scheduler(view, **kwargs) for view in group.optimizer.views()]

    def _make_preprocessors(self, group: OnPolicyGroup) -> None:
        cfg = group.cfg
        group.observation_preprocessor = self._make_preprocessor(group, "observation", group.observation_space)
        if cfg.state_preprocessor and group.state_space is None:
            # skrl accepts it (its preprocessor then passes None through): accepted, and said
            warnings.warn(
                f"{type(self).__name__}: cfg.state_preprocessor is set but agents {group.uids} have no state space, "
                "so it has nothing to preprocess and is not used; pass state_spaces=env.state_spaces or remove it",
                stacklevel=4,
            )
        else:
            group.state_preprocessor = self._make_preprocessor(group, "state", group.state_space)
        group.value_preprocessor = self._make_preprocessor(group, "value", 1)

    def _zero_inputs(self, group: OnPolicyGroup, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Model rows of zeros ``(G * batch, size)``, as :meth:`_model_inputs` gives them, for the dry run."""
        rows = group.size * batch
        obs = torch.zeros(rows, compute_space_size(group.observation_space, occupied_size=True), device=self.device)
        states = None
        if group.state_space is not None:
            states = torch.zeros(rows, compute_space_size(group.state_space, occupied_size=True), device=self.device)
        if group.id_size:
            obs = append_agent_id(obs, group.size)
            states = append_agent_id(states, group.size) if states is not None else None
        return obs, states

    # ------------------------------------------------------------------ lifecycle

    def init(self, *, trainer_cfg: Any = None) -> None:
        """skrl's initialisation (see :meth:`GroupedMultiAgent.init`); recurrent hidden states start from zeros."""
        super().init(trainer_cfg=trainer_cfg)
        self.reset_recurrent_states()

    def act(
        self,
        observations: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor | None] | None,
        *,
        timestep: int,
        timesteps: int,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Actions of every agent: one forward pass per group, policy and value together in training (the value is
        kept for the update). Nothing is stored here: see :meth:`record_transition`.

        :param observations: ``{agent: (N, obs_size)}``; agents absent from the dict get no action.
        :param states: ``{agent: (N, state_size) or None}`` (skrl's wrappers give one tensor to all agents).
        :param timestep: Current timestep.
        :param timesteps: Number of timesteps.
        :return: ``(actions, outputs)``: ``actions[agent]`` ``(N, action_size)`` (``(N, 1)`` indexes for Discrete
            spaces), ``outputs[agent]`` the policy's outputs. In evaluation ``outputs["mean_actions"]`` holds
            ``{agent: deterministic actions}`` (mean or greedy), where skrl's trainers look for them.
        """
        timestep, timesteps = self._shift(timestep, timesteps)
        self._input_check.check(locals(), timestep=timestep, training=self.training)  # same shapes every step
        actions, outputs, deterministic = {}, {}, {}
        with torch.no_grad():
            for group in self.groups:
                if not any(uid in observations for uid in group.uids):
                    continue
                raw_obs = group.stack(observations)  # (G, N, size)
                raw_states = self._stack_states(group, states)  # (G or 1, N, size)
                # normalised with the statistics of the rollout, which stay fixed until the update refreshes them
                obs, group_states = self._model_inputs(group, raw_obs, raw_states)
                policy_inputs = {"observations": obs, "states": group_states}
                value_inputs = {"observations": obs, "states": group_states}
                action_mask = self.action_masks.of_group(group, raw_obs)  # masks
                if action_mask is not None:
                    action_mask = action_mask.view(*raw_obs.shape[:2], -1)
                    policy_inputs[ACTION_MASK_KEY] = action_mask
                if group.recurrent is not None:  # recurrent: the hidden states the step starts from
                    group.recurrent.ensure(raw_obs.shape[0] * raw_obs.shape[1], self.device)
                    policy_inputs.update(group.recurrent.inputs("policy"))
                    value_inputs.update(group.recurrent.inputs("value"))
                unclipped = self.training and group.action_limits is not None  # sampled unclipped, clipped below
                with self._autocast(), unclipped_sampling(group.policy) if unclipped else contextlib.nullcontext():
                    if self.training:  # one call of both networks for a batched group
                        (group_actions, group_outputs), (values, value_outputs) = group.act_many(
                            ("policy", policy_inputs), ("value", value_inputs)
                        )
                    else:
                        group_actions, group_outputs = group.act("policy", policy_inputs)
                samples = None
                if unclipped:  # the update trains on the sample; the env receives it clipped, as skrl would clip it
                    samples, (low, high) = group_actions, group.action_limits
                    group_actions = torch.clamp(samples, min=low, max=high)
                for uid, (action, agent_outputs) in group.split(observations, group_actions, group_outputs).items():
                    actions[uid], outputs[uid] = action, agent_outputs
                if group.recurrent is not None:  # recurrent: they move on in record_transition, after the env's answer
                    hidden = dict(group.recurrent.current)
                    next_hidden = {"policy": group_outputs.get("rnn")}
                    next_hidden["value"] = value_outputs.get("rnn") if self.training else None
                    self._next_hidden[group.index] = next_hidden
                if self.training:
                    self._decisions[group.index] = Decision(
                        observations=raw_obs,
                        states=raw_states,
                        log_prob=group_outputs["log_prob"],
                        actions=samples,
                        values=values.float(),  # fp32: the value-clip anchor, denormalised in fp32 at the update
                        action_mask=action_mask,
                        hidden=hidden if group.recurrent is not None else None,  # recurrent
                        next_hidden=next_hidden if group.recurrent is not None else None,
                    )
                    continue
                if "mean_actions" in group_outputs:
                    deterministic.update(group.split(observations, group_outputs["mean_actions"]))
                elif isinstance(group.policy, CategoricalMixin) and "net_output" in group_outputs:
                    greedy = group_outputs["net_output"].argmax(dim=-1, keepdim=True)
                    deterministic.update(group.split(observations, greedy))
                else:  # acting was deterministic already: the same tensors
                    deterministic.update({uid: actions[uid] for uid in group.uids if uid in observations})
        if not self.training:
            outputs[MEAN_ACTIONS_KEY] = deterministic
        return actions, outputs

    def record_transition(
        self,
        *,
        observations: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor | None],
        actions: dict[str, torch.Tensor],
        rewards: dict[str, torch.Tensor],
        next_observations: dict[str, torch.Tensor],
        next_states: dict[str, torch.Tensor],
        terminated: dict[str, torch.Tensor],
        truncated: dict[str, torch.Tensor],
        infos: Any,
        timestep: int,
        timesteps: int,
    ) -> None:
        """Store one env step of every group that acted: one stacked write per tensor per group, the agent mask, the
        time-limit bootstrap value; skrl's episode tracking runs first.

        The step's infos are read (see :mod:`skrl_marl_ext.keys`): ``infos["action_mask"]`` is kept for the next
        :meth:`act` (in evaluation too); ``infos["agent_mask"]`` and ``infos["final_observations"]`` /
        ``["final_states"]`` are stored in training. Parameters are skrl's: ``{agent: tensor}`` dicts, rewards,
        terminated and truncated of shape ``(N, 1)``.
        """
        step, infos = self._recorded_step(locals())  # shifted, checked, tracked by skrl
        if ACTION_MASK_KEY in infos or self.action_masks.from_infos is not None:  # masks of next_observations
            self.action_masks.keep(infos, self.group_of)
        if self.training:
            self._next_observations, self._next_states = next_observations, next_states
            for group in self.groups:
                decision = self._decisions.pop(group.index, None)
                if decision is not None:
                    self._record_group(group, decision, step, infos)
        if self._next_hidden:  # recurrent: hidden states move on, zeroed where an episode ended or an agent is absent
            recurrent.advance_hidden_states(
                self.groups,
                self._next_hidden,
                observations=observations,
                terminated=terminated,
                truncated=truncated,
                infos=infos,
                record_step=self._rollout_step if self.training else None,
                device=self.device,
            )

    def _record_group(self, group: OnPolicyGroup, decision: Decision, step: dict[str, Any], infos: dict) -> None:
        """Write one group's step ``t`` of the rollout ``(T, G, N, width)``: one stacked write per tensor."""
        if group.rollout is None:
            self._allocate(group, decision)
        b, t, observations = group.rollout, self._rollout_step, step["observations"]
        b.write(t, observations=decision.observations, log_prob=decision.log_prob, values=decision.values)
        agent_masks = infos.get(AGENT_MASK_KEY)
        if isinstance(agent_masks, dict) or len(observations) < len(self.possible_agents):  # masks
            b.write(t, agent_mask=agent_mask(group, observations, agent_masks, b.num_envs, self.device))
        else:
            b.tensors["agent_mask"][t].fill_(True)
        for name in ("actions", "rewards", "terminated", "truncated"):
            group.stack(step[name], out=b.tensors[name][t])
        if decision.actions is not None:  # the unclipped samples (cfg.log_prob_of_unclipped_actions)
            b.write(t, actions=decision.actions)
        if "states" in b.tensors:
            b.write(t, states=decision.states)
        if "action_mask" in b.tensors:  # masks
            if decision.action_mask is None:
                b.tensors["action_mask"][t].fill_(True)
            else:
                b.write(t, action_mask=decision.action_mask)
        if decision.hidden is not None:  # recurrent
            b.write(t, **group.recurrent.stored(decision.hidden, group.size))
        if "final_values" in b.tensors:
            self._record_final_values(group, t, infos, decision)
        if self.cfg.rewards_shaper is not None:
            stored = b.tensors["rewards"][t]
            stored.copy_(self.cfg.rewards_shaper(stored.clone(), step["timestep"], step["timesteps"]))

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Count the step; at the end of a rollout update every group; then skrl's tracking and checkpoints.

        :param timestep: Current timestep (the trainer's, from 0; shifted by the steps completed before a load).
        :param timesteps: Number of timesteps.
        """
        timestep, timesteps = self._shift(timestep, timesteps)
        if self.training:
            self.progress.timestep = timestep + 1
            self._rollout_step += 1
            if self._rollout_step == self.cfg.rollouts:
                self._rollout_step = 0
                start = time.perf_counter()
                skipped = check_finite(self.groups, skip=self.cfg.non_finite == "skip", owner=type(self).__name__)
                self.enable_models_training_mode(True)
                weights, trained = None, []
                for group in self._update_order():
                    if trained:  # HAPPO: its advantages weighted by the ratios of the groups updated before it
                        weights = self._next_advantage_weights(*trained[-1], weights)
                    trained.append((group, self._update_group(group, advantage_weights=weights)))
                self._after_update(trained)
                self.enable_models_training_mode(False)
                self.track_data("Stats / Algorithm update time (ms)", (time.perf_counter() - start) * 1000.0)
                if skipped is not None:  # non-finite
                    self._non_finite_skipped += skipped
                    self.track_data("Stats / Non-finite samples skipped", float(self._non_finite_skipped))
        self._track_and_checkpoint(timestep=timestep, timesteps=timesteps)

    def update(self, *, timestep: int, timesteps: int, uid: str) -> None:
        """Update the group that agent ``uid`` belongs to (skrl's per-agent entry point). The agent calls this itself
        at the end of each rollout; the agents of one group are updated together.

        :param timestep: Current timestep.
        :param timesteps: Number of timesteps.
        :param uid: Agent name.
        """
        if uid not in self.group_of:
            raise ValueError(
                f"{type(self).__name__}.update: unknown agent '{uid}'; choose one of {self.possible_agents}"
            )
        skipped = check_finite([self.group_of[uid]], skip=self.cfg.non_finite == "skip", owner=type(self).__name__)
        if skipped is not None:  # non-finite
            self._non_finite_skipped += skipped
        self._update_group(self.group_of[uid])

    # HAPPO's sequential update (:mod:`~skrl_marl_ext.algorithms.happo`) replaces these three; MAPPO's groups are independent

    def _update_order(self) -> list[OnPolicyGroup]:
        """The groups in the order an update takes them."""
        return self.groups

    def _next_advantage_weights(self, group: OnPolicyGroup, data: TrainingData | None, weights: Any) -> Any:
        """The weights of the next group's advantages once ``group`` was updated on ``data``: none."""
        return None

    def _after_update(self, trained: list[tuple[OnPolicyGroup, TrainingData | None]]) -> None:
        """What follows every group's update (its data ``trained``): nothing."""

    def _update_group(self, group: OnPolicyGroup, advantage_weights: torch.Tensor | None = None) -> TrainingData | None:
        """PPO's update of one group: bootstrap and GAE, statistics, epochs of mini-batches (the loss, the step),
        tracking.

        :param advantage_weights: ``(T * N, 1)`` weights of the standardised advantages per sample (sample ``i``: step
            ``i // N``, env ``i % N``; the same for every agent of the group): HAPPO's factor of the agents updated
            before; None (MAPPO, IPPO) for none.
        :return: The data the epochs trained on, ``(G, T * N, width)`` (None when the group has no rollout).
        """
        if group.rollout is None:
            return None
        cfg, b = group.cfg, group.rollout.tensors
        G, N, T = group.size, group.rollout.num_envs, group.rollout.rollouts
        mask = b["agent_mask"]  # (T, G, N, 1)

        # bootstrap: the critic's value of the observations after the last step
        with torch.no_grad(), self._autocast():
            raw_states = self._stack_states(group, self._next_states) if "states" in b else None
            obs, group_states = self._model_inputs(group, group.stack(self._next_observations), raw_states)
            rnn = group.recurrent.inputs("value") if group.recurrent is not None else {}  # recurrent
            group.value.enable_training_mode(False)
            last_values, _ = group.act("value", {"observations": obs, "states": group_states, **rnn})
            group.value.enable_training_mode(True)
        last_values = last_values.float().view(1, G, N, 1)
        if self.cfg.non_finite == "skip":  # non-finite: no bootstrap from a non-finite value, no last sample
            last_values = group.rollout.skip_non_finite_bootstrap(last_values)

        # GAE in the env's value scale: the recorded raw outputs denormalised with the statistics they were computed
        # with; with time_limit_bootstrap a truncated step bootstraps from final_values (_record_final_values) and the
        # recursion stops there; without it a truncation is not an episode end, as in skrl
        values = group.preprocess("value", b["values"], agent_dim=1, inverse=True)
        last_values = group.preprocess("value", last_values, agent_dim=1, inverse=True)
        next_values = torch.cat([values[1:], last_values])
        if cfg.time_limit_bootstrap:
            final_values = group.preprocess("value", b["final_values"], agent_dim=1, inverse=True)
            next_values = torch.where(b["truncated"], final_values, next_values)
        advantages, returns = self.compute_gae(
            rewards=b["rewards"],
            values=values,
            next_values=next_values,
            terminated=b["terminated"],
            truncated=b["truncated"],
            discount_factor=cfg.discount_factor,
            lambda_coefficient=cfg.gae_lambda,
            time_limit_bootstrap=cfg.time_limit_bootstrap,
        )
        # per agent over (step, env), or over the agents of a shared policy too ("pooled", the MAPPO paper's code)
        pooled = cfg.advantage_standardization == "pooled" and not group.own_models
        advantages = normalize_advantages(advantages, mask, dim=(0, 1, 2, 3) if pooled else (0, 2, 3))
        if advantage_weights is not None:  # HAPPO: the factor of the agents updated before, per (step, env)
            advantages = advantages * advantage_weights.view(T, 1, N, 1)
        explained = explained_variance(values=values, returns=returns, mask=mask, dim=(0, 2, 3))

        # statistics: value targets normalised with statistics refreshed by this rollout's returns (the MAPPO paper's
        # code; the clip anchor stays the critic's raw output at collection); input statistics refreshed with the
        # unmasked inputs, as skrl does (with the whole rollout at once; check_finite has refused or masked NaN/inf)
        if group.value_preprocessor is not identity and group.trains_value:  # a team critic's: at its own update
            group.update_statistics("value", returns, mask, agent_dim=1)
            returns = group.preprocess("value", returns, agent_dim=1)
        if group.observation_preprocessor is not identity:
            group.update_statistics("observation", b["observations"], mask, agent_dim=1)
        if "states" in b and group.state_preprocessor is not identity:
            # a shared state counts where any agent of a shared model is alive; for each agent's own, where it is
            state_mask = mask.any(dim=1, keepdim=True) if group.shared_state and not group.own_models else mask
            group.update_statistics("state", b["states"], state_mask, agent_dim=1)

        # the rollout per agent (G, T * N, width), its inputs left raw: each mini-batch preprocesses its own; a state
        # the group shares once for all its agents where their statistics are the same (one host read)
        shared = group.common_preprocessor("state") if group.shared_state else None
        data = TrainingData.from_rollout(
            group.rollout,
            advantages=advantages,
            returns=returns,
            model_inputs=functools.partial(self._model_inputs, group, shared=shared),
            action_mask=group.mask_in_observations or group.masks_seen,  # masks: used once a policy had them
        )

        # epochs of mini-batches: one loss and one optimiser step each; with cfg.kl_threshold an agent whose
        # mini-batch KL passes it steps no more in the epoch; each agent's scheduler steps once per epoch (UpdateSteps)
        steps = UpdateSteps(group.optimizer, group.schedulers, kl_threshold=cfg.kl_threshold, scaler=self.scaler)
        stats = {name: torch.zeros(G, device=self.device) for name in STATISTICS}
        for _ in range(cfg.learning_epochs):
            steps.start_epoch()
            for indexes in group.rollout.mini_batch_indexes(
                group.mini_batches, shuffle=cfg.mini_batch_order == "shuffled"
            ):
                batch = data.batch(indexes)  # (G, B, width)
                # forward and backward in passes of a batched group's agents (cfg.update_agents_at_once): only one
                # pass's activations are alive; the loss is a sum of per-agent terms, so the gradients are the same
                group.optimizer.zero_grad(set_to_none=True)
                passes = []
                for agents in group.agent_passes(cfg.update_agents_at_once, rows=batch["log_prob"].shape[1]):
                    part = {name: x if x is None or agents == slice(None) else x[agents] for name, x in batch.items()}
                    terms = self._loss_terms(group, part, agents=agents)
                    self.scaler.scale(terms["loss"]).backward()
                    passes.append({name: terms[name] for name in (*STATISTICS, "model_kl") if name in terms})
                terms = {name: torch.cat([p[name] for p in passes]) for name in passes[0]}
                if not steps.keep_stepping(terms["model_kl"]):  # the KL before the step, as skrl's
                    break
                steps.step(clip_sets=group.clip_sets, max_norm=cfg.grad_norm_clip)
                for name in STATISTICS:  # the statistics of the agents that stepped
                    if name in terms:
                        stats[name].addcmul_(terms[name], steps.live)
            steps.end_epoch()

        # tracking: one host read per update, the mean per-agent losses and statistics of the steps each agent took
        means = dict(zip(stats, (torch.stack(list(stats.values())) / steps.taken.clamp(min=1)).tolist(), strict=True))
        means.update(explained=explained.tolist(), lr=group.optimizer.learning_rates().expand(G).tolist())
        normal = isinstance(group.policy.distribution(role="policy"), torch.distributions.Normal)
        left_out = {"critic": not group.trains_value, "entropy": not cfg.entropy_loss_scale, "std": not normal}
        for i, uid in enumerate(group.uids):
            for name, key in TRACKED.items():
                if not left_out.get(key):
                    self.track_data(f"{name} ({uid})", means[key][i])
        self.track_data("Learning / Updates per rollout", steps.count)
        return data

    def _model_calls(self, group: OnPolicyGroup, batch: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The policy's and the value model's inputs for a mini-batch ``(G, B, ...)``: the taken actions to evaluate,
        the action mask (masks) and the hidden states the sequences start from (recurrent)."""
        obs = batch["observations"].contiguous()  # models may .view() their inputs
        policy_inputs = {"observations": obs, "states": batch["states"], "taken_actions": batch["actions"].contiguous()}
        value_inputs = {"observations": obs, "states": batch["states"]}
        if batch["action_mask"] is not None:  # masks
            policy_inputs[ACTION_MASK_KEY] = batch["action_mask"].contiguous()
        if group.recurrent is not None:  # recurrent
            policy_inputs.update(group.recurrent.batch_inputs(batch, "policy"))
            value_inputs.update(group.recurrent.batch_inputs(batch, "value"))
        return policy_inputs, value_inputs

    def _loss_terms(self, group: OnPolicyGroup, batch: dict[str, Any], *, agents: slice) -> dict[str, torch.Tensor]:
        """One mini-batch's forward (both networks in one call; a team critic is trained on its own) and PPO's loss
        terms (:func:`~skrl_marl_ext.functional.ppo_loss`) for ``agents`` of the group: the terms, their sum
        ``"loss"``, the policy's standard deviation ``"std"`` and ``"model_kl"``, each model's KL (of each agent with
        models of its own, else of all the rows)."""
        cfg, B = group.cfg, batch["log_prob"].shape[1]
        policy_inputs, value_inputs = self._model_calls(group, batch)
        with self._autocast():
            calls = [("policy", policy_inputs)] + ([("value", value_inputs)] if group.trains_value else [])
            (_, outputs), *value_results = group.act_many(*calls, agents=agents)
            predicted = value_results[0][0].float().view(-1, B, 1) if value_results else None
            log_prob = outputs["log_prob"].float().view(-1, B, 1)
            entropy = None
            if cfg.entropy_loss_scale:  # skipped when off (skrl's default): no entropy in the graph
                entropy = group.policy.get_entropy(role="policy").float().view(-1, B, 1)
            terms = self.ppo_loss(
                log_prob=log_prob,
                old_log_prob=batch["log_prob"],
                advantages=batch["advantages"],
                values=predicted,
                old_values=batch["values"],
                returns=batch["returns"],
                entropy=entropy,
                mask=batch["mask"],
                per_agent=group.own_models,
                **{name: getattr(cfg, name) for name in LOSS_HYPERPARAMETERS},
            )
        terms["loss"] = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
        with torch.no_grad():
            distribution = group.policy.distribution(role="policy")
            if isinstance(distribution, torch.distributions.Normal):
                terms["std"] = distribution.stddev.float().view(len(log_prob), B, -1).mean(dim=(1, 2))
            terms["model_kl"] = terms["kl"]
            if not group.own_models:  # one model: its KL over all the rows
                terms["model_kl"] = masked_mean(
                    approx_kl(log_prob=log_prob, old_log_prob=batch["log_prob"]), batch["mask"]
                ).view(1)
        return terms

    def reset_recurrent_states(self) -> None:
        """Zero the hidden states of recurrent models, e.g. after resetting the env yourself (skrl's trainers call
        :meth:`init`, which does it, when they are constructed)."""
        for group in self.groups:
            if group.recurrent is not None:
                group.recurrent.current = None
        self._next_hidden.clear()

    def load(self, path: str) -> None:
        """Load a checkpoint (see :meth:`GroupedMultiAgent.load`). Recurrent hidden states start from zeros again:
        they belong to the episodes running when the checkpoint was written, which a trainer does not resume (it
        resets the env), so a checkpoint holds the models that make them, not the states."""
        super().load(path)
        self.reset_recurrent_states()

    # ------------------------------------------------------------------ inputs

    def _stack_states(self, group: OnPolicyGroup, states: Any) -> torch.Tensor | None:
        """The group's states ``(G, N, size)``, or ``(1, N, size)`` when the env gives the group one shared tensor."""
        if not isinstance(states, dict) or states.get(group.uids[0]) is None:
            return None
        shared = all(states.get(u) is states[group.uids[0]] for u in group.uids)
        if group.shared_state is None:
            group.shared_state = shared
        if group.shared_state:
            if not shared:
                raise ValueError(
                    f"{type(self).__name__}: the env gave agents {group.uids} one shared state tensor at the "
                    "first step and different ones now; an env must do one or the other"
                )
            return states[group.uids[0]].unsqueeze(0)
        return group.stack(states)

    def _model_inputs(
        self, group: OnPolicyGroup, obs: torch.Tensor, states: torch.Tensor | None, *, shared: Callable | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stacked raw inputs ``(G, N, size)`` (states ``(1, N, size)`` when the group shares one) preprocessed with
        the statistics as they are now, as the group's model inputs ``(G, N, size [+ G])``: a shared state expanded to
        the ``G`` agents (a view, not copies), one-hot agent ids appended when configured.

        :param shared: One preprocessor for a state the group shares, where every agent's statistics are the same (the
            update's mini-batches: :meth:`~skrl_marl_ext.groups.AgentGroup.common_preprocessor`); None: each agent's
            own (a batched group's preprocessors give the state back per agent).
        :return: ``(observations, states)`` (states None without states).
        """
        obs = group.preprocess("observation", obs, agent_dim=0)
        if states is not None:
            one = shared is not None and states.shape[0] == 1
            states = shared(states) if one else group.preprocess("state", states, agent_dim=0)
            states = states.expand(group.size, *states.shape[1:])
        if group.id_size:
            obs = with_agent_ids(obs)
            states = with_agent_ids(states) if states is not None else None
        return obs, states

    # ------------------------------------------------------------------ recording

    def _allocate(self, group: OnPolicyGroup, decision: Decision) -> None:
        """The group's rollout ``(T, G, N, width)``, allocated at its first recorded step (when ``N`` is known)."""
        name, num_envs = type(self).__name__, decision.observations.shape[1]
        if self.memories is not None and self.memories[group.uids[0]].num_envs != num_envs:
            raise ValueError(
                f"{name}: memories['{group.uids[0]}'] was created with num_envs="
                f"{self.memories[group.uids[0]].num_envs} but the env gives {num_envs} observations per step; "
                f"create RandomMemory(memory_size={self.cfg.rollouts}, num_envs=env.num_envs)"
            )
        self._set_mini_batches(group, num_envs)
        if self.requires_states and decision.states is None:
            raise ValueError(
                f"{name}: the env gave no states for agents {group.uids} but the centralised critic reads them; "
                "use an env with a global state (env.state()) or IPPO"
            )
        G = group.size
        specs = {
            "observations": (G, decision.observations.shape[-1], torch.float32),
            "actions": (G, compute_space_size(group.action_space, occupied_size=True), torch.float32),
            "log_prob": (G, 1, torch.float32),
            "values": (G, 1, torch.float32),
            "rewards": (G, 1, torch.float32),
            "terminated": (G, 1, torch.bool),
            "truncated": (G, 1, torch.bool),
            "agent_mask": (G, 1, torch.bool),
        }
        if decision.states is not None:
            specs["states"] = (decision.states.shape[0], decision.states.shape[-1], torch.float32)
        if group.cfg.time_limit_bootstrap:
            specs["final_values"] = (G, 1, torch.float32)  # V(final observation), or V(s_t), of the step's episode
        if group.discrete:  # masks
            specs["action_mask"] = (G, group.num_actions, torch.bool)
        if group.recurrent is not None:
            specs.update(group.recurrent.specs(G))
        L = group.recurrent.sequence_length if group.recurrent is not None else 1
        group.rollout = RolloutBuffer(
            specs, rollouts=self.cfg.rollouts, num_envs=num_envs, device=self.device, sequence_length=L
        )

    def _record_final_values(self, group: OnPolicyGroup, t: int, infos: dict, decision: Decision) -> None:
        """Store the value the time-limit bootstrap of step ``t`` uses (read only where the step was truncated).

        ``V(final observation)`` where the env handed the episode's final observation (and final state, when the group
        has states) in ``infos``; otherwise ``V(s_t)``, the value of the truncated step itself (rsl_rl's
        approximation). The next observation cannot be used: an env that resets in place returns the next episode's
        first observation there. The critic's raw output is stored, as for ``values``.
        """
        b = group.rollout
        target = b.tensors["final_values"][t]
        target.copy_(b.tensors["values"][t])
        finals, final_states = infos.get(FINAL_OBSERVATIONS_KEY), infos.get(FINAL_STATES_KEY)
        if not isinstance(finals, dict) or any(finals.get(uid) is None for uid in group.uids):
            return
        raw_states = None
        if "states" in b.tensors:
            if not isinstance(final_states, dict) or final_states.get(group.uids[0]) is None:
                return  # an observation without its state: keep V(s_t)
            raw_states = group.stack(final_states)[: b.tensors["states"].shape[1]]
        rnn = {}
        if decision.next_hidden is not None and decision.next_hidden["value"] is not None:  # recurrent
            rnn = {"rnn": decision.next_hidden["value"]}  # the episode's memory up to its final observation
        with torch.no_grad(), self._autocast():
            obs, group_states = self._model_inputs(group, group.stack(finals), raw_states)
            final_values, _ = group.act("value", {"observations": obs, "states": group_states, **rnn})
        ended = b.tensors["terminated"][t] | b.tensors["truncated"][t]
        target.copy_(torch.where(ended, final_values.float().view(target.shape), target))


class MAPPO(OnPolicyAgent):
    """Multi-Agent Proximal Policy Optimization, a drop-in for ``skrl.multi_agents.torch.mappo.MAPPO``.

    The value model reads the env's global state: ``inputs["states"]`` is the state (``env.state()``), and
    ``inputs["observations"]`` the agent's own observation. Construction fails without ``state_spaces``.

    :param possible_agents: Names of all the agents the env can have.
    :param models: ``{agent: {"policy": Model, "value": Model}}``. Agents given the same policy object and the same
        value object share them and train as one batch (one forward pass, one loss, one optimiser step).
    :param memories: Optional ``{agent: Memory}`` (skrl's ``RandomMemory(memory_size=rollouts, num_envs=...)``).
        Accepted for drop-in compatibility and checked (``memory_size`` must equal ``cfg.rollouts``, ``num_envs`` the
        env's); the rollout itself is stored in one preallocated buffer per agent group. None is fine.
    :param observation_spaces: ``{agent: gymnasium.Space}``.
    :param state_spaces: ``{agent: gymnasium.Space}`` of the global state (required).
    :param action_spaces: ``{agent: gymnasium.Space}`` (Box, Discrete or MultiDiscrete).
    :param device: Device of the agent's data and computation.
    :param cfg: :class:`MAPPO_CFG` or a dict of its fields (``{}`` gives the defaults). Unknown keys are refused.
    """

    cfg_class = MAPPO_CFG
    requires_states = True


class IPPO(OnPolicyAgent):
    """Independent Proximal Policy Optimization, a drop-in for ``skrl.multi_agents.torch.ippo.IPPO``.

    The models get exactly what skrl 2.1.1's IPPO gives them (and what MAPPO gives them): the agent's observation
    under ``inputs["observations"]`` and the env's state under ``inputs["states"]`` (None when the env has no state).
    An independent critic is a value model that reads ``"observations"`` (e.g.
    ``ValueMLP(..., input="observations")``); a value model sized from the state space reads ``"states"``, as Isaac
    Lab's ``skrl_ippo_cfg.yaml`` files build it. ``state_spaces`` may be omitted.

    Parameters are those of :class:`MAPPO`, with ``cfg`` an :class:`IPPO_CFG` or a dict.
    """

    cfg_class = IPPO_CFG
    requires_states = False
