"""MAPPO and IPPO: PPO per agent (Schulman et al. 2017) with a centralised or an independent critic.

MAPPO's critic reads the global state (Yu et al. 2022, https://arxiv.org/abs/2103.01955); IPPO's reads what its value
model chooses, usually the agent's own observation (de Witt et al. 2020, https://arxiv.org/abs/2011.09533). Both feed
every model the agent's observation under ``"observations"`` and the env's state under ``"states"``, as skrl's do.

The file reads in skrl's lifecycle order: construction, ``init``, ``act`` (one forward pass per group; it stores
nothing), ``record_transition`` (the only writer of the rollout), ``post_interaction`` and ``update``, then the
update's phases: bootstrap and GAE -> statistics -> epochs of mini-batches -> tracking.

Layouts, named once: a group of ``G`` agents acting in ``N`` envs stacks a step's inputs as ``(G, N, size)`` (a state
the whole group shares as ``(1, N, size)``) and calls its models on agent-major rows ``(G * N, size)``; its rollout
is ``(T, G, N, width)`` (:mod:`~skrl_marl_ext.storage.rollout`); the update reads it per agent as ``(G, T * N, width)``
and a mini-batch as ``(G, B, width)``. Recurrent hidden states and action masks enter at the places marked
``# recurrent`` and ``# masks``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, Model
from skrl.multi_agents.torch import MultiAgent
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext import distributed
from skrl_marl_ext.algorithms.base import GroupedMultiAgent, optimizer_steps
from skrl_marl_ext.algorithms.mappo_cfg import IPPO_CFG, MAPPO_CFG, OnPolicyCfg
from skrl_marl_ext.checkpoint import OptimizerCheckpoint
from skrl_marl_ext.checks import check_policy_family, dry_run
from skrl_marl_ext.functional import (
    approx_kl,
    compute_gae,
    explained_variance,
    masked_mean,
    normalize_advantages,
    ppo_loss,
)
from skrl_marl_ext.groups import AgentGroup
from skrl_marl_ext.groups.stacked import batch_by_default, make_adam, stackable_preprocessor
from skrl_marl_ext.keys import (
    ACTION_MASK_KEY,
    AGENT_MASK_KEY,
    FINAL_OBSERVATIONS_KEY,
    FINAL_STATES_KEY,
    MEAN_ACTIONS_KEY,
)
from skrl_marl_ext.models.agent_id import append_agent_id
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.recurrent import (
    RESET_KEY,
    RecurrentState,
    is_recurrent,
    rnn_specification,
    sequence_indexes,
    sequence_mini_batch_indexes,
)
from skrl_marl_ext.storage.rollout import RolloutBuffer, first_non_finite, mini_batch_indexes

LOSS_FIELDS = ("ratio_clip", "value_clip", "huber_delta", "value_loss_scale", "entropy_loss_scale")
"""The config fields that are keyword arguments of :func:`~skrl_marl_ext.functional.ppo_loss`."""


@dataclasses.dataclass(eq=False)
class OnPolicyGroup(AgentGroup):
    """An on-policy group: its optimiser over policy and value, value normaliser and rollout."""

    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    value_preprocessor: Callable = identity
    trainable: list[torch.nn.Parameter] = dataclasses.field(default_factory=list)
    """Every parameter the optimiser steps, each once."""
    rollout: RolloutBuffer | None = None
    shared_state: bool | None = None
    """Whether every agent of the group receives the very same state tensor (stored once, not G times); None until
    the first ``act``."""
    mini_batches: int = 0
    """Mini-batches per epoch: ``cfg.mini_batches``, at most the sequences per agent of a rollout (0: not known)."""
    recurrent: RecurrentState | None = None
    """Hidden states of recurrent models (:mod:`~skrl_marl_ext.recurrent`); None when no model is."""

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
    values: torch.Tensor
    """``(G * N, 1)`` fp32: the critic's own output (normalised space under a value preprocessor)."""
    action_mask: torch.Tensor | None
    """``(G * N, num_actions)`` bool, or None."""
    hidden: dict[str, list[torch.Tensor]] | None = None
    """Recurrent models: the hidden states the step started from, by role."""
    next_hidden: dict[str, list[torch.Tensor] | None] | None = None
    """Recurrent models: the hidden states the models returned (before any reset), by role."""


@dataclasses.dataclass
class TrainingData:
    """A group's rollout as the mini-batches read it: every float tensor packed into one ``(G, T * N, width)``
    tensor (one gather per mini-batch), plus masks."""

    packed: torch.Tensor
    names: list[str]
    widths: list[int]
    mask: torch.Tensor | None
    """``(G, T * N, 1)`` agent mask, or None when every sample counts (then every mean is a plain mean)."""
    action_mask: torch.Tensor | None
    shared_states: torch.Tensor | None
    """``(T * N, size)``: a state shared by the whole group (and no agent id appended), gathered once per mini-batch
    and broadcast to the G agents instead of a G-fold copy of the rollout."""
    flags: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    """Recurrent models: ``(G, T * N, 1)`` bool hidden-state resets and truncations."""

    def batch(self, indexes: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """The samples ``indexes`` of every tensor, ``(G, B, width)``."""
        batch = dict(zip(self.names, self.packed[:, indexes].split(self.widths, dim=-1), strict=True))
        batch["mask"] = self.mask[:, indexes] if self.mask is not None else None
        batch["action_mask"] = self.action_mask[:, indexes] if self.action_mask is not None else None
        if self.shared_states is not None:
            G = self.packed.shape[0]
            batch["states"] = self.shared_states[indexes].unsqueeze(0).expand(G, -1, -1)
        batch.setdefault("states", None)
        batch.update({name: flag[:, indexes] for name, flag in self.flags.items()})
        return batch


class OnPolicyAgent(GroupedMultiAgent):
    """PPO per agent: the algorithm of :class:`MAPPO` and :class:`IPPO` (see the module docstring)."""

    cfg_class: type = OnPolicyCfg
    roles = ("policy", "value")
    group_class = OnPolicyGroup
    requires_states: bool = True

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
        self._form_groups(batchable=self._batchable)
        self.policies = {uid: self.models[uid]["policy"] for uid in self.possible_agents}
        self.values = {uid: self.models[uid]["value"] for uid in self.possible_agents}
        num_envs = self._check_memories()
        for group in self.groups:
            self._set_up_group(group)
            if num_envs is not None:
                self._set_mini_batches(group, num_envs)
        self._broadcast_models()  # models start identical on every rank of a distributed run

        self._rollout_step = 0
        self._next_observations: dict[str, torch.Tensor] | None = None
        self._next_states: dict[str, torch.Tensor] | None = None
        self._decisions: dict[int, Decision] = {}
        self._next_hidden: dict[int, dict[str, Any]] = {}

    def _batchable(self, uid: str) -> bool:
        """Agents with models of their own batch where ``cfg.batch_agent_models`` is True, or ``"auto"`` and
        :func:`~skrl_marl_ext.groups.stacked.batch_by_default` says so, unless a preprocessor's statistics cannot be
        stacked, the update adapts to each agent's own KL (``KLAdaptiveLR``, ``kl_threshold``), or a model is recurrent
        (``torch.vmap`` has no batching rule for ``aten::gru``/``aten::lstm``)."""
        cfg = self.cfg
        preprocessors = ("observation_preprocessor", "state_preprocessor", "value_preprocessor")
        scheduler = cfg.value_for("learning_rate_scheduler", uid)
        wanted = cfg.batch_agent_models
        if wanted == "auto":
            wanted = batch_by_default(self.models, uid, roles=self.roles, device=self.device)
        return (
            wanted is True
            and all(stackable_preprocessor(cfg.value_for(name, uid)) for name in preprocessors)
            and not (isinstance(scheduler, type) and issubclass(scheduler, KLAdaptiveLR))
            and not cfg.value_for("kl_threshold", uid)
            and not any(is_recurrent(self.models[uid][role]) for role in self.roles)
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
        self._note_mask_in_observations(group)
        self._make_optimizer(group)
        self._make_preprocessors(group)
        group.recurrent = self._recurrent_state(group)
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
        modules = {"policy": group.policy, "value": group.value, "optimizer": OptimizerCheckpoint(group.optimizer)}
        modules["scheduler"] = group.scheduler
        for key in ("observation_preprocessor", "state_preprocessor", "value_preprocessor"):
            modules[key] = getattr(group, key)
        self._register_checkpoint(group, modules)

    def _recurrent_state(self, group: OnPolicyGroup) -> RecurrentState | None:
        """The group's hidden-state keeper when its policy or value model is recurrent (skrl's RNN convention).

        :raises ValueError: When the two models name different sequence lengths, or ``cfg.rollouts`` is not a
            multiple of the sequence length (every env's rollout is cut into whole sequences).
        """
        name, specs = type(self).__name__, {}
        for role in self.roles:
            spec = rnn_specification(name, f"the {role} model of agents {group.uids}", group.models[role])
            if spec is not None:
                specs[role] = spec
        if not specs:
            return None
        lengths = {role: length for role, (length, _) in specs.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{name}: the recurrent models of agents {group.uids} name different sequence lengths {lengths}; "
                "mini-batches are whole sequences of one length: give both models the same sequence_length"
            )
        length = next(iter(lengths.values()))
        if self.cfg.rollouts % length:
            raise ValueError(
                f"{name}: cfg.rollouts ({self.cfg.rollouts}) is not a multiple of the sequence_length ({length}) of the "
                f"recurrent models of agents {group.uids}; every env's rollout is cut into whole sequences. Set "
                f"rollouts to a multiple of {length} (e.g. {length * max(1, round(self.cfg.rollouts / length))})"
            )
        shared = group.models["policy"] is group.models["value"]
        return RecurrentState({r: sizes for r, (_, sizes) in specs.items()}, sequence_length=length, shared=shared)

    def _make_optimizer(self, group: OnPolicyGroup) -> None:
        """One Adam per group: the policy's and the value model's parameters as two parameter groups (a model in
        both roles counts once), each with its learning rate; and the learning rate scheduler."""
        cfg = group.cfg
        policy_lr, value_lr = cfg.learning_rate
        policy_params = group.parameters("policy")
        seen = {id(p) for p in policy_params}
        value_params = [p for p in group.parameters("value") if id(p) not in seen]
        param_groups = [{"params": policy_params, "lr": policy_lr}]
        if value_params:
            param_groups.append({"params": value_params, "lr": value_lr})
        group.trainable = policy_params + value_params
        group.optimizer = make_adam(param_groups)
        if cfg.learning_rate_scheduler:
            group.scheduler = cfg.learning_rate_scheduler(group.optimizer, **cfg.learning_rate_scheduler_kwargs)

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
                present = [uid for uid in group.uids if uid in observations]
                if not present:
                    continue
                group_actions, group_outputs = self._act_group(group, observations, states)
                n = group_actions.shape[0] // group.size
                self._split(group, observations, group_actions, group_outputs, n, actions, outputs)
                if self.training:
                    continue
                if "mean_actions" in group_outputs:
                    self._split(group, observations, group_outputs["mean_actions"], {}, n, deterministic, {})
                elif isinstance(group.policy, CategoricalMixin) and "net_output" in group_outputs:
                    greedy = group_outputs["net_output"].argmax(dim=-1, keepdim=True)
                    self._split(group, observations, greedy, {}, n, deterministic, {})
                else:  # acting was deterministic already: the same tensors
                    deterministic.update({uid: actions[uid] for uid in present})
        if not self.training:
            outputs[MEAN_ACTIONS_KEY] = deterministic
        return actions, outputs

    def _act_group(self, group: OnPolicyGroup, observations: dict, states: Any) -> tuple[torch.Tensor, dict]:
        """One group's forward pass: its actions and policy outputs as agent-major rows ``(G * N, ...)``. In training
        the policy and value run together and the decision is kept for :meth:`record_transition`."""
        raw_obs = group.stack(observations)  # (G, N, size)
        raw_states = self._stack_states(group, states)  # (G or 1, N, size)
        # normalised with the statistics of the rollout, which stay fixed until the update refreshes them
        obs, st = self._model_inputs(group, raw_obs, raw_states)
        policy_inputs, value_inputs = {"observations": obs, "states": st}, {"observations": obs, "states": st}
        action_mask = self._action_mask(group, raw_obs) if group.discrete else None  # masks
        if action_mask is not None:
            policy_inputs[ACTION_MASK_KEY] = action_mask
        rec = group.recurrent
        if rec is not None:  # recurrent: the hidden states the step starts from
            rec.ensure(obs.shape[0], self.device)
            policy_inputs.update(rec.inputs("policy"))
            value_inputs.update(rec.inputs("value"))
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            if self.training:  # one call of both networks for a batched group
                calls = group.act_many(("policy", policy_inputs), ("value", value_inputs))
                (group_actions, group_outputs), (values, value_outputs) = calls
            else:
                group_actions, group_outputs = group.act("policy", policy_inputs)
        hidden = next_hidden = None
        if rec is not None:  # recurrent: they move on in record_transition, after the env's answer
            hidden = dict(rec.current)
            next_hidden = {"policy": group_outputs.get("rnn")}
            next_hidden["value"] = value_outputs.get("rnn") if self.training else None
            self._next_hidden[group.index] = next_hidden
        if self.training:
            self._decisions[group.index] = Decision(
                observations=raw_obs,
                states=raw_states,
                log_prob=group_outputs["log_prob"],
                values=values.float(),  # fp32: the value-clip anchor, denormalised in fp32 at the update
                action_mask=action_mask,
                hidden=hidden,
                next_hidden=next_hidden,
            )
        return group_actions, group_outputs

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
        timestep, timesteps = self._shift(timestep, timesteps)
        step = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self._input_check.check(step, timestep=timestep, training=self.training)  # same shapes every step
        MultiAgent.record_transition(self, **step)
        infos = infos if isinstance(infos, dict) else {}
        if ACTION_MASK_KEY in infos or self._infos_action_masks is not None:  # masks of next_observations
            self._keep_action_masks(infos)
        if self.training:
            self._next_observations, self._next_states = next_observations, next_states
            for group in self.groups:
                decision = self._decisions.pop(group.index, None)
                if decision is not None:
                    self._record_group(group, decision, step, infos)
        if self._next_hidden:  # recurrent
            self._advance_hidden_states(observations, terminated, truncated, infos)

    def _record_group(self, group: OnPolicyGroup, decision: Decision, step: dict[str, Any], infos: dict) -> None:
        """Write one group's step ``t`` of the rollout ``(T, G, N, width)``: one stacked write per tensor."""
        if group.rollout is None:
            self._allocate(group, decision)
        b, t, observations = group.rollout, self._rollout_step, step["observations"]
        b.write(t, observations=decision.observations, log_prob=decision.log_prob, values=decision.values)
        agent_masks = infos.get(AGENT_MASK_KEY)
        if isinstance(agent_masks, dict) or len(observations) < len(self.possible_agents):  # masks
            b.write(t, agent_mask=self._agent_mask(group, observations, agent_masks, b.num_envs))
        else:
            b.tensors["agent_mask"][t].fill_(True)
        for name in ("actions", "rewards", "terminated", "truncated"):
            group.stack(step[name], out=b.tensors[name][t])
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
                self._check_finite(self.groups)
                self.enable_models_training_mode(True)
                self._update_groups()
                self.enable_models_training_mode(False)
                self.track_data("Stats / Algorithm update time (ms)", (time.perf_counter() - start) * 1000.0)
                if self.cfg.non_finite == "skip":
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
        self._check_finite([self.group_of[uid]])
        self._update_group(self.group_of[uid])

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
        self,
        group: OnPolicyGroup,
        obs: torch.Tensor,
        states: torch.Tensor | None,
        *,
        preprocess: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stacked raw inputs ``(G, N, size)`` (states ``(1, N, size)`` when shared) preprocessed with the statistics
        as they are now (unless ``preprocess`` is off), as agent-major model rows ``(G * N, size [+ G])``, one-hot
        agent ids appended when configured. A batched group takes its states as ``(G, N, size)``: a shared state is
        then an expanded view, not G copies.

        :return: ``(observations, states)`` rows (states None without states).
        """
        G = group.size
        if preprocess:  # a shared state comes back per agent from a batched group's own preprocessors
            obs = group.preprocess("observation", obs, agent_dim=0)
            states = group.preprocess("state", states, agent_dim=0) if states is not None else None
        obs = obs.reshape(-1, obs.shape[-1])
        if states is not None:
            if states.shape[0] != G:  # one state shared by the whole group
                states = states.expand(G, *states.shape[1:])
            if not group.batched:
                states = states.reshape(-1, states.shape[-1])
        if group.id_size:
            obs = append_agent_id(obs, G)
            states = append_agent_id(states, G) if states is not None else None
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
        group.rollout = RolloutBuffer(specs, rollouts=self.cfg.rollouts, num_envs=num_envs, device=self.device)

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
        with torch.no_grad(), torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            obs, st = self._model_inputs(group, group.stack(finals), raw_states)
            final_values, _ = group.act("value", {"observations": obs, "states": st, **rnn})
        ended = b.tensors["terminated"][t] | b.tensors["truncated"][t]
        target.copy_(torch.where(ended, final_values.float().view(target.shape), target))

    def _advance_hidden_states(self, observations: dict, terminated: dict, truncated: dict, infos: dict) -> None:
        """Recurrent: move hidden states on to the models' new ones, zeroed for agents whose episode ended
        (terminated or truncated) or that were masked at the step; in training, store where that happened."""
        for index, new in list(self._next_hidden.items()):
            group = self.groups[index]
            num_envs = next(iter(group.recurrent.current.values()))[0].shape[1] // group.size
            ended = group.stack(terminated).bool() | group.stack(truncated).bool()
            alive = self._agent_mask(group, observations, infos.get(AGENT_MASK_KEY), num_envs)
            reset = ended.view(group.size, num_envs, 1) | ~alive
            if self.training and group.rollout is not None:
                group.rollout.write(self._rollout_step, **{RESET_KEY: reset})
            group.recurrent.advance(new, reset.view(-1))
        self._next_hidden.clear()

    # ------------------------------------------------------------------ update

    def _update_groups(self) -> None:
        """Update every group at the end of a rollout (each group's update reads only its own rollout)."""
        for group in self.groups:
            self._update_group(group)

    def _update_group(self, group: OnPolicyGroup, advantage_scale: torch.Tensor | None = None) -> TrainingData | None:
        """Bootstrap and GAE -> value and input statistics -> epochs of mini-batches -> tracking.

        :param advantage_scale: ``(T * N, 1)`` per-sample weights of the standardised advantages (the rollout's
            samples in :meth:`RolloutBuffer.flat` order, the same for every agent of the group), or None.
        :return: The data the epochs trained on (None when the group has no rollout).
        """
        if group.rollout is None:
            return None
        mask = group.rollout.tensors["agent_mask"]
        values, advantages, returns = self._advantages(group)
        explained = explained_variance(values=values, returns=returns, mask=mask, dim=(0, 2, 3))
        returns = self._update_statistics(group, returns, mask)
        data = self._training_data(group, advantages, returns, advantage_scale)
        sums, updates = self._epochs(group, data)
        self._track_update(group, sums, updates, explained)
        return data

    def _check_finite(self, groups: list[OnPolicyGroup]) -> None:
        """NaN/inf in the rollout: an error naming the agent, the tensor and the step (default), or, with
        ``cfg.non_finite="skip"``, the affected samples are zeroed and masked out of every loss and statistic.

        One host read per update (raise) or none (skip). The error names the earliest step over all groups, inputs
        before what was computed from them.
        """
        groups = [group for group in groups if group.rollout is not None]
        if self.cfg.non_finite == "skip":
            for group in groups:
                self._non_finite_skipped += group.rollout.skip_non_finite()
            return
        found = first_non_finite([(group.rollout, group.uids, bool(group.shared_state)) for group in groups])
        if found is not None:
            key, who, step, env = found
            raise ValueError(
                f"{type(self).__name__}: non-finite {key} (NaN or inf) for {who} at step {step} of the rollout, env "
                f"{env}; refusing to learn from them. Fix the env, shape the rewards with cfg.rewards_shaper, or set "
                'cfg.non_finite="skip" to mask such samples out of learning'
            )

    def _advantages(self, group: OnPolicyGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bootstrap and GAE over the group's rollout, in the value scale of the env.

        The critic's recorded raw outputs are denormalised (in fp32) with the value statistics they were computed
        with: statistics change only after this point. The last step bootstraps from the critic's value of the
        observations after it; a truncated step from ``final_values`` (:meth:`_record_final_values`), never from the
        next episode's first observation.

        :return: ``(values, advantages, returns)``, each ``(T, G, N, 1)``; advantages standardised per agent.
        """
        cfg, b = group.cfg, group.rollout.tensors
        G, N = group.size, group.rollout.num_envs
        with torch.no_grad(), torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            raw_states = self._stack_states(group, self._next_states) if "states" in b else None
            obs, st = self._model_inputs(group, group.stack(self._next_observations), raw_states)
            rnn = group.recurrent.inputs("value") if group.recurrent is not None else {}  # recurrent
            group.value.enable_training_mode(False)
            last_values, _ = group.act("value", {"observations": obs, "states": st, **rnn})
            group.value.enable_training_mode(True)
        last_values = last_values.float().view(1, G, N, 1)
        if self.cfg.non_finite == "skip":  # a non-finite next observation: no bootstrap from it, no last sample
            finite = torch.isfinite(last_values)
            b["agent_mask"][-1:] &= finite
            last_values = torch.where(finite, last_values, 0.0)
        # the agents along dimension 1 of (T, G, N, 1)
        values = group.preprocess("value", b["values"], agent_dim=1, inverse=True)
        last_values = group.preprocess("value", last_values, agent_dim=1, inverse=True)
        next_values = torch.cat([values[1:], last_values])
        if cfg.time_limit_bootstrap:
            final_values = group.preprocess("value", b["final_values"], agent_dim=1, inverse=True)
            next_values = torch.where(b["truncated"], final_values, next_values)
        advantages, returns = compute_gae(
            rewards=b["rewards"],
            values=values,
            next_values=next_values,
            terminated=b["terminated"],
            truncated=b["truncated"],
            discount_factor=cfg.discount_factor,
            lambda_coefficient=cfg.gae_lambda,
            time_limit_bootstrap=cfg.time_limit_bootstrap,
        )
        # per-agent standardisation over (step, env), unmasked samples only
        return values, normalize_advantages(advantages, b["agent_mask"], dim=(0, 2, 3)), returns

    def _update_statistics(self, group: OnPolicyGroup, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Fold the rollout into the preprocessors' statistics, before the epochs; return the value targets.

        Values: the targets are normalised with statistics refreshed by this rollout's returns (the MAPPO paper's
        code); the clip anchor stays the critic's raw output at collection time (``rollout["values"]``).

        Inputs: the unmasked, finite observations and states, as skrl does (with the whole rollout at once rather than
        mini-batch by mini-batch). The policy then trains on its inputs as the refreshed statistics normalise them,
        while the importance ratio keeps the behaviour policy's log-probabilities, so the first mini-batch's ratio
        holds the change the refresh made, which the clipped objective then limits like any other.

        :return: The returns ``(T, G, N, 1)``, normalised when there is a value preprocessor.
        """
        b = group.rollout.tensors
        if group.value_preprocessor is not identity:
            group.update_statistics("value", returns, mask, agent_dim=1)
            returns = group.preprocess("value", returns, agent_dim=1)
        if group.observation_preprocessor is not identity:
            raw = b["observations"]
            finite = mask & torch.isfinite(raw).all(-1, keepdim=True)
            group.update_statistics("observation", raw, finite, agent_dim=1)
        if "states" in b and group.state_preprocessor is not identity:
            # a shared state counts where any agent of a shared model is alive; for each agent's own, where it is
            raw, state_mask = (
                b["states"],
                mask.any(dim=1, keepdim=True) if group.shared_state and not group.batched else mask,
            )
            finite = state_mask & torch.isfinite(raw).all(-1, keepdim=True)
            group.update_statistics("state", raw, finite, agent_dim=1)
        return returns

    def _training_data(
        self,
        group: OnPolicyGroup,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        advantage_scale: torch.Tensor | None = None,
    ) -> TrainingData:
        """The rollout per agent ``(G, T * N, width)``, inputs preprocessed once with the refreshed statistics;
        the advantages times ``advantage_scale`` ``(T * N, 1)`` when given."""
        b = group.rollout
        per_agent = b.flat
        G, TN = group.size, b.rollouts * b.num_envs
        obs = group.preprocess("observation", per_agent("observations"), agent_dim=0)  # the refreshed statistics
        states = group.preprocess("state", per_agent("states"), agent_dim=0) if "states" in b.tensors else None
        shared_states = None
        if states is not None and states.shape[0] == 1 and not group.id_size and G > 1:
            shared_states, states = states[0], None
        obs, states = self._model_inputs(group, obs, states, preprocess=False)
        floats = {
            "observations": obs.view(G, TN, -1),
            "states": states.view(G, TN, -1) if states is not None else None,
            "actions": per_agent("actions"),
            "log_prob": per_agent("log_prob"),
            "values": per_agent("values"),
            "returns": returns.transpose(0, 1).reshape(G, TN, 1),
            "advantages": advantages.transpose(0, 1).reshape(G, TN, 1),
        }
        if advantage_scale is not None:
            floats["advantages"] = floats["advantages"] * advantage_scale
        flags = {}
        if group.recurrent is not None:  # recurrent: each step's stored hidden states, resets, truncations
            names = [name for name in b.tensors if name.startswith("rnn_") and name != RESET_KEY]
            floats.update({name: per_agent(name) for name in names})
            flags = {RESET_KEY: per_agent(RESET_KEY), "truncated": per_agent("truncated")}
        floats = {k: v for k, v in floats.items() if v is not None}
        mask = b.tensors["agent_mask"]
        masked = group.mask_in_observations or group.masks_seen  # masks: stored and used once a policy had them
        return TrainingData(
            packed=torch.cat([v.float() for v in floats.values()], dim=-1),
            names=list(floats),
            widths=[v.shape[-1] for v in floats.values()],
            mask=None if bool(mask.all()) else per_agent("agent_mask"),
            action_mask=per_agent("action_mask") if masked else None,
            shared_states=shared_states,
            flags=flags,
        )

    def _epochs(self, group: OnPolicyGroup, data: TrainingData) -> tuple[torch.Tensor, int]:
        """``cfg.learning_epochs`` passes over the rollout in mini-batches (early stop on the KL when configured);
        the scheduler steps once per epoch in which the optimiser stepped.

        :return: The summed per-agent statistics ``(6, G)`` and the number of optimiser steps.
        """
        sums = torch.zeros(6, group.size, device=self.device)  # policy, value, entropy loss, kl, clip fraction, std
        updates = 0
        shuffle = group.cfg.mini_batch_order == "shuffled"
        amp = self.scaler.is_enabled()
        for _ in range(group.cfg.learning_epochs):
            epoch_kl, stop, epoch_start = [], False, updates
            steps_before = optimizer_steps(group.optimizer) if amp and group.scheduler is not None else 0
            for indexes in self._mini_batch_indexes(group, shuffle=shuffle):
                kl = self._mini_batch_step(group, data.batch(indexes), sums)
                if kl is None:
                    stop = True
                    break
                epoch_kl.append(kl)
                updates += 1
            # the schedule counts only epochs whose optimiser stepped (a KL stop or grad-scaler skips may leave none)
            stepped = updates > epoch_start and (not amp or optimizer_steps(group.optimizer) > steps_before)
            if group.scheduler is not None and stepped:
                if isinstance(group.scheduler, KLAdaptiveLR):
                    mean_kl = distributed.all_reduce_mean_(torch.stack(epoch_kl).mean()) if epoch_kl else None
                    group.scheduler.step(mean_kl.item() if mean_kl is not None else None)
                else:
                    group.scheduler.step()
            if stop:
                break
        return sums, updates

    def _mini_batch_indexes(self, group: OnPolicyGroup, *, shuffle: bool) -> Iterator[torch.Tensor]:
        """One epoch's mini-batches of sample indexes (of whole sequences for recurrent models)."""
        b = group.rollout
        if group.recurrent is not None and group.recurrent.sequence_length > 1:  # recurrent: whole sequences
            sequences = sequence_indexes(b.rollouts, b.num_envs, group.recurrent.sequence_length, device=self.device)
            return sequence_mini_batch_indexes(sequences, group.mini_batches, shuffle=shuffle)
        return mini_batch_indexes(b.rollouts * b.num_envs, group.mini_batches, device=self.device, shuffle=shuffle)

    def _batch_inputs(self, group: OnPolicyGroup, batch: dict) -> tuple[dict, dict]:
        """The policy's inputs (with the taken actions) and the value's of a mini-batch ``(G, B, ...)``, as model
        rows ``(G * B, width)``: contiguous (models may .view() their inputs), a state expanded to every agent of a
        batched group kept a view (each agent's slice is contiguous)."""
        G = group.size
        B = batch["log_prob"].shape[1]
        obs = batch["observations"].reshape(G * B, -1).contiguous()
        states = batch["states"]
        if states is not None and not (group.batched and states.stride(0) == 0):
            states = states.reshape(G * B, -1).contiguous()
        policy_inputs = {"observations": obs, "states": states}
        if batch["action_mask"] is not None:  # masks
            policy_inputs[ACTION_MASK_KEY] = batch["action_mask"].reshape(G * B, -1).contiguous()
        policy_inputs["taken_actions"] = batch["actions"].reshape(G * B, -1).contiguous()
        value_inputs = {"observations": obs, "states": states}
        if group.recurrent is not None:  # recurrent
            policy_inputs.update(group.recurrent.batch_inputs(batch, "policy"))
            value_inputs.update(group.recurrent.batch_inputs(batch, "value"))
        return policy_inputs, value_inputs

    def _mini_batch_step(self, group: OnPolicyGroup, batch: dict, sums: torch.Tensor) -> torch.Tensor | None:
        """One loss and one optimiser step on a mini-batch ``(G, B, ...)``; adds its per-agent statistics to
        ``sums``.

        :return: The mini-batch's KL over the group, or None when it exceeded ``cfg.kl_threshold``.
        """
        cfg, G = group.cfg, group.size
        B, m = batch["log_prob"].shape[1], batch["mask"]
        policy_inputs, value_inputs = self._batch_inputs(group, batch)
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            # both networks before the loss (one vmapped call for a batched group); the value's output is unused when
            # the KL stops the epoch (the loop only: a batched group has no kl_threshold)
            (_, outputs), (predicted, _) = group.act_many(("policy", policy_inputs), ("value", value_inputs))
            log_prob = outputs["log_prob"].float().view(G, B, 1)
            with torch.no_grad():
                group_kl = masked_mean(approx_kl(log_prob=log_prob, old_log_prob=batch["log_prob"]), m)
            # early stopping: the rank-mean KL of this mini-batch, before its step (one host read, only when on)
            if cfg.kl_threshold and bool(distributed.all_reduce_mean_(group_kl.clone()) > cfg.kl_threshold):
                return None
            entropy = None
            if cfg.entropy_loss_scale:  # skipped when off (skrl's default): no entropy in the graph
                entropy = group.policy.get_entropy(role="policy").float().view(G, B, 1)
            terms = ppo_loss(
                log_prob=log_prob,
                old_log_prob=batch["log_prob"],
                advantages=batch["advantages"],
                values=predicted.float().view(G, B, 1),
                old_values=batch["values"],
                returns=batch["returns"],
                entropy=entropy,
                mask=m,
                per_agent=group.batched,
                **{name: getattr(cfg, name) for name in LOSS_FIELDS},
            )
        loss = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
        self._optimizer_step(group.optimizer, loss, group.trainable, cfg.grad_norm_clip, per_agent=group.batched)
        self.scaler.update()
        with torch.no_grad():
            distribution = group.policy.distribution(role="policy")
            std = torch.zeros(G, device=self.device)
            if isinstance(distribution, torch.distributions.Normal):
                std = distribution.stddev.float().view(G, B, -1).mean(dim=(1, 2))
            stats = ("objective", "critic", "entropy", "kl", "clip_fraction")
            sums += torch.stack([terms[k] for k in stats] + [std]).detach()
        return group_kl

    def _track_update(self, group: OnPolicyGroup, sums: torch.Tensor, updates: int, explained: torch.Tensor) -> None:
        """One host read per update: the mean per-agent losses and statistics of its mini-batches."""
        stats = (sums / max(updates, 1)).tolist()
        explained = explained.tolist()
        learning_rate = group.optimizer.param_groups[0]["lr"]
        normal = isinstance(group.policy.distribution(role="policy"), torch.distributions.Normal)
        for i, uid in enumerate(group.uids):
            self.track_data(f"Loss / Policy loss ({uid})", stats[0][i])
            self.track_data(f"Loss / Value loss ({uid})", stats[1][i])
            if group.cfg.entropy_loss_scale:
                self.track_data(f"Loss / Entropy loss ({uid})", stats[2][i])
            self.track_data(f"Policy / Approx KL ({uid})", stats[3][i])
            self.track_data(f"Policy / Clip fraction ({uid})", stats[4][i])
            if normal:
                self.track_data(f"Policy / Standard deviation ({uid})", stats[5][i])
            self.track_data(f"Value / Explained variance ({uid})", explained[i])
            self.track_data(f"Learning / Learning rate ({uid})", learning_rate)
        self.track_data("Learning / Updates per rollout", updates)


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
