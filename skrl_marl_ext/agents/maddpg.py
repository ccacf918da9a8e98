"""MADDPG: multi-agent DDPG with centralised critics (Lowe et al. 2017, https://arxiv.org/abs/1706.02275).

Every agent ``i`` has a deterministic policy ``mu_i(o_i)`` (continuous actions) or a categorical policy trained
through a straight-through Gumbel-softmax (discrete actions), and a critic ``Q_i(s, a_1, ..., a_n)`` that reads the
global state and *every* agent's action. With ``B`` joint transitions drawn from the replay memories:

- critic: ``L_i = mean_b (Q_i(s, a_1..a_n) - y_i)^2``, ``y_i = r_i + gamma (1 - terminated_i) Q'_i(s', a'_1..a'_n)``
  with ``a'_j = mu'_j(o'_j)`` from the target policies (greedy one-hot for discrete agents);
- actor: ``J_i = -mean_b Q_i(s, a_1, .., mu_i(o_i), .., a_n)``: only agent ``i``'s action is replaced by its
  policy's (differentiable) one, the others are the stored ones;
- targets: ``target = polyak * online + (1 - polyak) * target`` after every gradient step (skrl's convention).

Memories
--------
One skrl memory per agent (``RandomMemory(memory_size=..., num_envs=env.num_envs)``), written at every step for every
agent. A gradient step draws *one* set of indexes and reads it from every memory, so row ``b`` of every agent's batch
is the same (step, env): one joint transition. Independent draws per memory would pair agent ``i``'s observation
with other agents' actions from other moments, and the critic would learn nonsense.

Agent groups
------------
As in the PPO agents, agents whose models dicts hold the *same* policy, target policy, critic and target critic
objects form a group: their batches are stacked into ``(G * B, ...)`` rows, each loss is one mean over the group,
and each of the group's two optimisers takes one step.

Action masks
------------
Discrete agents honour action masks as the PPO agents do. A mask is boolean ``(num_envs, n)``, True where an action is
allowed, given either as the ``"action_mask"`` entry of a ``gymnasium.spaces.Dict`` observation space (PettingZoo's
convention; read from the raw flattened observation) or as ``infos["action_mask"] = {agent: mask}`` returned with the
observations by ``env.step`` (so the mask of the observation acted on at step ``t + 1`` comes from the infos of step
``t``; there is none after ``reset()``, which skrl's trainers do not hand to agents, so the first step is unmasked:
put a mask that must hold from the start in the observation). The policy must be a
:class:`~skrl_marl_ext.models.MaskedCategoricalMixin` model (e.g. :class:`~skrl_marl_ext.models.CategoricalMLP`);
another is refused (at construction for a Dict mask, at the first masked infos otherwise).

- acting: the mask reaches the policy as ``inputs["action_mask"]``; sampled, greedy (argmax of the masked logits)
  and uniform random (``cfg.random_timesteps``) actions are all allowed ones;
- replay: every Discrete agent's memory also holds ``action_mask`` (the mask of ``observations``) and
  ``next_action_mask`` (of ``next_observations``), bool ``(n,)``, all True where no mask was given;
- targets: ``a'_j`` is the argmax of ``mu'_j``'s logits masked with ``next_action_mask``;
- actor: the straight-through Gumbel-softmax runs on the logits masked with ``action_mask``: masked actions get weight
  exactly 0 in the relaxed and the hard action, and a zero (finite) gradient.

A mask row with no allowed action (e.g. the zero observation of an absent agent) is taken as all allowed.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.multi_agents.torch import MultiAgent
from skrl.resources.noises.torch import GaussianNoise
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
from skrl_marl_ext.agents.maddpg_cfg import MADDPG_CFG
from skrl_marl_ext.agents.validation import check_agent_inputs, dry_run
from skrl_marl_ext.functional import gumbel_softmax_st, masked_mean, one_hot_actions, polyak_update_, td_target
from skrl_marl_ext.functional.gumbel import gumbel_max_actions
from skrl_marl_ext.keys import (
    ACTION_MASK_KEY,
    AGENT_MASK_KEY,
    FINAL_OBSERVATIONS_KEY,
    FINAL_STATES_KEY,
    MEAN_ACTIONS_KEY,
)
from skrl_marl_ext.models.maddpg_models import action_encoding_size
from skrl_marl_ext.models.masked_categorical import MaskedCategoricalMixin, mask_logits
from skrl_marl_ext.preprocessors import update_statistics

ROLES = ("policy", "target_policy", "critic", "target_critic")
"""Model roles every agent needs (skrl DDPG's names)."""

# per-agent config fields whose values must agree within a group (they shape one loss and one optimiser step)
_GROUP_FIELDS = (
    "discount_factor",
    "polyak",
    "actor_learning_rate",
    "critic_learning_rate",
    "learning_rate_scheduler",
    "learning_rate_scheduler_kwargs",
    "observation_preprocessor",
    "observation_preprocessor_kwargs",
    "state_preprocessor",
    "state_preprocessor_kwargs",
    "grad_norm_clip",
    "gumbel_temperature",
    "time_limit_bootstrap",
)


@dataclasses.dataclass(eq=False)
class MADDPGGroup:
    """Agents that share their four models and update as one batch."""

    uids: list[str]
    """Agent names, in ``possible_agents`` order (the order of the stacked dimension)."""
    policy: Model
    target_policy: Model
    critic: Model
    target_critic: Model
    observation_space: gymnasium.Space
    action_space: gymnasium.Space
    critic_state_space: gymnasium.Space
    cfg: dict[str, Any]
    """The group's value of every per-agent config field."""
    policy_optimizer: torch.optim.Optimizer | None = None
    critic_optimizer: torch.optim.Optimizer | None = None
    policy_scheduler: Any = None
    critic_scheduler: Any = None
    observation_preprocessor: Callable = identity
    state_preprocessor: Callable = identity
    noise: Any = None
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None
    mask_in_observations: bool = False
    """Whether the action mask is the ``"action_mask"`` entry of the (Dict) observation space (Discrete only)."""
    masks_seen: bool = False
    """Whether ``infos["action_mask"]`` has carried a mask for an agent of the group (its policy was checked)."""

    @property
    def size(self) -> int:
        return len(self.uids)

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, gymnasium.spaces.Discrete)

    @property
    def num_actions(self) -> int:
        """``n`` of a ``Discrete(n)`` action space."""
        return int(self.action_space.n)


class MADDPG(MultiAgent):
    """Multi-Agent Deep Deterministic Policy Gradient (see the module docstring).

    Discrete agents honour action masks, given as the ``"action_mask"`` entry of a ``Dict`` observation space or as
    ``infos["action_mask"][agent]`` (bool ``(num_envs, n)``, True where allowed) with the observations ``env.step``
    returns; their policies must then be :class:`~skrl_marl_ext.models.MaskedCategoricalMixin` models. Masked actions
    are never taken (exploration, ``cfg.random_timesteps``, evaluation), never chosen by a target policy, and get zero
    weight in the actor's Gumbel-softmax action; see "Action masks" in the module docstring.
    """

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
        cfg: MADDPG_CFG | dict | None = None,
    ) -> None:
        """Multi-Agent Deep Deterministic Policy Gradient, https://arxiv.org/abs/1706.02275.

        :param possible_agents: Agent names (``env.possible_agents``).
        :param models: ``{agent: {"policy", "target_policy", "critic", "target_critic": Model}}``. Policies of Box
            action spaces are ``DeterministicMixin`` models (e.g. :class:`~skrl_marl_ext.models.DeterministicMLP`),
            of Discrete ones ``CategoricalMixin`` models whose logits are ``outputs["net_output"]`` (e.g.
            :class:`~skrl_marl_ext.models.CategoricalMLP`), ``MaskedCategoricalMixin`` ones when the env gives action
            masks (a ``Dict`` observation space with an ``"action_mask"`` entry, or ``infos["action_mask"]``). A
            critic reads ``inputs["states"]`` (the env's state, or every agent's observation concatenated in
            ``possible_agents`` order when ``state_spaces`` is None) and ``inputs["taken_actions"]`` (every agent's
            action concatenated, one-hot for discrete agents: size it with
            :func:`~skrl_marl_ext.models.joint_action_space`) and returns ``(batch, 1)``, e.g.
            :class:`~skrl_marl_ext.models.QMLP`. Targets have the architecture of their online model; they are
            overwritten with its parameters here.
        :param memories: ``{agent: Memory}``, one distinct skrl memory per agent (e.g. ``RandomMemory``), all with
            ``num_envs=env.num_envs``.
        :param observation_spaces: ``{agent: space}``.
        :param state_spaces: ``{agent: space}`` of the global state, or None when the env has none.
        :param action_spaces: ``{agent: Box or Discrete}``.
        :param device: Device of the computation (skrl's default when None).
        :param cfg: :class:`~skrl_marl_ext.MADDPG_CFG` or a dict of its fields (``{}`` for the defaults).
        """
        name = type(self).__name__
        cfg = build_cfg(MADDPG_CFG, cfg, owner=name)
        cfg.validate(owner=name)
        check_agent_inputs(
            owner=name,
            possible_agents=possible_agents,
            models=models,
            roles=ROLES,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces,
            action_spaces=action_spaces,
            need_states=False,
        )
        for uid in possible_agents:
            action_encoding_size(action_spaces[uid])  # Box and Discrete only
        self.env_states = isinstance(state_spaces, dict) and all(
            state_spaces.get(u) is not None for u in possible_agents
        )
        """Whether the critics read the env's state (else the concatenated observations)."""
        super().__init__(
            possible_agents=list(possible_agents),
            models=models,
            memories=memories,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces if self.env_states else {uid: None for uid in possible_agents},
            action_spaces=action_spaces,
            device=device,
            cfg=cfg,
        )
        self.cfg: MADDPG_CFG
        self._device_type = torch.device(self.device).type
        self._check_memories()

        self._obs_sizes = {
            u: compute_space_size(self.observation_spaces[u], occupied_size=True) for u in possible_agents
        }
        self.joint_action_size = sum(action_encoding_size(self.action_spaces[u]) for u in self.possible_agents)
        """Width of ``inputs["taken_actions"]`` of every critic."""

        self.groups = self._build_groups()
        # the columns of each agent's action in the joint action, as (G, width) per group (for the actor's scatter)
        starts, start = {}, 0
        for uid in self.possible_agents:
            starts[uid] = start
            start += action_encoding_size(self.action_spaces[uid])
        self._joint_columns = {
            id(group): torch.stack(
                [starts[u] + torch.arange(action_encoding_size(group.action_space)) for u in group.uids]
            ).to(self.device)
            for group in self.groups
        }
        self.group_of = {uid: group for group in self.groups for uid in group.uids}
        # one grad scaler for every optimiser: one update() per gradient step
        self.scaler = make_grad_scaler(self._device_type, self.cfg.mixed_precision)
        broadcast_modules([m for group in self.groups for m in (group.policy, group.critic)])
        for group in self.groups:
            self._set_up_group(group)
        self._create_memory_tensors()
        self._checked_num_envs = False
        self._non_finite_skipped = torch.zeros((), dtype=torch.long, device=self.device)
        self._infos_action_masks: dict[str, torch.Tensor] | None = None
        """``infos["action_mask"]`` of the last recorded step: the masks of the observations the next ``act`` sees."""

    # ------------------------------------------------------------------ construction

    def _check_memories(self) -> None:
        name = type(self).__name__
        fix = "pass memories={uid: RandomMemory(memory_size=..., num_envs=env.num_envs) for uid in env.possible_agents}"
        if not isinstance(self.memories, dict) or not self.memories:
            raise ValueError(f"{name} learns from a replay memory per agent; {fix}")
        seen: dict[int, str] = {}
        for uid in self.possible_agents:
            memory = self.memories.get(uid)
            if not isinstance(memory, Memory):
                raise ValueError(f"{name}: memories has no skrl Memory for agent '{uid}' (got {memory!r}); {fix}")
            if id(memory) in seen:
                raise ValueError(
                    f"{name}: agents '{seen[id(memory)]}' and '{uid}' were given the same memory object; each agent "
                    f"needs its own (their rows are aligned, not shared); {fix}"
                )
            seen[id(memory)] = uid
        sizes = {uid: self.memories[uid].num_envs for uid in self.possible_agents}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"{name}: the memories were created with different num_envs {sizes}; use env.num_envs")
        lengths = {uid: self.memories[uid].memory_size for uid in self.possible_agents}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{name}: the memories have different memory_size {lengths}; one joint transition is one row of "
                "every memory, so give them the same size"
            )

    def _critic_state_space(self, uid: str) -> gymnasium.Space:
        if self.env_states:
            return self.state_spaces[uid]
        size = sum(self._obs_sizes.values())
        return gymnasium.spaces.Box(-float("inf"), float("inf"), (size,))

    def _build_groups(self) -> list[MADDPGGroup]:
        groups = []
        for uids in group_agents(
            owner=type(self).__name__,
            possible_agents=self.possible_agents,
            models=self.models,
            roles=ROLES,
            spaces={"observation": self.observation_spaces, "action": self.action_spaces, "state": self.state_spaces},
            cfg=self.cfg,
            group_fields=_GROUP_FIELDS,
        ):
            first = uids[0]
            models = self.models[first]
            groups.append(
                MADDPGGroup(
                    uids=uids,
                    policy=models["policy"],
                    target_policy=models["target_policy"],
                    critic=models["critic"],
                    target_critic=models["target_critic"],
                    observation_space=self.observation_spaces[first],
                    action_space=self.action_spaces[first],
                    critic_state_space=self._critic_state_space(first),
                    cfg={f.name: self.cfg.value_for(f.name, first) for f in dataclasses.fields(self.cfg)},
                )
            )
        return groups

    def _set_up_group(self, group: MADDPGGroup) -> None:
        name = type(self).__name__
        cfg = group.cfg
        self._check_models(group)

        group.observation_preprocessor = make_preprocessor(
            cfg["observation_preprocessor"],
            cfg["observation_preprocessor_kwargs"],
            size=group.observation_space,
            device=self.device,
        )
        group.state_preprocessor = make_preprocessor(
            cfg["state_preprocessor"],
            cfg["state_preprocessor_kwargs"],
            size=group.critic_state_space,
            device=self.device,
        )

        # targets: frozen copies of the online models
        for target, online, role in (
            (group.target_policy, group.policy, "policy"),
            (group.target_critic, group.critic, "critic"),
        ):
            try:
                target.load_state_dict(online.state_dict())
            except RuntimeError as e:
                raise ValueError(
                    f"{name}: target_{role} of agents {group.uids} does not have the architecture of their {role} "
                    f"({e}); build it with the same class and arguments"
                ) from e
            target.freeze_parameters(True)

        actor_lr, critic_lr = cfg["actor_learning_rate"], cfg["critic_learning_rate"]
        group.policy_optimizer = torch.optim.Adam(group.policy.parameters(), lr=actor_lr)
        group.critic_optimizer = torch.optim.Adam(group.critic.parameters(), lr=critic_lr)
        (actor_scheduler, critic_scheduler) = cfg["learning_rate_scheduler"]
        (actor_kwargs, critic_kwargs) = cfg["learning_rate_scheduler_kwargs"]
        if actor_scheduler:
            group.policy_scheduler = actor_scheduler(group.policy_optimizer, **actor_kwargs)
        if critic_scheduler:
            group.critic_scheduler = critic_scheduler(group.critic_optimizer, **critic_kwargs)

        if not group.discrete:
            space = group.action_space
            group.low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device).reshape(-1)
            group.high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device).reshape(-1)
            if self.cfg.exploration_noise is None:
                group.noise = GaussianNoise(mean=0.0, std=0.1, device=self.device)
            else:
                group.noise = copy.deepcopy(self.cfg.exploration_noise)

        for uid in group.uids:
            modules = self.checkpoint_modules[uid]
            for role in ROLES:
                modules[role] = getattr(group, role)
            modules["policy_optimizer"] = group.policy_optimizer
            modules["critic_optimizer"] = group.critic_optimizer
            if group.policy_scheduler is not None:
                modules["policy_scheduler"] = group.policy_scheduler
            if group.critic_scheduler is not None:
                modules["critic_scheduler"] = group.critic_scheduler
            for key in ("observation_preprocessor", "state_preprocessor"):
                module = getattr(group, key)
                if module is not identity:
                    modules[key] = module
            modules["scaler"] = self.scaler

    def _check_models(self, group: MADDPGGroup) -> None:
        name = type(self).__name__
        uids = group.uids
        for role in ("policy", "critic"):
            if getattr(group, role) is getattr(group, f"target_{role}"):
                raise ValueError(
                    f"{name}: agents {uids} use one object as {role} and target_{role}; the target must be a separate "
                    f"model of the same architecture (build it twice)"
                )
        if group.discrete and not isinstance(group.policy, CategoricalMixin):
            raise ValueError(
                f"{name}: agents {uids} have the discrete action space {group.action_space}; their policy must output "
                f"logits through CategoricalMixin (e.g. skrl_marl_ext.models.CategoricalMLP), got "
                f"{type(group.policy).__name__}"
            )
        if not group.discrete and not isinstance(group.policy, DeterministicMixin):
            raise ValueError(
                f"{name}: agents {uids} have continuous actions; their policy must be a DeterministicMixin model "
                f"(e.g. skrl_marl_ext.models.DeterministicMLP), got {type(group.policy).__name__}"
            )
        group.mask_in_observations = (
            group.discrete
            and isinstance(group.observation_space, gymnasium.spaces.Dict)
            and ACTION_MASK_KEY in group.observation_space.spaces
        )
        if group.mask_in_observations:
            self._require_masked_policy(group, source='the "action_mask" entry of their Dict observation space')
        rows = 2 * group.size
        obs = torch.zeros(rows, self._obs_sizes[uids[0]], device=self.device)
        states = None
        if self.env_states:
            states = torch.zeros(
                rows, compute_space_size(group.critic_state_space, occupied_size=True), device=self.device
            )
        policy_inputs = {"observations": obs, "states": states}
        if group.discrete:
            policy_inputs[ACTION_MASK_KEY] = torch.ones(rows, group.num_actions, dtype=torch.bool, device=self.device)
        dry_run(
            owner=name,
            uids=uids,
            policy=group.policy,
            value=None,
            policy_inputs=policy_inputs,
            value_inputs=None,
            action_space=group.action_space,
            device=self.device,
        )
        state_size = compute_space_size(group.critic_state_space, occupied_size=True)
        what = "the env's state" if self.env_states else "every agent's observation concatenated"
        hint = (
            f"the critic must read inputs['states'] of size {state_size} ({what}) and inputs['taken_actions'] of the "
            f"joint action size {self.joint_action_size} (every agent's action, one-hot for discrete agents): size it "
            "with skrl_marl_ext.models.QMLP(state_space=..., action_space=joint_action_space(env.action_spaces, "
            "env.possible_agents))"
        )
        critic_inputs = {
            "observations": obs,
            "states": torch.zeros(rows, state_size, device=self.device),
            "taken_actions": torch.zeros(rows, self.joint_action_size, device=self.device),
        }
        for role in ("critic", "target_critic"):
            model = getattr(group, role)
            try:
                with torch.no_grad():
                    values, _ = model.act(critic_inputs, role=role)
            except Exception as e:
                raise ValueError(f"{name}: the {role} of agents {uids} failed ({type(e).__name__}: {e}); {hint}") from e
            if tuple(values.shape) != (rows, 1):
                raise ValueError(
                    f"{name}: the {role} of agents {uids} returns shape {tuple(values.shape)} for {rows} rows, expected "
                    f"({rows}, 1); {hint}"
                )

    def _require_masked_policy(self, group: MADDPGGroup, *, source: str) -> None:
        """Refuse a policy that would ignore the action masks the env gives (as the PPO agents do)."""
        if not isinstance(group.policy, MaskedCategoricalMixin):
            raise ValueError(
                f"{type(self).__name__}: agents {group.uids} receive action masks ({source}) but their policy "
                f"({type(group.policy).__name__}) ignores them and would take masked (invalid) actions; build the "
                "policy with skrl_marl_ext.models.MaskedCategoricalMixin instead of CategoricalMixin (e.g. "
                "skrl_marl_ext.models.CategoricalMLP)"
            )

    def _create_memory_tensors(self) -> None:
        self._tensor_names: dict[str, list[str]] = {}
        """Names of the memory tensors a batch reads, per agent (Discrete agents also have the action masks)."""
        for uid in self.possible_agents:
            memory = self.memories[uid]
            space = self.action_spaces[uid]
            action_size = 1 if isinstance(space, gymnasium.spaces.Discrete) else compute_space_size(space)
            memory.create_tensor(name="observations", size=self._obs_sizes[uid], dtype=torch.float32)
            memory.create_tensor(name="next_observations", size=self._obs_sizes[uid], dtype=torch.float32)
            memory.create_tensor(name="actions", size=action_size, dtype=torch.float32)
            memory.create_tensor(name="rewards", size=1, dtype=torch.float32)
            memory.create_tensor(name="terminated", size=1, dtype=torch.bool)
            memory.create_tensor(name="truncated", size=1, dtype=torch.bool)
            memory.create_tensor(name="agent_mask", size=1, dtype=torch.bool)
            if self.env_states:
                state_size = compute_space_size(self.state_spaces[uid], occupied_size=True)
                memory.create_tensor(name="states", size=state_size, dtype=torch.float32)
                memory.create_tensor(name="next_states", size=state_size, dtype=torch.float32)
            names = ["observations", "next_observations", "actions", "rewards", "terminated", "truncated", "agent_mask"]
            names += ["states", "next_states"] if self.env_states else []
            if isinstance(space, gymnasium.spaces.Discrete):
                # the masks of observations and next_observations (all True where the env gives none)
                memory.create_tensor(name="action_mask", size=int(space.n), dtype=torch.bool)
                memory.create_tensor(name="next_action_mask", size=int(space.n), dtype=torch.bool)
                names += ["action_mask", "next_action_mask"]
            self._tensor_names[uid] = names

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

    # ------------------------------------------------------------------ acting

    def _noise_scale(self, timestep: int) -> float:
        initial, final, steps = (
            self.cfg.exploration_initial_scale,
            self.cfg.exploration_final_scale,
            self.cfg.exploration_timesteps,
        )
        if steps is None:
            return initial
        return initial + (final - initial) * min(max(timestep, 0) / steps, 1.0)

    @staticmethod
    def _some_allowed(mask: torch.Tensor) -> torch.Tensor:
        """The boolean ``mask`` ``(rows, n)`` with rows that allow no action made all True (e.g. an absent agent's zero
        observation): every row then has an allowed action, for the argmax, the Gumbel-softmax and the random draw."""
        mask = mask.bool()
        return mask | ~mask.any(dim=-1, keepdim=True)

    def _observation_mask(self, group: MADDPGGroup, raw_obs: torch.Tensor) -> torch.Tensor:
        """The ``"action_mask"`` part of raw flattened Dict observations ``(..., obs_size)``, bool ``(rows, n)``."""
        flat = raw_obs.reshape(-1, raw_obs.shape[-1])
        return self._some_allowed(unflatten_tensorized_space(group.observation_space, flat)[ACTION_MASK_KEY])

    def _infos_mask(self, uid: str, num_envs: int, masks: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """Agent ``uid``'s mask in ``masks`` (an ``infos["action_mask"]``), or all True, bool ``(num_envs, n)``."""
        mask = masks.get(uid) if masks else None
        n = int(self.action_spaces[uid].n)
        if mask is None:
            return torch.ones(num_envs, n, dtype=torch.bool, device=self.device)
        return self._some_allowed(mask.reshape(num_envs, n).to(self.device))

    def _action_mask(self, group: MADDPGGroup, raw_obs: torch.Tensor) -> torch.Tensor | None:
        """Action mask ``(G * n, num_actions)`` of the group's raw observations ``(G, n, obs_size)`` to act on: from the
        Dict observation space, or from the last recorded infos; None for continuous agents or when there is none."""
        if not group.discrete:
            return None
        if group.mask_in_observations:
            return self._observation_mask(group, raw_obs)
        masks = self._infos_action_masks
        if not masks or not any(uid in masks for uid in group.uids):
            return None
        n = raw_obs.shape[1]
        return torch.cat([self._infos_mask(uid, n, masks) for uid in group.uids])

    def _random_actions(self, group: MADDPGGroup, rows: int, mask: torch.Tensor | None = None) -> torch.Tensor:
        if group.discrete:
            if mask is None:
                return torch.randint(group.num_actions, (rows, 1), device=self.device)
            # uniform among the allowed actions
            zeros = torch.zeros(rows, group.num_actions, device=self.device)
            return gumbel_max_actions(logits=zeros, mask=mask)
        low, high = group.low, group.high
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            return torch.randn(rows, low.numel(), device=self.device)
        return low + (high - low) * torch.rand(rows, low.numel(), device=self.device)

    def act(
        self,
        observations: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor | None] | None,
        *,
        timestep: int,
        timesteps: int,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Actions of every agent, one forward pass per group.

        Training: continuous actions are ``clip(mu(o) + scale * noise, low, high)``, discrete ones are sampled from
        the categorical policy (uniform during ``cfg.random_timesteps``). Evaluation (``enable_training_mode(False)``):
        ``mu(o)`` without noise and the argmax of the logits; they are also ``outputs["mean_actions"]``, which
        skrl's trainers read in evaluation.

        Action masks of discrete agents (the ``"action_mask"`` entry of a Dict observation space, read from the raw
        ``observations``, or ``infos["action_mask"]`` of the last :meth:`record_transition`) reach the policy as
        ``inputs["action_mask"]``; the sampled, the greedy (argmax of the masked logits) and the uniform random
        actions are all allowed ones. Without a mask (e.g. at the first step after ``reset()`` for masks given
        through infos) every action is allowed.

        :param observations: ``{agent: (num_envs, obs_size)}``; agents absent from the dict get no action.
        :param states: ``{agent: (num_envs, state_size) or None}``.
        :param timestep: Current timestep.
        :param timesteps: Number of timesteps.

        :return: ``(actions, outputs)``: ``actions[agent]`` of shape ``(num_envs, action_size)`` (``(num_envs, 1)``
            integers for discrete agents), ``outputs[agent]`` the policy's outputs for that agent.
        """
        actions, outputs = {}, {}
        random = self.training and timestep < self.cfg.random_timesteps
        scale = self._noise_scale(timestep)
        with torch.no_grad():
            for group in self.groups:
                present = [uid for uid in group.uids if uid in observations]
                if not present:
                    continue
                raw_obs = stack_agents(observations, group.uids)
                G, n = group.size, raw_obs.shape[1]
                mask = self._action_mask(group, raw_obs)  # (G * n, num_actions) or None
                if random:
                    group_actions, group_outputs = self._random_actions(group, G * n, mask), {}
                else:
                    obs = group.observation_preprocessor(raw_obs.reshape(G * n, -1))
                    raw_states = stack_agents(states, group.uids) if self.env_states and states else None
                    st = group.state_preprocessor(raw_states.reshape(G * n, -1)) if raw_states is not None else None
                    inputs = {"observations": obs, "states": st}
                    if mask is not None:
                        inputs[ACTION_MASK_KEY] = mask
                    with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
                        group_actions, group_outputs = group.policy.act(inputs, role="policy")
                    if group.discrete:
                        if not self.training:
                            logits = mask_logits(self._logits(group.policy, group_outputs), mask)
                            group_actions = logits.argmax(dim=-1, keepdim=True)
                    else:
                        group_actions = group_actions.float()
                        if self.training and scale > 0:
                            noise = group.noise.sample(group_actions.shape).to(group_actions)
                            group_actions = group_actions + scale * noise
                        group_actions = torch.maximum(torch.minimum(group_actions, group.high), group.low)
                for i, uid in enumerate(group.uids):
                    if uid not in observations:
                        continue
                    actions[uid] = group_actions.view(G, n, -1)[i]
                    outputs[uid] = {
                        k: (v.view(G, n, *v.shape[1:])[i] if torch.is_tensor(v) and v.shape[:1] == (G * n,) else v)
                        for k, v in group_outputs.items()
                    }
        if self.training and not random and scale != 1.0:
            self.track_data("Exploration / Exploration noise scale", scale)
        if not self.training:
            outputs[MEAN_ACTIONS_KEY] = dict(actions)
        return actions, outputs

    # ------------------------------------------------------------------ storage

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
        """Store the transition of every agent, one row of each agent's memory (the rows stay aligned).

        Agents absent from ``observations`` get a zero row and a False agent mask; ``infos["agent_mask"]``
        (``{agent: (num_envs, 1) bool}``, see :data:`~skrl_marl_ext.AGENT_MASK_KEY`) masks agents that are present.
        Masked rows take no part in any loss or preprocessor statistic.

        Action masks: ``infos["action_mask"]`` (``{agent: (num_envs, n) bool}``, True where allowed, see
        :data:`~skrl_marl_ext.keys.ACTION_MASK_KEY`) is the mask of ``next_observations``; it is kept for the next
        :meth:`act` (also in evaluation) and refused, at the first step that carries one for an agent, when that
        agent's policy is not a :class:`~skrl_marl_ext.models.MaskedCategoricalMixin`. Discrete agents' rows also
        store ``action_mask`` (the mask ``observations`` were acted on with: the previous step's infos mask, or the
        Dict observation's) and ``next_action_mask`` (this step's infos mask, or the Dict next observation's), all
        True where none was given.
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
        acted_masks = self._infos_action_masks  # the masks act() used for ``observations``
        self._keep_infos_action_masks(infos.get(ACTION_MASK_KEY))
        if not self.training:
            return
        first = next(iter(observations.values()))
        num_envs = first.shape[0]
        if not self._checked_num_envs:
            memory = self.memories[self.possible_agents[0]]
            if memory.num_envs != num_envs:
                raise ValueError(
                    f"{type(self).__name__}: the memories were created with num_envs={memory.num_envs} but the env "
                    f"gives {num_envs} observations per step; create RandomMemory(memory_size=..., "
                    "num_envs=env.num_envs)"
                )
            self._checked_num_envs = True
        agent_masks = infos.get(AGENT_MASK_KEY)
        agent_masks = agent_masks if isinstance(agent_masks, dict) else {}
        finals, final_states = infos.get(FINAL_OBSERVATIONS_KEY), infos.get(FINAL_STATES_KEY)

        def get(tensors, uid, size, dtype=torch.float32):
            x = tensors.get(uid) if isinstance(tensors, dict) else None
            if x is None:
                return torch.zeros(num_envs, size, dtype=dtype, device=self.device)
            return x.reshape(num_envs, -1).to(dtype)

        per_agent = {}
        for uid in self.possible_agents:
            present = uid in observations
            mask = torch.full((num_envs, 1), present, dtype=torch.bool, device=self.device)
            if present and uid in agent_masks:
                mask = agent_masks[uid].reshape(num_envs, 1).bool()
            reward = get(rewards, uid, 1)
            if self.cfg.rewards_shaper is not None:
                reward = self.cfg.rewards_shaper(reward, timestep, timesteps)
            action_width = self.memories[uid].tensors["actions"].shape[-1]
            samples = {
                "observations": get(observations, uid, self._obs_sizes[uid]),
                "next_observations": get(next_observations, uid, self._obs_sizes[uid]),
                "actions": get(actions, uid, action_width),
                "rewards": reward,
                "terminated": get(terminated, uid, 1, torch.bool),
                "truncated": get(truncated, uid, 1, torch.bool),
                "agent_mask": mask,
            }
            if self.env_states:
                size = self.memories[uid].tensors["states"].shape[-1]
                samples["states"] = get(states, uid, size)
                samples["next_states"] = get(next_states, uid, size)
            self._use_final_observations(uid, samples, finals, final_states, get)
            group = self.group_of[uid]
            if group.discrete:
                if group.mask_in_observations:
                    samples["action_mask"] = self._observation_mask(group, samples["observations"])
                    samples["next_action_mask"] = self._observation_mask(group, samples["next_observations"])
                else:
                    samples["action_mask"] = self._infos_mask(uid, num_envs, acted_masks)
                    samples["next_action_mask"] = self._infos_mask(uid, num_envs, self._infos_action_masks)
            per_agent[uid] = samples
        self._refuse_or_skip_non_finite(per_agent)
        for uid, samples in per_agent.items():
            self.memories[uid].add_samples(**samples)

    def _use_final_observations(self, uid: str, samples: dict, finals: Any, final_states: Any, get: Callable) -> None:
        """Where an episode ended and the env handed its final observation (and state) in the infos
        (:data:`~skrl_marl_ext.keys.FINAL_OBSERVATIONS_KEY`), store those as the row's next observation (and next
        state) instead of the next episode's first one, which an env that resets in place returns."""
        if not isinstance(finals, dict) or finals.get(uid) is None:
            return
        ended = samples["terminated"] | samples["truncated"]
        final = get(finals, uid, self._obs_sizes[uid])
        samples["next_observations"] = torch.where(ended, final, samples["next_observations"])
        if self.env_states and isinstance(final_states, dict) and final_states.get(uid) is not None:
            final_state = get(final_states, uid, samples["next_states"].shape[-1])
            samples["next_states"] = torch.where(ended, final_state, samples["next_states"])

    def _keep_infos_action_masks(self, masks: Any) -> None:
        """Keep ``infos["action_mask"]`` (copied: an env may reuse its buffers) for the next :meth:`act` and the next
        stored row, refusing it for agents whose policy would ignore it."""
        if not isinstance(masks, dict):
            self._infos_action_masks = None
            return
        kept = {}
        for uid, mask in masks.items():
            if uid not in self.group_of or mask is None:
                continue
            group = self.group_of[uid]
            if not group.discrete:
                continue  # a mask of continuous actions means nothing here
            if not group.masks_seen:
                self._require_masked_policy(group, source='infos["action_mask"]')
                group.masks_seen = True
            mask = torch.as_tensor(mask, device=self.device)
            mask = mask.reshape(mask.shape[0], -1) if mask.dim() else mask.reshape(1, -1)
            if mask.shape[1] != group.num_actions:
                raise ValueError(
                    f"{type(self).__name__}: infos['action_mask']['{uid}'] has shape {tuple(mask.shape)}; expected "
                    f"(num_envs, {group.num_actions}), bool, True where an action of {group.action_space} is allowed"
                )
            kept[uid] = mask.to(dtype=torch.bool, copy=True)
        self._infos_action_masks = kept or None

    def _refuse_or_skip_non_finite(self, per_agent: dict[str, dict[str, torch.Tensor]]) -> None:
        """NaN/inf in rewards, observations or states: an error naming agent and tensor, or (``cfg.non_finite="skip"``)
        the rows are zeroed and masked out of both losses. One host sync per step (raise) or none (skip).

        A zeroed row still enters the other agents' critics as part of the joint state and action, as a dead agent's
        zero row does; only its own losses and statistics leave it out.
        """
        # inputs first: a NaN observation also makes the action (and, through the env, later rewards) non-finite
        keys = ("observations", "states", "next_observations", "next_states", "rewards", "actions")
        bad = {
            uid: {k: ~torch.isfinite(samples[k]).all(dim=1) for k in keys if k in samples}
            for uid, samples in per_agent.items()
        }
        if self.cfg.non_finite == "skip":
            for uid, samples in per_agent.items():
                rows = torch.stack(list(bad[uid].values())).any(dim=0)  # (num_envs,)
                for k in bad[uid]:
                    samples[k] = torch.where(torch.isfinite(samples[k]), samples[k], 0.0)
                samples["agent_mask"] = samples["agent_mask"] & ~rows.view(-1, 1)
                self._non_finite_skipped += rows.sum()
            return
        flags = torch.stack([flag.any() for tensors in bad.values() for flag in tensors.values()])
        if not bool(flags.any()):
            return
        for uid, tensors in bad.items():
            for key, rows in tensors.items():
                if rows.any():
                    env = int(rows.nonzero()[0])
                    raise ValueError(
                        f"{type(self).__name__}: non-finite {key} (NaN or inf) for agent '{uid}' in env {env}; "
                        "refusing to store it. Fix the env, shape the rewards with cfg.rewards_shaper, or set "
                        'cfg.non_finite="skip" to mask such samples out of learning'
                    )

    # ------------------------------------------------------------------ lifecycle

    def pre_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Nothing to do before the environment step."""

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        """From ``cfg.learning_starts`` on, ``cfg.gradient_steps`` gradient steps; then skrl's tracking/checkpoints."""
        if self.training and timestep >= self.cfg.learning_starts and len(self.memories[self.possible_agents[0]]):
            with ScopedTimer() as timer:
                self._online_training_mode(True)
                for _ in range(self.cfg.gradient_steps):
                    self._gradient_step()
                self._online_training_mode(False)
            self.track_data("Stats / Algorithm update time (ms)", timer.elapsed_time_ms)
            if self.cfg.non_finite == "skip":
                self.track_data("Stats / Non-finite samples skipped", float(self._non_finite_skipped))
        super().post_interaction(timestep=timestep, timesteps=timesteps)

    def _online_training_mode(self, enabled: bool) -> None:
        """Training mode of the policies and critics (the targets only ever evaluate)."""
        for group in self.groups:
            group.policy.enable_training_mode(enabled)
            group.critic.enable_training_mode(enabled)

    def load(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save`, refusing one of other agents or other model shapes.

        :param path: Path of the checkpoint file.
        """
        load_checkpoint(self, path)

    def update(self, *, timestep: int, timesteps: int, uid: str) -> None:
        """Run ``cfg.gradient_steps`` gradient steps (skrl's per-agent entry point).

        One batch of joint transitions serves every agent, so every group is updated, whichever ``uid`` is given.
        """
        if uid not in self.group_of:
            raise ValueError(f"{type(self).__name__}.update: unknown agent '{uid}'")
        for _ in range(self.cfg.gradient_steps):
            self._gradient_step()

    # ------------------------------------------------------------------ learning

    def sample_indexes(self) -> torch.Tensor:
        """One set of ``cfg.batch_size`` row indexes (with replacement) into the filled part of the memories.

        The same indexes are read from every agent's memory, so row ``b`` of every batch is one joint transition.
        """
        size = len(self.memories[self.possible_agents[0]])
        return torch.randint(size, (self.cfg.batch_size,), device=self.memories[self.possible_agents[0]].device)

    def sample_batch(self, indexes: torch.Tensor | None = None) -> dict[str, dict[str, torch.Tensor]]:
        """Read the rows ``indexes`` (:meth:`sample_indexes` when None) of every agent's memory.

        :return: ``{agent: {tensor name: (batch, size)}}``; Discrete agents' also hold ``"action_mask"`` and
            ``"next_action_mask"``, bool ``(batch, n)``.
        """
        indexes = self.sample_indexes() if indexes is None else indexes
        batch = {}
        for uid in self.possible_agents:
            names = self._tensor_names[uid]
            tensors = self.memories[uid].sample_by_index(names, indexes=indexes)[0]
            batch[uid] = {k: v.to(self.device) for k, v in zip(names, tensors, strict=True)}
        return batch

    def _encode_actions(self, uid: str, actions: torch.Tensor) -> torch.Tensor:
        space = self.action_spaces[uid]
        if isinstance(space, gymnasium.spaces.Discrete):
            return one_hot_actions(actions, int(space.n))
        return actions

    def _group_inputs(self, group: MADDPGGroup, batch: dict, *, next_: bool) -> tuple[torch.Tensor, ...]:
        """Preprocessed ``(G * B, size)`` policy observations, policy states (or None) and critic states."""
        prefix = "next_" if next_ else ""
        G = group.size
        raw_obs = torch.stack([batch[u][f"{prefix}observations"] for u in group.uids])  # (G, B, o)
        B = raw_obs.shape[1]
        obs = group.observation_preprocessor(raw_obs.reshape(G * B, -1))
        if self.env_states:
            raw_states = torch.stack([batch[u][f"{prefix}states"] for u in group.uids])  # (G, B, S)
            states = group.state_preprocessor(raw_states.reshape(G * B, -1))
            return obs, states, states
        joint_obs = torch.cat([batch[u][f"{prefix}observations"] for u in self.possible_agents], dim=-1)  # (B, S)
        critic_states = group.state_preprocessor(joint_obs)
        critic_states = critic_states.unsqueeze(0).expand(G, *critic_states.shape).reshape(G * B, -1)
        return obs, None, critic_states

    def _update_statistics(self, group: MADDPGGroup, batch: dict) -> None:
        mask = torch.stack([batch[u]["agent_mask"] for u in group.uids])  # (G, B, 1)
        if group.observation_preprocessor is not identity:
            obs = torch.stack([batch[u]["observations"] for u in group.uids])
            update_statistics(group.observation_preprocessor, obs, mask)
        if group.state_preprocessor is not identity:
            if self.env_states:
                states = torch.stack([batch[u]["states"] for u in group.uids])
                update_statistics(group.state_preprocessor, states, mask)
            else:
                joint_obs = torch.cat([batch[u]["observations"] for u in self.possible_agents], dim=-1)
                update_statistics(group.state_preprocessor, joint_obs, mask.any(dim=0))

    def _joint(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([parts[u] for u in self.possible_agents], dim=-1)

    def _group_action_mask(self, group: MADDPGGroup, batch: dict, *, next_: bool) -> torch.Tensor | None:
        """The stored action masks of the group's rows, bool ``(G * B, n)`` (``next_action_mask`` when ``next_``);
        None for continuous agents."""
        if not group.discrete:
            return None
        key = "next_action_mask" if next_ else "action_mask"
        return torch.cat([batch[u][key] for u in group.uids])

    def _next_joint_action(self, batch: dict) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The next joint action ``a' = (mu'_1(o'_1), ..., mu'_n(o'_n))`` of the target policies, ``(B, joint size)``
        (for discrete agents the one-hot argmax of the logits masked with the stored ``next_action_mask``), and each
        group's preprocessed next critic states ``(G * B, S)``."""
        next_actions, next_states = {}, {}
        with torch.no_grad(), torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            for group in self.groups:
                obs, st, critic_st = self._group_inputs(group, batch, next_=True)
                next_states[id(group)] = critic_st
                inputs = {"observations": obs, "states": st}
                mask = self._group_action_mask(group, batch, next_=True)
                if mask is not None:
                    inputs[ACTION_MASK_KEY] = mask
                a, out = group.target_policy.act(inputs, role="target_policy")
                if group.discrete:
                    logits = mask_logits(self._logits(group.target_policy, out), mask)
                    a = one_hot_actions(logits.argmax(dim=-1), group.num_actions)
                a = a.float().view(group.size, -1, a.shape[-1])
                for i, uid in enumerate(group.uids):
                    next_actions[uid] = a[i]
        return self._joint(next_actions), next_states

    @staticmethod
    def _logits(policy: Model, outputs: dict) -> torch.Tensor:
        """Logits of a categorical policy: ``outputs["net_output"]``, or its log when the network gives probabilities.

        A :class:`~skrl_marl_ext.models.MaskedCategoricalMixin` always puts (masked) logits there.
        """
        net_output = outputs["net_output"]
        if isinstance(policy, MaskedCategoricalMixin) or getattr(policy, "_c_unnormalized_log_prob", True):
            return net_output
        return torch.log(net_output.clamp(min=torch.finfo(net_output.dtype).tiny))

    def _per_agent(self, group: MADDPGGroup, batch: dict, key: str) -> torch.Tensor:
        return torch.stack([batch[u][key] for u in group.uids])  # (G, B, size)

    def _critic_loss(
        self,
        group: MADDPGGroup,
        batch: dict,
        *,
        joint_taken: torch.Tensor,
        joint_next: torch.Tensor,
        next_critic_states: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``L = masked mean of (Q(s, a) - y)^2`` over the group's ``(G, B)`` rows, ``y = r + gamma (1 - d) Q'(s', a')``.

        Rows of masked agents, and truncated rows unless ``cfg.time_limit_bootstrap``, are left out.

        :return: The loss and ``{"q", "target", "error", "mask"}``, each ``(G, B, 1)``.
        """
        cfg, G, B = group.cfg, group.size, joint_taken.shape[0]
        mask = self._per_agent(group, batch, "agent_mask")
        if not cfg["time_limit_bootstrap"]:
            mask = mask & ~self._per_agent(group, batch, "truncated")
        _, _, critic_st = self._group_inputs(group, batch, next_=False)
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            with torch.no_grad():
                next_q, _ = group.target_critic.act(
                    {"states": next_critic_states, "taken_actions": joint_next.repeat(G, 1)}, role="target_critic"
                )
                target = td_target(
                    rewards=self._per_agent(group, batch, "rewards"),
                    next_q_values=next_q.float().view(G, B, 1),
                    terminated=self._per_agent(group, batch, "terminated"),
                    discount_factor=cfg["discount_factor"],
                )
            q, _ = group.critic.act({"states": critic_st, "taken_actions": joint_taken.repeat(G, 1)}, role="critic")
            q = q.float().view(G, B, 1)
            error = (q - target) ** 2
            loss = masked_mean(error, mask)
        return loss, {"q": q.detach(), "target": target, "error": error.detach(), "mask": mask}

    def _actor_joint(self, group: MADDPGGroup, joint_taken: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """For each agent ``i`` of the group, the stored joint action with agent ``i``'s columns replaced by ``own[i]``:
        one scatter for the whole group (gradients reach ``own`` only).

        :param joint_taken: ``(B, joint size)``. :param own: ``(G, B, action encoding size)``.
        :return: ``(G, B, joint size)``.
        """
        G, B = own.shape[:2]
        columns = self._joint_columns[id(group)].unsqueeze(1).expand(G, B, -1)
        return joint_taken.unsqueeze(0).expand(G, B, -1).scatter(2, columns, own)

    def _actor_loss(
        self, group: MADDPGGroup, batch: dict, *, joint_taken: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``J = -masked mean of Q(s, a_1, .., mu_i(o_i), .., a_n)`` over the group's rows: only agent ``i``'s own action
        comes from its policy (through the straight-through Gumbel-softmax for discrete agents, on the logits masked
        with the stored ``action_mask``: masked actions get weight 0), the others' are the stored ones, so agent
        ``i``'s loss reaches no other agent's policy.

        :param joint_taken: The stored joint action as the critic reads it, ``(B, joint size)``.
        :return: The loss and ``Q`` of the policy actions, ``(G, B, 1)``.
        """
        cfg, G = group.cfg, group.size
        mask = self._per_agent(group, batch, "agent_mask")
        obs, st, critic_st = self._group_inputs(group, batch, next_=False)
        inputs = {"observations": obs, "states": st}
        action_mask = self._group_action_mask(group, batch, next_=False)
        if action_mask is not None:
            inputs[ACTION_MASK_KEY] = action_mask
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            a, out = group.policy.act(inputs, role="policy")
            if group.discrete:
                a = gumbel_softmax_st(
                    logits=self._logits(group.policy, out).float(),
                    temperature=cfg["gumbel_temperature"],
                    mask=action_mask,
                )
            a = a.float().view(G, -1, a.shape[-1])
            B = a.shape[1]
            joint = self._actor_joint(group, joint_taken, a)
            q_pi, _ = group.critic.act({"states": critic_st, "taken_actions": joint.reshape(G * B, -1)}, role="critic")
            q_pi = q_pi.float().view(G, B, 1)
            loss = -masked_mean(q_pi, mask)
        return loss, q_pi.detach()

    def _gradient_step(self) -> None:
        """One gradient step of every group on one batch of joint transitions, then the target updates."""
        batch = self.sample_batch()
        for group in self.groups:
            self._update_statistics(group, batch)
        taken = {u: self._encode_actions(u, batch[u]["actions"]) for u in self.possible_agents}
        joint_taken = self._joint(taken)
        joint_next, next_critic_states = self._next_joint_action(batch)

        stats = []
        for group in self.groups:
            clip = group.cfg["grad_norm_clip"]
            critic_loss, c = self._critic_loss(
                group,
                batch,
                joint_taken=joint_taken,
                joint_next=joint_next,
                next_critic_states=next_critic_states[id(group)],
            )
            self._optimizer_step(group.critic_optimizer, critic_loss, clip)
            policy_loss, q_pi = self._actor_loss(group, batch, joint_taken=joint_taken)
            self._optimizer_step(group.policy_optimizer, policy_loss, clip)

            with torch.no_grad():
                q, mask, big = c["q"], self._per_agent(group, batch, "agent_mask"), torch.finfo(torch.float32).max
                stats.append(
                    torch.stack(
                        [
                            masked_mean(c["error"], c["mask"], dim=(1, 2)),
                            -masked_mean(q_pi, mask, dim=(1, 2)),
                            masked_mean(q, mask, dim=(1, 2)),
                            q.masked_fill(~mask, big).amin(dim=(1, 2)),
                            q.masked_fill(~mask, -big).amax(dim=(1, 2)),
                            masked_mean(c["target"], c["mask"], dim=(1, 2)),
                        ]
                    )
                )

        self.scaler.update()  # once per gradient step, after every optimiser has stepped
        for group in self.groups:
            polyak = group.cfg["polyak"]
            polyak_update_(target=group.target_policy.parameters(), online=group.policy.parameters(), polyak=polyak)
            polyak_update_(target=group.target_critic.parameters(), online=group.critic.parameters(), polyak=polyak)
            for scheduler in (group.policy_scheduler, group.critic_scheduler):
                if scheduler is not None:
                    scheduler.step()
        self._track(stats)

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, clip: float) -> None:
        """Scaled backward, gradient all-reduce over ranks, unscale and clip (when on), scaler step."""
        optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        distributed.all_reduce_gradients_(parameters)
        if clip > 0:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip)
        self.scaler.step(optimizer)

    def _track(self, stats: list[torch.Tensor]) -> None:
        # one host read per gradient step for all groups: (6, agents of all groups, in group order)
        critic, policy, q_mean, q_min, q_max, target = torch.cat(stats, dim=1).tolist()
        i = 0
        for group in self.groups:
            policy_lr = group.policy_optimizer.param_groups[0]["lr"]
            critic_lr = group.critic_optimizer.param_groups[0]["lr"]
            for uid in group.uids:
                self.track_data(f"Loss / Critic loss ({uid})", critic[i])
                self.track_data(f"Loss / Policy loss ({uid})", policy[i])
                self.track_data(f"Q-network / Q ({uid}) (mean)", q_mean[i])
                self.track_data(f"Q-network / Q ({uid}) (min)", q_min[i])
                self.track_data(f"Q-network / Q ({uid}) (max)", q_max[i])
                self.track_data(f"Target / Target ({uid}) (mean)", target[i])
                self.track_data(f"Learning / Policy learning rate ({uid})", policy_lr)
                self.track_data(f"Learning / Critic learning rate ({uid})", critic_lr)
                i += 1
