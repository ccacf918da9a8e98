"""The on-policy core shared by MAPPO and IPPO.

MAPPO and IPPO are one algorithm (PPO per agent, Schulman et al. 2017) that differ only in what the critic reads:
the global state (MAPPO, Yu et al. 2022, https://arxiv.org/abs/2103.01955) or the agent's own observation
(IPPO, de Witt et al. 2020, https://arxiv.org/abs/2011.09533). This module runs skrl's multi-agent lifecycle
(``act``, ``record_transition``, ``post_interaction``, ``update``) for both; the math is in
:mod:`skrl_marl_ext.functional`.

Agent groups
------------
Agents whose models dicts hold the *same* policy object and the *same* value object form a group; agents with
models of their own are groups of one. A group of ``G`` agents runs as one batch: ``act`` stacks the agents'
inputs agent-major into ``(G * num_envs, size)`` and calls each model once, the rollout is stored in one
preallocated buffer of shape ``(rollouts, G, num_envs, size)`` per tensor, GAE runs once over it, and each
mini-batch is one loss over all the group's agents with one optimiser step (one optimiser per group).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, Model
from skrl.multi_agents.torch import MultiAgent
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.utils import ScopedTimer
from skrl.utils.spaces.torch import compute_space_size, unflatten_tensorized_space

from skrl_marl_ext import distributed
from skrl_marl_ext.agents.checkpoint import load_checkpoint
from skrl_marl_ext.agents.common import (
    broadcast_modules,
    group_agents,
    identity,
    make_grad_scaler,
    make_preprocessor,
    stack_agents,
)
from skrl_marl_ext.agents.config import build_cfg
from skrl_marl_ext.agents.on_policy_cfg import OnPolicyCfg
from skrl_marl_ext.agents.validation import check_agent_inputs, check_policy_family, dry_run
from skrl_marl_ext.functional import (
    approx_kl,
    clip_fraction,
    clipped_surrogate_loss,
    compute_gae,
    explained_variance,
    masked_mean,
    normalize_advantages,
    value_loss,
)
from skrl_marl_ext.keys import (
    ACTION_MASK_KEY,
    AGENT_MASK_KEY,
    FINAL_OBSERVATIONS_KEY,
    FINAL_STATES_KEY,
    MEAN_ACTIONS_KEY,
)
from skrl_marl_ext.models.agent_id import append_agent_id
from skrl_marl_ext.models.masked_categorical import MaskedCategoricalMixin
from skrl_marl_ext.preprocessors import update_statistics

# per-agent config fields whose values must agree within a group (they shape one loss and one optimiser step)
_GROUP_FIELDS = (
    "learning_epochs",
    "mini_batches",
    "discount_factor",
    "gae_lambda",
    "learning_rate",
    "learning_rate_scheduler",
    "learning_rate_scheduler_kwargs",
    "observation_preprocessor",
    "observation_preprocessor_kwargs",
    "state_preprocessor",
    "state_preprocessor_kwargs",
    "value_preprocessor",
    "value_preprocessor_kwargs",
    "grad_norm_clip",
    "ratio_clip",
    "value_clip",
    "entropy_loss_scale",
    "value_loss_scale",
    "kl_threshold",
    "time_limit_bootstrap",
    "huber_delta",
)


@dataclasses.dataclass(eq=False)
class AgentGroup:
    """Agents that share one policy and one value model and run as one batch."""

    uids: list[str]
    """Agent names, in ``possible_agents`` order (the order of the stacked dimension)."""
    policy: Model
    value: Model
    observation_space: gymnasium.Space
    state_space: gymnasium.Space | None
    action_space: gymnasium.Space
    cfg: dict[str, Any]
    """The group's value of every per-agent config field."""
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    observation_preprocessor: Callable = identity
    state_preprocessor: Callable = identity
    value_preprocessor: Callable = identity
    parameters: list[torch.nn.Parameter] = dataclasses.field(default_factory=list)
    buffers: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    shared_state: bool = False
    """Whether every agent of the group receives the very same state tensor (stored once, not G times)."""
    mask_in_observations: bool = False
    """Whether the action mask is the ``"action_mask"`` entry of a Dict observation space."""
    masks_seen: bool = False
    """Whether an action mask has been given to this group's policy (then it is stored and used in the update)."""
    mini_batches: int = 0
    """Mini-batches per epoch: ``cfg["mini_batches"]``, at most the samples per agent of a rollout (0: not known)."""

    @property
    def size(self) -> int:
        return len(self.uids)

    @property
    def id_size(self) -> int:
        """Number of one-hot agent-id entries appended to the model inputs (0 when off or for a group of one)."""
        return self.size if self.cfg["agent_id_input"] and self.size > 1 else 0


class OnPolicyAgent(MultiAgent):
    """Base of :class:`~skrl_marl_ext.MAPPO` and :class:`~skrl_marl_ext.IPPO` (see the module docstring)."""

    cfg_class: type = OnPolicyCfg
    requires_states: bool = True
    """Whether the agent refuses to be built without ``state_spaces`` (MAPPO's centralised critic). Both agents feed
    the models the same inputs, as skrl 2.1.1 does: the agent's observation under ``inputs["observations"]`` and the
    env's state under ``inputs["states"]``; what a model reads is the model's choice."""

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
        cfg: OnPolicyCfg | dict | None = None,
    ) -> None:
        name = type(self).__name__
        cfg = build_cfg(self.cfg_class, cfg, owner=name)
        cfg.validate(owner=name)
        check_agent_inputs(
            owner=name,
            possible_agents=possible_agents,
            models=models,
            roles=("policy", "value"),
            observation_spaces=observation_spaces,
            state_spaces=state_spaces,
            action_spaces=action_spaces,
            need_states=self.requires_states,
        )
        super().__init__(
            possible_agents=list(possible_agents),
            models=models,
            memories=memories,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces if state_spaces is not None else {uid: None for uid in possible_agents},
            action_spaces=action_spaces,
            device=device,
            cfg=cfg,
        )
        self.cfg: OnPolicyCfg
        self._device_type = torch.device(self.device).type
        self._check_memories()

        self.policies = {uid: self.models[uid]["policy"] for uid in self.possible_agents}
        self.values = {uid: self.models[uid]["value"] for uid in self.possible_agents}
        self.groups = self._build_groups()
        self.group_of = {uid: group for group in self.groups for uid in group.uids}

        self._non_finite_skipped = torch.zeros((), dtype=torch.long, device=self.device)
        # one grad scaler for all groups: each group's step is a complete unscale/step/update iteration
        self.scaler = make_grad_scaler(self._device_type, self.cfg.mixed_precision)

        for group in self.groups:
            self._set_up_group(group)
            if self._num_envs_hint is not None:
                self._set_mini_batches(group, self._num_envs_hint)

        # models start identical on every rank of a distributed run
        broadcast_modules([m for group in self.groups for m in (group.policy, group.value)])

        self._rollout_step = 0
        self._next_observations: dict[str, torch.Tensor] | None = None
        self._next_states: dict[str, torch.Tensor] | None = None
        self._infos_action_masks: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------ construction

    def _check_memories(self) -> None:
        """Memories are optional: the rollout lives in one buffer per group. Given ones must fit the rollout."""
        self._num_envs_hint = None
        if not self.memories:
            self.memories = None
            return
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
        self._num_envs_hint = next(iter(sizes.values()))

    def _set_mini_batches(self, group: AgentGroup, num_envs: int) -> None:
        """Fix the group's mini-batches per epoch once ``num_envs`` is known: ``cfg.mini_batches``, or the number of
        samples per agent of a rollout when that is smaller (with a warning; skrl 2.1.1 then splits the rollout into
        empty mini-batches, whose mean loss is NaN, and trains on it)."""
        if group.mini_batches:
            return
        requested, samples = group.cfg["mini_batches"], self.cfg.rollouts * num_envs
        group.mini_batches = min(requested, samples)
        if requested > samples:
            warnings.warn(
                f"{type(self).__name__}: cfg.mini_batches ({requested}) for agents {group.uids} is larger than the "
                f"{samples} samples per agent a rollout gives (rollouts {self.cfg.rollouts} x num_envs {num_envs}); "
                f"using {samples} mini-batches of one sample. skrl 2.1.1 would add empty mini-batches, whose loss is "
                "NaN. Lower mini_batches or raise rollouts to silence this",
                stacklevel=3,
            )

    def _build_groups(self) -> list[AgentGroup]:
        groups = []
        for uids in group_agents(
            owner=type(self).__name__,
            possible_agents=self.possible_agents,
            models=self.models,
            roles=("policy", "value"),
            spaces={"observation": self.observation_spaces, "action": self.action_spaces, "state": self.state_spaces},
            cfg=self.cfg,
            group_fields=_GROUP_FIELDS,
        ):
            first = uids[0]
            group_cfg = {f.name: self.cfg.value_for(f.name, first) for f in dataclasses.fields(self.cfg)}
            groups.append(
                AgentGroup(
                    uids=uids,
                    policy=self.policies[first],
                    value=self.values[first],
                    observation_space=self.observation_spaces[first],
                    state_space=self.state_spaces[first],
                    action_space=self.action_spaces[first],
                    cfg=group_cfg,
                )
            )
        return groups

    def _make_preprocessor(self, cls: type | None, kwargs: dict, size: Any) -> Callable:
        return make_preprocessor(cls, kwargs, size=size, device=self.device)

    def _set_up_group(self, group: AgentGroup) -> None:
        name = type(self).__name__
        cfg = group.cfg
        policy, value = group.policy, group.value
        check_policy_family(owner=name, uids=group.uids, policy=policy, action_space=group.action_space)
        group.mask_in_observations = isinstance(group.observation_space, gymnasium.spaces.Dict) and (
            ACTION_MASK_KEY in group.observation_space.spaces
        )
        if group.mask_in_observations:
            self._require_masked_policy(group)

        # optimiser: one per group, the policy and the value model as two parameter groups
        policy_lr, value_lr = cfg["learning_rate"]
        policy_params = list(policy.parameters())
        seen = {id(p) for p in policy_params}
        value_params = [p for p in value.parameters() if id(p) not in seen]  # a model in both roles counts once
        param_groups = [{"params": policy_params, "lr": policy_lr}]
        if value_params:
            param_groups.append({"params": value_params, "lr": value_lr})
        group.parameters = [p for g in param_groups for p in g["params"]]
        # foreach: one multi-tensor kernel per step instead of a Python loop over the parameters (CPU's default)
        group.optimizer = torch.optim.Adam(param_groups, foreach=True)
        if cfg["learning_rate_scheduler"]:
            group.scheduler = cfg["learning_rate_scheduler"](group.optimizer, **cfg["learning_rate_scheduler_kwargs"])

        group.observation_preprocessor = self._make_preprocessor(
            cfg["observation_preprocessor"], cfg["observation_preprocessor_kwargs"], group.observation_space
        )
        if cfg["state_preprocessor"] and group.state_space is None:
            # skrl accepts it (its preprocessor then passes None through): accepted, and said
            warnings.warn(
                f"{name}: cfg.state_preprocessor is set but agents {group.uids} have no state space, so it has "
                "nothing to preprocess and is not used; pass state_spaces=env.state_spaces or remove it",
                stacklevel=3,
            )
        else:
            group.state_preprocessor = self._make_preprocessor(
                cfg["state_preprocessor"], cfg["state_preprocessor_kwargs"], group.state_space
            )
        group.value_preprocessor = self._make_preprocessor(
            cfg["value_preprocessor"], cfg["value_preprocessor_kwargs"], 1
        )

        zeros = self._zero_inputs(group)
        dry_run(
            owner=name,
            uids=group.uids,
            policy=policy,
            value=value,
            policy_inputs=self._policy_inputs(group, *zeros),
            value_inputs=self._value_inputs(group, *zeros),
            action_space=group.action_space,
            device=self.device,
        )

        for uid in group.uids:
            modules = self.checkpoint_modules[uid]
            modules["policy"] = policy
            modules["value"] = value
            modules["optimizer"] = group.optimizer
            if group.scheduler is not None:
                modules["scheduler"] = group.scheduler
            for key in ("observation_preprocessor", "state_preprocessor", "value_preprocessor"):
                module = getattr(group, key)
                if module is not identity:
                    modules[key] = module
            modules["scaler"] = self.scaler

    def _zero_inputs(self, group: AgentGroup, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor | None]:
        rows = group.size * batch
        obs = torch.zeros(rows, compute_space_size(group.observation_space, occupied_size=True), device=self.device)
        states = None
        if group.state_space is not None:
            states = torch.zeros(rows, compute_space_size(group.state_space, occupied_size=True), device=self.device)
        if group.id_size:
            obs = append_agent_id(obs, group.size)
            states = append_agent_id(states, group.size) if states is not None else None
        return obs, states

    def _require_masked_policy(self, group: AgentGroup) -> None:
        if not isinstance(group.policy, MaskedCategoricalMixin):
            raise ValueError(
                f"{type(self).__name__}: agents {group.uids} receive action masks but their policy "
                f"({type(group.policy).__name__}) ignores them and would sample invalid actions; build the policy "
                "with skrl_marl_ext.models.MaskedCategoricalMixin instead of CategoricalMixin"
            )

    # ------------------------------------------------------------------ inputs

    def _policy_inputs(
        self, group: AgentGroup, observations: torch.Tensor, states: torch.Tensor | None, action_mask=None
    ) -> dict[str, Any]:
        inputs = {"observations": observations, "states": states}
        if action_mask is not None:
            inputs[ACTION_MASK_KEY] = action_mask
        return inputs

    def _value_inputs(
        self, group: AgentGroup, observations: torch.Tensor, states: torch.Tensor | None
    ) -> dict[str, Any]:
        return {"observations": observations, "states": states}

    _stack = staticmethod(stack_agents)

    def _normalize(self, group: AgentGroup, raw_obs: torch.Tensor, raw_states: torch.Tensor | None):
        """Stacked raw inputs ``(G, n, size)`` (states: ``(1, n, size)`` when shared) through the group's
        preprocessors, with the statistics as they are now; same shapes."""
        obs = group.observation_preprocessor(raw_obs.reshape(-1, raw_obs.shape[-1])).view(raw_obs.shape)
        states = None
        if raw_states is not None:
            states = group.state_preprocessor(raw_states.reshape(-1, raw_states.shape[-1])).view(raw_states.shape)
        return obs, states

    def _model_rows(self, group: AgentGroup, obs: torch.Tensor, states: torch.Tensor | None):
        """Preprocessed ``(G, n, size)`` inputs (states ``(1, n, size)`` when shared) as agent-major model rows
        ``(G * n, size [+ G])``: a shared state repeated per agent, one-hot agent ids appended when configured."""
        G = group.size
        obs = obs.reshape(-1, obs.shape[-1])
        if states is not None:
            if states.shape[0] != G:  # one state shared by the whole group
                states = states.expand(G, *states.shape[1:])
            states = states.reshape(-1, states.shape[-1])
        if group.id_size:
            obs = append_agent_id(obs, G)
            states = append_agent_id(states, G) if states is not None else None
        return obs, states

    def _preprocess(self, group: AgentGroup, raw_obs: torch.Tensor, raw_states: torch.Tensor | None):
        """Preprocess stacked raw inputs ``(G, n, size)`` into agent-major model rows ``(G * n, size [+ G])``."""
        return self._model_rows(group, *self._normalize(group, raw_obs, raw_states))

    def _action_mask(self, group: AgentGroup, raw_obs: torch.Tensor) -> torch.Tensor | None:
        """Action mask ``(G * n, num_actions)`` from a Dict observation space or from the last step's infos."""
        if group.mask_in_observations:
            flat = raw_obs.reshape(-1, raw_obs.shape[-1])
            return unflatten_tensorized_space(group.observation_space, flat)[ACTION_MASK_KEY].bool()
        masks = self._infos_action_masks
        if masks and any(uid in masks for uid in group.uids):
            if not group.masks_seen:
                self._require_masked_policy(group)
                group.masks_seen = True
            n = raw_obs.shape[1]
            full = torch.ones(n, group.action_space.n, dtype=torch.bool, device=self.device)
            return torch.stack([masks.get(uid, full).bool().reshape(n, -1) for uid in group.uids]).reshape(
                group.size * n, -1
            )
        return None

    # ------------------------------------------------------------------ rollout storage

    def _allocate(self, group: AgentGroup, observations, states) -> None:
        name = type(self).__name__
        first = next(observations[uid] for uid in group.uids if uid in observations)
        num_envs = first.shape[0]
        if self.memories is not None and self.memories[group.uids[0]].num_envs != num_envs:
            raise ValueError(
                f"{name}: memories['{group.uids[0]}'] was created with num_envs="
                f"{self.memories[group.uids[0]].num_envs} but the env gives {num_envs} observations per step; "
                f"create RandomMemory(memory_size={self.cfg.rollouts}, num_envs=env.num_envs)"
            )
        T, G = self.cfg.rollouts, group.size
        self._set_mini_batches(group, num_envs)
        state_tensors = [states.get(uid) for uid in group.uids] if isinstance(states, dict) else []
        has_states = bool(state_tensors) and state_tensors[0] is not None
        if self.requires_states and not has_states:
            raise ValueError(
                f"{name}: the env gave no states for agents {group.uids} but the centralised critic reads them; "
                "use an env with a global state (env.state()) or IPPO"
            )
        group.shared_state = has_states and all(s is state_tensors[0] for s in state_tensors)

        def size(space):
            return compute_space_size(space, occupied_size=True)

        specs = {
            "observations": (G, first.shape[-1], torch.float32),
            "actions": (G, size(group.action_space), torch.float32),
            "log_prob": (G, 1, torch.float32),
            "values": (G, 1, torch.float32),
            "rewards": (G, 1, torch.float32),
            "terminated": (G, 1, torch.bool),
            "truncated": (G, 1, torch.bool),
            "agent_mask": (G, 1, torch.bool),
        }
        if has_states:
            specs["states"] = (1 if group.shared_state else G, state_tensors[0].shape[-1], torch.float32)
        if group.cfg["time_limit_bootstrap"]:
            specs["final_values"] = (G, 1, torch.float32)  # V(final observation), or V(s_t), of the step's episode
        if isinstance(group.action_space, gymnasium.spaces.Discrete):
            specs["action_mask"] = (G, int(group.action_space.n), torch.bool)
        group.buffers = {
            key: torch.zeros(T, rows, num_envs, width, dtype=dtype, device=self.device)
            for key, (rows, width, dtype) in specs.items()
        }

    def init(self, *, trainer_cfg: Any = None) -> None:
        """Initialise the agent (skrl's contract; called by the trainers).

        Only rank 0 of a distributed run writes TensorBoard data and checkpoints.

        :param trainer_cfg: Trainer configuration (a dataclass).
        """
        if distributed.rank() > 0:
            self.write_interval = 0
            self.checkpoint_interval = 0
        super().init(trainer_cfg=trainer_cfg)
        self.enable_models_training_mode(False)

    # ------------------------------------------------------------------ skrl lifecycle

    def act(
        self,
        observations: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor | None] | None,
        *,
        timestep: int,
        timesteps: int,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Sample actions for every agent, one forward pass per group.

        :param observations: ``{agent: (num_envs, obs_size)}``; agents absent from the dict get no action.
        :param states: ``{agent: (num_envs, state_size) or None}`` (skrl's wrappers give one tensor to all agents).
        :param timestep: Current timestep.
        :param timesteps: Number of timesteps.

        :return: ``(actions, outputs)``: ``actions[agent]`` of shape ``(num_envs, action_size)``, ``outputs[agent]``
            the policy's outputs for that agent (``log_prob``, ``mean_actions``, ...). In evaluation mode
            ``outputs["mean_actions"]`` also holds ``{agent: deterministic actions}`` for skrl's trainers.
        """
        actions, outputs = {}, {}
        greedy = {}
        with torch.no_grad():
            for group in self.groups:
                present = [uid for uid in group.uids if uid in observations]
                if not present:
                    continue
                if self.training and not group.buffers:
                    self._allocate(group, observations, states)
                buffers = group.buffers if self.training else {}
                t = self._rollout_step
                raw_obs = self._stack(observations, group.uids)
                raw_states = self._stack_states(group, states) if (not buffers or "states" in buffers) else None
                # the inputs as the models see them, normalised with the statistics of this step: stored, so the
                # update re-evaluates exactly what acted (the statistics move on in record_transition)
                norm_obs, norm_states = self._normalize(group, raw_obs, raw_states)
                if buffers:
                    buffers["observations"][t].copy_(norm_obs)
                    if norm_states is not None:
                        buffers["states"][t].copy_(norm_states)
                obs, st = self._model_rows(group, norm_obs, norm_states)
                action_mask = self._action_mask(group, raw_obs)
                if buffers and "action_mask" in buffers:
                    target = buffers["action_mask"][t]
                    if action_mask is None:
                        target.fill_(True)
                    else:
                        target.copy_(action_mask.view(target.shape))

                with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
                    group_actions, group_outputs = group.policy.act(
                        self._policy_inputs(group, obs, st, action_mask), role="policy"
                    )
                    if buffers:
                        # the critic's own output (normalised space under a value preprocessor), kept in fp32: it is
                        # the value-clip anchor, and is denormalised in fp32 with these statistics at the update
                        values, _ = group.value.act(self._value_inputs(group, obs, st), role="value")
                        buffers["values"][t].copy_(values.float().view(buffers["values"][t].shape))
                        buffers["log_prob"][t].copy_(group_outputs["log_prob"].view(buffers["log_prob"][t].shape))

                G, n = group.size, raw_obs.shape[1]
                if not buffers:
                    deterministic = self._deterministic_actions(group, group_actions, group_outputs)
                for i, uid in enumerate(group.uids):
                    if uid not in observations:
                        continue
                    actions[uid] = group_actions.view(G, n, -1)[i]
                    outputs[uid] = {
                        k: (v.view(G, n, *v.shape[1:])[i] if torch.is_tensor(v) and v.shape[:1] == (G * n,) else v)
                        for k, v in group_outputs.items()
                    }
                    if not buffers:
                        greedy[uid] = deterministic.view(G, n, -1)[i]
        if not self.training:
            outputs[MEAN_ACTIONS_KEY] = greedy
        return actions, outputs

    def _stack_states(self, group: AgentGroup, states: Any) -> torch.Tensor | None:
        """The group's states ``(G, n, size)``, or ``(1, n, size)`` when the env gives the group one shared tensor."""
        if not isinstance(states, dict):
            return None
        if group.shared_state:
            if any(states.get(u) is not states[group.uids[0]] for u in group.uids):
                raise ValueError(
                    f"{type(self).__name__}: the env gave agents {group.uids} one shared state tensor at the "
                    "first step and different ones now; an env must do one or the other"
                )
            return self._stack({group.uids[0]: states[group.uids[0]]}, group.uids[:1])
        return self._stack(states, group.uids)

    @staticmethod
    def _deterministic_actions(group: AgentGroup, actions: torch.Tensor, outputs: dict) -> torch.Tensor:
        if "mean_actions" in outputs:
            return outputs["mean_actions"]
        if isinstance(group.policy, CategoricalMixin) and "net_output" in outputs:
            return outputs["net_output"].argmax(dim=-1, keepdim=True)
        return actions

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
        """Store one transition of every agent (one stacked write per tensor per group).

        ``infos["agent_mask"]`` and ``infos["action_mask"]`` (``{agent: tensor}``) are read when present; see
        :data:`AGENT_MASK_KEY` and :class:`~skrl_marl_ext.models.MaskedCategoricalMixin`.
        """
        super().record_transition(
            observations=observations,
            states=states,
            actions=actions,
            rewards=rewards,
            next_observations=next_observations,
            next_states=next_states,
            terminated=terminated,
            truncated=truncated,
            infos=infos,
            timestep=timestep,
            timesteps=timesteps,
        )
        infos = infos if isinstance(infos, dict) else {}
        action_masks = infos.get(ACTION_MASK_KEY)
        self._infos_action_masks = action_masks if isinstance(action_masks, dict) else None
        if not self.training:
            return
        self._next_observations, self._next_states = next_observations, next_states
        agent_masks = infos.get(AGENT_MASK_KEY)
        agent_masks = agent_masks if isinstance(agent_masks, dict) else {}
        t = self._rollout_step
        for group in self.groups:
            if not group.buffers:
                continue
            buffers = group.buffers
            self._stack(actions, group.uids, buffers["actions"][t])
            self._stack(rewards, group.uids, buffers["rewards"][t])
            if self.cfg.rewards_shaper is not None:
                buffers["rewards"][t] = self.cfg.rewards_shaper(buffers["rewards"][t], timestep, timesteps)
            self._stack(terminated, group.uids, buffers["terminated"][t])
            self._stack(truncated, group.uids, buffers["truncated"][t])
            if "final_values" in buffers:
                self._record_final_values(group, t, infos)
            mask = buffers["agent_mask"][t]
            if any(uid not in observations for uid in group.uids) or any(uid in agent_masks for uid in group.uids):
                for i, uid in enumerate(group.uids):
                    if uid not in observations:
                        mask[i].fill_(False)
                    elif uid in agent_masks:
                        mask[i].copy_(agent_masks[uid].reshape(mask[i].shape))
                    else:
                        mask[i].fill_(True)
            else:
                mask.fill_(True)
            self._update_input_statistics(group, observations, states, mask)

    def _record_final_values(self, group: AgentGroup, t: int, infos: dict) -> None:
        """Store the value the time-limit bootstrap of step ``t`` uses (read only where the step was truncated).

        ``V(final observation)`` where the env handed the episode's final observation (and final state, when the group
        has states) in ``infos``; otherwise ``V(s_t)``, the value of the truncated step itself (rsl_rl's
        approximation). The next observation cannot be used: an env that resets in place returns the next episode's
        first observation there. The critic's raw output is stored, as for ``values``.
        """
        b = group.buffers
        target = b["final_values"][t]
        target.copy_(b["values"][t])
        finals = infos.get(FINAL_OBSERVATIONS_KEY)
        final_states = infos.get(FINAL_STATES_KEY)
        if not isinstance(finals, dict) or any(finals.get(uid) is None for uid in group.uids):
            return
        raw_states = None
        if "states" in b:
            if not isinstance(final_states, dict) or final_states.get(group.uids[0]) is None:
                return  # an observation without its state: keep V(s_t)
            uids = group.uids[:1] if group.shared_state else group.uids
            raw_states = self._stack(final_states, uids)
        raw_obs = self._stack(finals, group.uids)
        with torch.no_grad(), torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            obs, st = self._preprocess(group, raw_obs, raw_states)
            final_values, _ = group.value.act(self._value_inputs(group, obs, st), role="value")
        ended = b["terminated"][t] | b["truncated"][t]
        target.copy_(torch.where(ended, final_values.float().view(target.shape), target))

    def pre_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Nothing to do before the environment step."""

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Advance the rollout; at its end update every group. Then skrl's tracking and checkpoints."""
        if self.training:
            self._rollout_step += 1
            if self._rollout_step == self.cfg.rollouts:
                self._rollout_step = 0
                with ScopedTimer() as timer:
                    self._check_finite(self.groups)
                    self.enable_models_training_mode(True)
                    for group in self.groups:
                        self._update_group(group, timestep=timestep, timesteps=timesteps)
                    self.enable_models_training_mode(False)
                self.track_data("Stats / Algorithm update time (ms)", timer.elapsed_time_ms)
                if self.cfg.non_finite == "skip":
                    self.track_data("Stats / Non-finite samples skipped", float(self._non_finite_skipped))
        super().post_interaction(timestep=timestep, timesteps=timesteps)

    def update(self, *, timestep: int, timesteps: int, uid: str) -> None:
        """Update the group that agent ``uid`` belongs to (skrl's per-agent entry point).

        The agent calls this itself at the end of each rollout; agents of one group are updated together.
        """
        self._check_finite([self.group_of[uid]])
        self._update_group(self.group_of[uid], timestep=timestep, timesteps=timesteps)

    def load(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save`, refusing one of other agents or other model shapes.

        :param path: Path of the checkpoint file.
        """
        load_checkpoint(self, path)

    # ------------------------------------------------------------------ update

    def _check_finite(self, groups: list[AgentGroup]) -> None:
        """NaN/inf in the rollout: an error naming the agent, the tensor and the step (default), or, with
        ``cfg.non_finite="skip"``, the affected samples are zeroed and masked out of every loss and statistic.

        One host sync per update (raise) or none (skip). The error names the earliest step over all groups, inputs
        before what was computed from them (a NaN observation makes the action and, through the env, the team's
        rewards non-finite too).
        """
        keys = ("observations", "states", "rewards", "actions", "log_prob", "values", "final_values")
        bad = [
            {key: ~torch.isfinite(group.buffers[key]).all(dim=-1) for key in keys if key in group.buffers}
            for group in groups
        ]  # per group: (T, rows, N); states may have 1 row
        if self.cfg.non_finite == "skip":
            for group, flags_of in zip(groups, bad, strict=True):
                b = group.buffers
                rows = torch.zeros_like(b["agent_mask"][..., 0])  # (T, G, N)
                for key, flags in flags_of.items():
                    rows |= flags.expand_as(rows)
                    b[key].nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                b["agent_mask"] &= ~rows.unsqueeze(-1)
                self._non_finite_skipped += rows.sum()
            return
        if not bool(torch.stack([v.any() for flags_of in bad for v in flags_of.values()]).any()):
            return
        offences = []
        for group, flags_of in zip(groups, bad, strict=True):
            for order, (key, flags) in enumerate(flags_of.items()):
                if flags.any():
                    step, row, env = (int(i) for i in flags.nonzero()[0])
                    who = "all agents" if key == "states" and group.shared_state else f"agent '{group.uids[row]}'"
                    offences.append((step, order, key, who, env))
        step, _, key, who, env = min(offences)
        raise ValueError(
            f"{type(self).__name__}: non-finite {key} (NaN or inf) for {who} at step {step} of the rollout, env {env}; "
            "refusing to learn from them. Fix the env, shape the rewards with cfg.rewards_shaper, or set "
            'cfg.non_finite="skip" to mask such samples out of learning'
        )

    def _last_values(self, group: AgentGroup) -> torch.Tensor:
        """The critic's raw output for the observations after the rollout's last step, ``(1, G, N, 1)`` fp32."""
        b = group.buffers
        G, N = b["rewards"].shape[1:3]
        with torch.no_grad(), torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            raw_obs = self._stack(self._next_observations, group.uids)
            raw_states = None
            if "states" in b:
                raw_states = self._stack(self._next_states, group.uids[:1] if group.shared_state else group.uids)
            obs, st = self._preprocess(group, raw_obs, raw_states)
            group.value.enable_training_mode(False)
            last_values, _ = group.value.act(self._value_inputs(group, obs, st), role="value")
            group.value.enable_training_mode(True)
        last_values = last_values.float().view(1, G, N, 1)
        if self.cfg.non_finite == "skip":  # a non-finite next observation: no bootstrap from it, no last sample
            finite = torch.isfinite(last_values)
            b["agent_mask"][-1:] &= finite
            last_values = torch.where(finite, last_values, 0.0)
        return last_values

    def _advantages(self, group: AgentGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """GAE over the group's rollout, in the value scale of the env.

        The critic's stored raw outputs are denormalised (in fp32) with the value statistics they were computed with:
        statistics change only after this point. A truncated step bootstraps from ``final_values`` (see
        :meth:`_record_final_values`), never from the next episode's first observation.

        :return: ``(values, advantages, returns)``, each ``(T, G, N, 1)``; advantages standardised per agent.
        """
        cfg, b = group.cfg, group.buffers
        denormalize = group.value_preprocessor
        values = denormalize(b["values"], inverse=True)
        next_values = torch.cat([values[1:], denormalize(self._last_values(group), inverse=True)])
        if cfg["time_limit_bootstrap"]:
            next_values = torch.where(b["truncated"], denormalize(b["final_values"], inverse=True), next_values)
        advantages, returns = compute_gae(
            rewards=b["rewards"],
            values=values,
            next_values=next_values,
            terminated=b["terminated"],
            truncated=b["truncated"],
            discount_factor=cfg["discount_factor"],
            lambda_coefficient=cfg["gae_lambda"],
            time_limit_bootstrap=cfg["time_limit_bootstrap"],
        )
        # per-agent standardisation over (step, env), unmasked samples only
        return values, normalize_advantages(advantages, b["agent_mask"], dim=(0, 2, 3)), returns

    def _update_input_statistics(self, group: AgentGroup, observations: dict, states: Any, mask: torch.Tensor) -> None:
        """Fold one step's observations and states (rows where ``mask`` (G, N, 1) is True, finite ones only) into their
        preprocessors' statistics.

        Once per env step, after the step's inputs were normalised, used and stored: the policy keeps pace with its
        statistics (as rsl_rl's normaliser does), and the update re-evaluates the stored normalised inputs, so its
        first mini-batch has probability ratio exactly 1. (skrl 2.1.1 refreshes them with the whole rollout during
        the first epoch: the next rollout acts on inputs the policy was trained on, but its first mini-batch is
        already off-policy.)
        """
        if group.observation_preprocessor is not identity:
            raw = self._stack(observations, group.uids)
            update_statistics(group.observation_preprocessor, raw, mask & torch.isfinite(raw).all(-1, keepdim=True))
        if group.state_preprocessor is not identity and "states" in group.buffers:
            raw = self._stack_states(group, states)
            state_mask = mask.any(dim=0, keepdim=True) if group.shared_state else mask
            update_statistics(group.state_preprocessor, raw, state_mask & torch.isfinite(raw).all(-1, keepdim=True))

    def _update_group(self, group: AgentGroup, *, timestep: int, timesteps: int) -> None:
        cfg, b = group.cfg, group.buffers
        policy, value = group.policy, group.value
        T, G, N = b["rewards"].shape[:3]

        values, advantages, returns = self._advantages(group)
        mask = b["agent_mask"]
        explained = explained_variance(values=values, returns=returns, mask=mask, dim=(0, 2, 3))
        # value targets: normalised with statistics refreshed by this rollout's returns (the MAPPO paper's code); the
        # clip anchor stays the critic's raw output at collection time (b["values"])
        if group.value_preprocessor is not identity:
            update_statistics(group.value_preprocessor, returns, mask)
            returns = group.value_preprocessor(returns)

        # the whole rollout, preprocessed once, as (G, T * N, size); then mini-batches index dim 1
        def per_agent(x: torch.Tensor) -> torch.Tensor:
            return x.transpose(0, 1).reshape(x.shape[1], T * N, x.shape[-1])

        # a state shared by the whole group (and no agent id appended to it) stays one (T * N, size) tensor; each
        # mini-batch gathers its rows once and broadcasts them to the G agents (no G-fold copy of the rollout)
        shared_states = None
        if "states" in b and group.shared_state and not group.id_size and G > 1:
            shared_states = per_agent(b["states"]).reshape(T * N, -1)
        obs, st = self._model_rows(
            group,
            per_agent(b["observations"]),
            per_agent(b["states"]) if "states" in b and shared_states is None else None,
        )
        # the float tensors are packed into one (G, T * N, width) tensor: one gather per mini-batch, not eight
        floats = {
            "observations": obs.view(G, T * N, -1),
            "states": st.view(G, T * N, -1) if st is not None else None,
            "actions": per_agent(b["actions"]),
            "log_prob": per_agent(b["log_prob"]),
            "values": per_agent(b["values"]),
            "returns": per_agent(returns),
            "advantages": per_agent(advantages),
        }
        floats = {k: v for k, v in floats.items() if v is not None}
        packed = torch.cat([v.float() for v in floats.values()], dim=-1)
        widths = [v.shape[-1] for v in floats.values()]
        # without masked transitions (the common case) every mean is a plain mean: no mask in the loss graph
        data = {"mask": None if bool(mask.all()) else per_agent(mask)}
        if group.mask_in_observations or group.masks_seen:
            data["action_mask"] = per_agent(b["action_mask"])

        sums = torch.zeros(6, G, device=self.device)  # policy, value, entropy loss, kl, clip fraction, std
        kl_threshold = cfg["kl_threshold"]
        updates = 0
        stop = False
        for _ in range(cfg["learning_epochs"]):
            epoch_kl = []
            # np.array_split's sizes, as skrl's memories split (chunk() may give fewer mini-batches)
            for indexes in torch.tensor_split(torch.randperm(T * N, device=self.device), group.mini_batches):
                batch = {k: (v[:, indexes] if v is not None else None) for k, v in data.items()}
                batch.update(zip(floats, packed[:, indexes].split(widths, dim=-1), strict=True))
                if shared_states is not None:
                    batch["states"] = shared_states[indexes].unsqueeze(0).expand(G, -1, -1)
                batch.setdefault("states", None)
                B = indexes.shape[0]

                def rows(x, n=G * B):  # contiguous: models may .view() their inputs
                    return x.reshape(n, x.shape[-1]).contiguous() if x is not None else None

                m = batch["mask"]
                obs_rows, state_rows = rows(batch["observations"]), rows(batch["states"])  # one copy, two models
                with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
                    inputs = self._policy_inputs(group, obs_rows, state_rows, rows(batch.get("action_mask")))
                    inputs["taken_actions"] = rows(batch["actions"])
                    _, outputs = policy.act(inputs, role="policy")
                    log_prob = outputs["log_prob"].float().view(G, B, 1)

                    with torch.no_grad():
                        kl_elements = approx_kl(log_prob=log_prob, old_log_prob=batch["log_prob"])
                        kl = masked_mean(kl_elements, m, dim=(1, 2))
                        group_kl = masked_mean(kl_elements, m)
                        epoch_kl.append(group_kl)
                    # early stopping: the rank-mean KL of this mini-batch, before its step (one sync, only when on)
                    if kl_threshold and bool(distributed.all_reduce_mean_(group_kl.clone()) > kl_threshold):
                        stop = True
                        break

                    surrogate = clipped_surrogate_loss(
                        log_prob=log_prob,
                        old_log_prob=batch["log_prob"],
                        advantages=batch["advantages"],
                        ratio_clip=cfg["ratio_clip"],
                    )
                    entropy = None
                    if cfg["entropy_loss_scale"]:  # skipped when off (skrl's default): no entropy in the graph
                        entropy = policy.get_entropy(role="policy").float().view(G, B, 1)
                    predicted, _ = value.act(self._value_inputs(group, obs_rows, state_rows), role="value")
                    critic = value_loss(
                        predicted_values=predicted.float().view(G, B, 1),
                        old_values=batch["values"],
                        returns=batch["returns"],
                        value_clip=cfg["value_clip"],
                        huber_delta=cfg["huber_delta"],
                    )
                    policy_loss = masked_mean(surrogate, m)
                    value_loss_ = cfg["value_loss_scale"] * masked_mean(critic, m)
                    loss = policy_loss + value_loss_
                    if entropy is not None:
                        loss = loss - cfg["entropy_loss_scale"] * masked_mean(entropy, m)

                group.optimizer.zero_grad(set_to_none=True)
                self.scaler.scale(loss).backward()
                distributed.all_reduce_gradients_(group.parameters)
                if cfg["grad_norm_clip"] > 0:
                    self.scaler.unscale_(group.optimizer)
                    torch.nn.utils.clip_grad_norm_(group.parameters, cfg["grad_norm_clip"])
                self.scaler.step(group.optimizer)
                self.scaler.update()

                with torch.no_grad():
                    distribution = policy.distribution(role="policy")
                    std = (
                        distribution.stddev.float().view(G, B, -1).mean(dim=(1, 2))
                        if isinstance(distribution, torch.distributions.Normal)
                        else torch.zeros(G, device=self.device)
                    )
                    sums += torch.stack(
                        [
                            masked_mean(surrogate, m, dim=(1, 2)),
                            cfg["value_loss_scale"] * masked_mean(critic, m, dim=(1, 2)),
                            -cfg["entropy_loss_scale"] * masked_mean(entropy, m, dim=(1, 2))
                            if entropy is not None
                            else torch.zeros(G, device=self.device),
                            kl,
                            masked_mean(
                                clip_fraction(
                                    log_prob=log_prob, old_log_prob=batch["log_prob"], ratio_clip=cfg["ratio_clip"]
                                ),
                                m,
                                dim=(1, 2),
                            ),
                            std,
                        ]
                    ).detach()
                updates += 1

            if group.scheduler is not None:
                if isinstance(group.scheduler, KLAdaptiveLR):
                    mean_kl = distributed.all_reduce_mean_(torch.stack(epoch_kl).mean()) if epoch_kl else None
                    group.scheduler.step(mean_kl.item() if mean_kl is not None else None)
                else:
                    group.scheduler.step()
            if stop:
                break

        # tracking: one host read per update
        stats = (sums / max(updates, 1)).tolist()
        explained = explained.tolist()
        learning_rate = group.optimizer.param_groups[0]["lr"]
        for i, uid in enumerate(group.uids):
            self.track_data(f"Loss / Policy loss ({uid})", stats[0][i])
            self.track_data(f"Loss / Value loss ({uid})", stats[1][i])
            if cfg["entropy_loss_scale"]:
                self.track_data(f"Loss / Entropy loss ({uid})", stats[2][i])
            self.track_data(f"Policy / Approx KL ({uid})", stats[3][i])
            self.track_data(f"Policy / Clip fraction ({uid})", stats[4][i])
            if isinstance(policy.distribution(role="policy"), torch.distributions.Normal):
                self.track_data(f"Policy / Standard deviation ({uid})", stats[5][i])
            self.track_data(f"Value / Explained variance ({uid})", explained[i])
            self.track_data(f"Learning / Learning rate ({uid})", learning_rate)
        self.track_data("Learning / Updates per rollout", updates)
