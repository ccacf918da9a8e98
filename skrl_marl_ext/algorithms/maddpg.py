"""MADDPG: multi-agent DDPG with centralised critics (Lowe et al. 2017, https://arxiv.org/abs/1706.02275).

Every agent ``i`` has a deterministic policy ``mu_i(o_i)`` (continuous actions) or a categorical policy trained
through a straight-through Gumbel-softmax (discrete actions), and a critic ``Q_i(s, a_1, ..., a_n)`` that reads the
global state and *every* agent's action. With ``B`` joint transitions drawn from the replay memories:

- critic: ``L_i = mean_b (Q_i(s, a_1..a_n) - y_i)^2``, ``y_i = r_i + gamma (1 - terminated_i) Q'_i(s', a'_1..a'_n)``
  with ``a'_j = mu'_j(o'_j)`` from the target policies (greedy one-hot for discrete agents);
- actor: ``J_i = -mean_b Q_i(s, a_1, .., mu_i(o_i), .., a_n)``: only agent ``i``'s action is replaced by its
  policy's (differentiable) one, the others are the stored ones;
- targets: ``target = polyak * online + (1 - polyak) * target`` after every gradient step (skrl's convention).

The losses and targets are the pure functions of :mod:`skrl_marl_ext.functional.maddpg`; the joint replay (one skrl
memory per agent, every batch read at the same rows of every memory) is :mod:`skrl_marl_ext.storage.replay`. As in
the PPO agents, the agents form groups (sharing models, or their own models run as one stacked batch:
:mod:`skrl_marl_ext.groups`), and each group's two optimisers take one step per gradient step.

The class reads in skrl's lifecycle order: construction, acting, recording, ``post_interaction``/``update``, then the
gradient step in its phases: sample, critic targets, critic step, actor step (every ``cfg.policy_delay`` steps),
target updates.

Discrete agents honour action masks (bool ``(num_envs, n)``, True where allowed), given as the ``"action_mask"`` entry
of a ``Dict`` observation space or as ``infos["action_mask"]`` with the observations ``env.step`` returns: acting
takes only allowed actions, the replay keeps ``action_mask`` and ``next_action_mask`` rows, the target policies'
argmax and the actor's Gumbel-softmax are masked with them. A row that allows nothing is taken as all allowed.
See "Action masks" in ``docs/maddpg.md``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.resources.noises.torch import GaussianNoise
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext.algorithms.base import GroupedMultiAgent, Progress
from skrl_marl_ext.algorithms.maddpg_cfg import MADDPG_CFG
from skrl_marl_ext.checks.arguments import call_model, dry_run, expect_shape
from skrl_marl_ext.features.masks import agent_mask
from skrl_marl_ext.features.recurrent import is_recurrent
from skrl_marl_ext.functional import (
    actor_loss,
    critic_loss,
    critic_target,
    gumbel_softmax_st,
    joint_with_own_actions,
    masked_mean,
    one_hot_actions,
    polyak_update_,
    smooth_target_actions,
)
from skrl_marl_ext.functional.gumbel import gumbel_max_actions
from skrl_marl_ext.groups import AgentGroup
from skrl_marl_ext.groups.optim import Adam
from skrl_marl_ext.groups.preprocessors import stackable_preprocessor
from skrl_marl_ext.keys import (
    ACTION_MASK_KEY,
    AGENT_MASK_KEY,
    FINAL_OBSERVATIONS_KEY,
    FINAL_STATES_KEY,
    MEAN_ACTIONS_KEY,
    PRE_TANH_ACTIONS_KEY,
)
from skrl_marl_ext.models.maddpg_models import action_encoding_size
from skrl_marl_ext.models.masked_categorical import mask_logits
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.storage.replay import JointReplay, ReplayState

ROLES = ("policy", "target_policy", "critic", "target_critic")
"""Model roles every agent needs (skrl DDPG's names)."""
TWIN_ROLES = ("critic_2", "target_critic_2")
"""Optional second critic and its target (TD3's clipped double Q): every agent has both, or no agent has either."""

DEFAULT_POLICY_REGULARIZATION = 1e-3
"""``cfg.policy_regularization`` where it is None and the policy gives its pre-tanh output (the MADDPG paper code's)."""


@dataclasses.dataclass
class MADDPGProgress(Progress):
    """MADDPG's checkpoint module ``progress``: the steps completed and the gradient steps taken."""

    gradient_steps: int = 0
    """Gradient steps taken: the actors and the targets step when it is a multiple of ``cfg.policy_delay``."""


@dataclasses.dataclass(eq=False)
class MADDPGGroup(AgentGroup):
    """A MADDPG group: its four models, two optimisers, exploration noise and action bounds."""

    critic_state_space: gymnasium.Space | None = None
    """What the critics read under ``"states"``: the env's state, or every agent's observation concatenated."""
    policy_regularization: float = 0.0
    """The weight of the pre-tanh penalty, ``cfg.policy_regularization`` resolved at construction."""
    policy_optimizer: Adam | None = None
    critic_optimizer: Adam | None = None
    policy_schedulers: list = dataclasses.field(default_factory=list)
    """The actor's learning rate schedulers, one per agent of the optimiser (none without one)."""
    critic_schedulers: list = dataclasses.field(default_factory=list)
    noise: Any = None
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None
    joint_columns: torch.Tensor | None = None
    """``(G, action encoding size)``: the columns of each agent's action in the joint action (the actor's scatter)."""

    policy = property(lambda self: self.models["policy"])
    target_policy = property(lambda self: self.models["target_policy"])
    critic = property(lambda self: self.models["critic"])
    target_critic = property(lambda self: self.models["target_critic"])
    twin = property(lambda self: "critic_2" in self.models)
    """Whether the group has a second critic (clipped double Q)."""
    critic_roles = property(lambda self: ("critic", "critic_2") if self.twin else ("critic",))
    """The online critic roles, trained by one optimiser (skrl TD3's one optimiser over both critics)."""


class MADDPG(GroupedMultiAgent):
    """Multi-Agent Deep Deterministic Policy Gradient: centralised critics over the global state and every agent's
    action, deterministic (Box) or Gumbel-softmax (Discrete) policies, one replay memory per agent sampled at shared
    indexes; the update, its options and their defaults are on the MADDPG docs page (``docs/maddpg.md``).

    :param possible_agents: Agent names (``env.possible_agents``).
    :param models: ``{agent: {"policy", "target_policy", "critic", "target_critic": Model}}``. Policies are
        ``DeterministicMixin`` models for Box actions (e.g. :class:`~skrl_marl_ext.models.DeterministicMLP`) and
        ``CategoricalMixin`` ones for Discrete actions, ``MaskedCategoricalMixin`` where the env gives action masks
        (e.g. :class:`~skrl_marl_ext.models.CategoricalMLP`). A critic reads ``inputs["states"]`` (the env's state, or
        every agent's observation concatenated when ``state_spaces`` is None) and ``inputs["taken_actions"]`` (every
        agent's action, one-hot for discrete agents: size it with :func:`~skrl_marl_ext.models.joint_action_space`)
        and returns ``(batch, 1)``, e.g. :class:`~skrl_marl_ext.models.QMLP`. Targets have their online model's
        architecture and start from its parameters. Optionally ``"critic_2"`` and ``"target_critic_2"`` for every
        agent: TD3's clipped double Q (Fujimoto et al. 2018), the critics' target the smaller of the two target
        critics' values, the actor following the first critic; recommended (``docs/maddpg.md``).
    :param memories: ``{agent: Memory}``, one distinct skrl memory per agent (e.g. ``RandomMemory``), all with
        ``num_envs=env.num_envs``.
    :param observation_spaces: ``{agent: space}``.
    :param state_spaces: ``{agent: space}`` of the global state, or None when the env has none.
    :param action_spaces: ``{agent: Box or Discrete}``.
    :param device: Device of the computation (skrl's default when None).
    :param cfg: :class:`~skrl_marl_ext.MADDPG_CFG` or a dict of its fields (``{}`` for the defaults).
    """

    cfg_class = MADDPG_CFG
    roles = ROLES
    group_class = MADDPGGroup
    progress_class = MADDPGProgress

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
        """Check the arguments (skrl's ``MultiAgent``'s, keyword-only), form the groups, then set each up: its
        optimisers, targets, noise and preprocessors, and the joint replay."""
        self.roles = ROLES + TWIN_ROLES if self._twin_critics(models) else ROLES
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
        self._form_groups(batchable=self._batchable)
        self.cfg: MADDPG_CFG
        for uid in self.possible_agents:
            for role, model in self.models[uid].items():
                if is_recurrent(model):
                    raise ValueError(
                        f"MADDPG: the {role} model of agent '{uid}' is recurrent (its get_specification() has "
                        "'rnn'); MADDPG replays single transitions and feeds no hidden states. Use an MLP model, or "
                        "MAPPO/IPPO for recurrent ones"
                    )
        self.replay = JointReplay(self.memories, owner=type(self).__name__, possible_agents=self.possible_agents)
        self._obs_sizes = {
            u: compute_space_size(self.observation_spaces[u], occupied_size=True) for u in self.possible_agents
        }
        self.joint_action_size = sum(action_encoding_size(self.action_spaces[u]) for u in self.possible_agents)
        """Width of ``inputs["taken_actions"]`` of every critic."""
        self._first_continuous = next((group.index for group in self.groups if not group.discrete), None)
        """The group whose acting tracks the exploration noise scale (once per step)."""
        self._broadcast_models()  # before the targets copy their online models
        for group in self.groups:
            self._set_up_group(group)
        self._create_memory_tensors()
        if self.cfg.checkpoint_replay:
            for uid in self.possible_agents:
                self.checkpoint_modules[uid]["replay"] = ReplayState(
                    self.replay, uid, noises=self._noises(self.group_of[uid])
                )

    @staticmethod
    def _twin_critics(models: Any) -> bool:
        """Whether the models dicts hold the second critic (refused unless every agent's holds both twin roles)."""
        if not isinstance(models, dict) or not all(isinstance(m, dict) for m in models.values()):
            return False  # the base refuses the models argument with its own message
        having = {uid: [role for role in TWIN_ROLES if role in m] for uid, m in models.items()}
        if not any(having.values()):
            return False
        partial = sorted(uid for uid, roles in having.items() if len(roles) < len(TWIN_ROLES))
        if partial:
            raise ValueError(
                f"MADDPG: models of agents {partial} lack {list(TWIN_ROLES)} that other agents have; clipped double Q "
                f"needs both second-critic roles for every agent (or leave them out for all)"
            )
        return True

    def _noises(self, group: MADDPGGroup) -> dict[str, Any]:
        """The noise objects whose state a ``replay`` checkpoint module keeps (skrl's Ornstein-Uhlenbeck noise has
        some; Gaussian noise none)."""
        noises = {"exploration_noise": group.noise, "smooth_regularization_noise": self.cfg.smooth_regularization_noise}
        return {name: noise for name, noise in noises.items() if noise is not None}

    def _batchable(self, uid: str) -> bool:
        """Agents with models of their own batch unless ``cfg.batch_agent_models`` is off or a preprocessor's
        statistics cannot be stacked."""
        preprocessors = ("observation_preprocessor", "state_preprocessor")
        return self.cfg.batch_agent_models and all(
            stackable_preprocessor(self.cfg.value_for(name, uid)) for name in preprocessors
        )

    def _check_action_spaces(self, action_spaces: dict, possible_agents: list[str]) -> None:
        for uid in possible_agents:
            action_encoding_size(action_spaces[uid])  # Box and Discrete only

    def _state_spaces(self, state_spaces: dict | None, possible_agents: list[str]) -> dict:
        self.env_states = isinstance(state_spaces, dict) and all(
            state_spaces.get(u) is not None for u in possible_agents
        )
        """Whether the critics read the env's state (else the concatenated observations)."""
        return state_spaces if self.env_states else {uid: None for uid in possible_agents}

    def _critic_state_space(self, uid: str) -> gymnasium.Space:
        if self.env_states:
            return self.state_spaces[uid]
        size = sum(self._obs_sizes.values())
        return gymnasium.spaces.Box(-float("inf"), float("inf"), (size,))

    def _set_up_group(self, group: MADDPGGroup) -> None:
        cfg = group.cfg
        group.critic_state_space = self._critic_state_space(group.uids[0])
        group.joint_columns = self._joint_columns(group)
        self._check_models(group)

        group.observation_preprocessor = self._make_preprocessor(group, "observation", group.observation_space)
        group.state_preprocessor = self._make_preprocessor(group, "state", group.critic_state_space)

        self._copy_targets(group)
        actor_lr, critic_lr = cfg.actor_learning_rate, cfg.critic_learning_rate
        group.policy_optimizer = group.make_optimizer(group.parameters("policy"), lr=actor_lr)
        group.critic_optimizer = group.make_optimizer(group.parameters(*group.critic_roles), lr=critic_lr)
        (actor_scheduler, critic_scheduler) = cfg.learning_rate_scheduler
        (actor_kwargs, critic_kwargs) = cfg.learning_rate_scheduler_kwargs
        if actor_scheduler:
            group.policy_schedulers = [actor_scheduler(v, **actor_kwargs) for v in group.policy_optimizer.views()]
        if critic_scheduler:
            group.critic_schedulers = [critic_scheduler(v, **critic_kwargs) for v in group.critic_optimizer.views()]

        if not group.discrete:
            space = group.action_space
            group.low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device).reshape(-1)
            group.high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device).reshape(-1)
            if self.cfg.exploration_noise is None:
                group.noise = GaussianNoise(mean=0.0, std=0.3, device=self.device)
            else:
                group.noise = copy.deepcopy(self.cfg.exploration_noise)

        modules = {role: group.models[role] for role in self.roles}
        modules.update(policy_optimizer=group.policy_optimizer, critic_optimizer=group.critic_optimizer)
        modules.update(
            policy_scheduler=group.policy_schedulers or None, critic_scheduler=group.critic_schedulers or None
        )
        for key in ("observation_preprocessor", "state_preprocessor"):
            modules[key] = getattr(group, key)
        self._register_checkpoint(group, modules)

    def _copy_targets(self, group: MADDPGGroup) -> None:
        """Targets start as frozen copies of the online models (each agent's of a batched group)."""
        name = type(self).__name__
        roles = [("target_policy", "policy"), ("target_critic", "critic")]
        if group.twin:
            roles.append(("target_critic_2", "critic_2"))
        for target_role, role in roles:
            for target, online in zip(group.unique_models(target_role), group.unique_models(role), strict=True):
                try:
                    target.load_state_dict(online.state_dict())
                except RuntimeError as e:
                    raise ValueError(
                        f"{name}: {target_role} of agents {group.uids} does not have the architecture of their "
                        f"{role} ({e}); build it with the same class and arguments"
                    ) from e
                target.freeze_parameters(True)
            for stacked in group.parameters(target_role):
                stacked.requires_grad_(False)

    def _joint_columns(self, group: MADDPGGroup) -> torch.Tensor:
        """The columns of each of the group's agents' action in the joint action, ``(G, action encoding size)``."""
        starts, start = {}, 0
        for uid in self.possible_agents:
            starts[uid] = start
            start += action_encoding_size(self.action_spaces[uid])
        width = action_encoding_size(group.action_space)
        return torch.stack([starts[u] + torch.arange(width) for u in group.uids]).to(self.device)

    def _check_models(self, group: MADDPGGroup) -> None:
        name = type(self).__name__
        uids = group.uids
        for role in ("policy", *group.critic_roles):
            if group.models[role] is group.models[f"target_{role}"]:
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
        self.action_masks.note_observation_mask(group)
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
        dry_run(owner=name, group=group, policy_inputs=policy_inputs, device=self.device)
        group.policy_regularization = self._resolve_policy_regularization(group, policy_inputs)
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
        if group.twin and group.models["critic_2"] is group.critic:
            raise ValueError(
                f"{name}: agents {uids} use one object as critic and critic_2; clipped double Q needs two critics "
                "(build the model twice, so they start from different weights)"
            )
        for role in ("critic", "target_critic", *(TWIN_ROLES if group.twin else ())):
            what = f"the {role} of agents {uids}"
            with torch.no_grad():
                values, _ = call_model(name, what, group.models[role], critic_inputs, role=role, hint=hint)
            expect_shape(name, what, values, (rows, 1), hint=hint)

    def _resolve_policy_regularization(self, group: MADDPGGroup, policy_inputs: dict) -> float:
        """``cfg.policy_regularization`` of the group as a number: None becomes 1e-3 where the policy gives its
        pre-tanh output and 0 (with a warning) where it does not; a weight > 0 for such a policy is refused."""
        weight = group.cfg.policy_regularization
        if group.discrete or weight == 0:
            return 0.0
        with torch.no_grad():
            what = f"the policy of agents {group.uids}"
            _, outputs = call_model(type(self).__name__, what, group.policy, policy_inputs, role="policy", hint="")
        if isinstance(outputs, dict) and outputs.get(PRE_TANH_ACTIONS_KEY) is not None:
            return DEFAULT_POLICY_REGULARIZATION if weight is None else weight
        if weight is None:
            warnings.warn(
                f"{type(self).__name__}: the policy of agents {group.uids} gives no outputs['{PRE_TANH_ACTIONS_KEY}'] "
                f"(its output before the tanh), so the default pre-tanh penalty (policy_regularization=None: "
                f"{DEFAULT_POLICY_REGULARIZATION} where given) is off for them; return it from compute() to have it, "
                "or set policy_regularization=0 to silence this",
                stacklevel=2,
            )
            return 0.0
        raise ValueError(self._no_pre_tanh(group))

    def _no_pre_tanh(self, group: MADDPGGroup) -> str:
        return (
            f"{type(self).__name__}: cfg.policy_regularization is {group.cfg.policy_regularization} but the policy "
            f"of agents {group.uids} gives no outputs['{PRE_TANH_ACTIONS_KEY}'] (its output before the tanh; "
            "skrl_marl_ext.models.DeterministicMLP gives it): return it from compute(), or set policy_regularization=0"
        )

    def _create_memory_tensors(self) -> None:
        """Each agent's replay rows: observations, next observations, actions (indexes for Discrete agents),
        rewards, terminated, truncated, agent mask, states and next states (with the env's state), and for Discrete
        agents the action masks of the observation and of the next observation."""
        uids = self.possible_agents
        spaces = self.action_spaces
        discrete = [u for u in uids if isinstance(spaces[u], gymnasium.spaces.Discrete)]
        create = self.replay.create_tensor
        for name in ("observations", "next_observations"):
            create(name, sizes=self._obs_sizes, dtype=torch.float32)
        actions = {u: 1 if u in discrete else compute_space_size(spaces[u]) for u in uids}
        create("actions", sizes=actions, dtype=torch.float32)
        create("rewards", sizes=dict.fromkeys(uids, 1), dtype=torch.float32)
        for name in ("terminated", "truncated", "agent_mask"):
            create(name, sizes=dict.fromkeys(uids, 1), dtype=torch.bool)
        if self.env_states:
            states = {u: compute_space_size(self.state_spaces[u], occupied_size=True) for u in uids}
            create("states", sizes=states, dtype=torch.float32)
            create("next_states", sizes=states, dtype=torch.float32)
        if discrete:
            sizes = {u: int(spaces[u].n) for u in discrete}
            create("action_mask", sizes=sizes, dtype=torch.bool)
            create("next_action_mask", sizes=sizes, dtype=torch.bool)

    # ------------------------------------------------------------------ acting

    def act(
        self,
        observations: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor | None] | None,
        *,
        timestep: int,
        timesteps: int,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Actions of every agent, one forward pass per group, with exploration noise in training (nothing is stored
        here: see :meth:`record_transition`).

        :param observations: ``{agent: (N, obs_size)}``; agents absent from the dict get no action.
        :param states: ``{agent: (N, state_size) or None}``.
        :param timestep: Current timestep (the noise schedule and ``cfg.random_timesteps`` read it).
        :param timesteps: Number of timesteps.
        :return: ``(actions, outputs)``: ``actions[agent]`` ``(N, action_size)`` (``(N, 1)`` indexes for Discrete
            spaces), ``outputs[agent]`` the policy's outputs. In evaluation the actions are deterministic (no noise,
            greedy) and ``outputs["mean_actions"]`` holds them too, where skrl's trainers look for them.
        """
        timestep, timesteps = self._shift(timestep, timesteps)
        self._input_check.check(locals(), timestep=timestep, training=self.training)  # same shapes every step
        actions, outputs = {}, {}
        with torch.no_grad():
            for group in self.groups:
                if any(uid in observations for uid in group.uids):
                    group_actions, group_outputs = self._act_group(
                        group, observations, states, timestep=timestep, timesteps=timesteps
                    )
                    for uid, (action, agent_outputs) in group.split(observations, group_actions, group_outputs).items():
                        actions[uid], outputs[uid] = action, agent_outputs
        if not self.training:  # acting was deterministic: the same tensors
            outputs[MEAN_ACTIONS_KEY] = dict(actions)
        return actions, outputs

    def _noise_scale(self, timestep: int, timesteps: int) -> float:
        """The noise factor at ``timestep``: linear from the initial to the final scale over ``exploration_timesteps``
        (None: a third of the run's ``timesteps``), the final scale after."""
        initial, final, steps = (
            self.cfg.exploration_initial_scale,
            self.cfg.exploration_final_scale,
            self.cfg.exploration_timesteps,
        )
        if steps is None:
            steps = max(1, (timesteps or 0) // 3)
        return initial + (final - initial) * min(max(timestep, 0) / steps, 1.0)

    def _random_actions(
        self, group: MADDPGGroup, rows: int, mask: torch.Tensor | None = None, *, scale: float
    ) -> torch.Tensor:
        """``rows`` actions of ``cfg.random_timesteps``, always inside the action space: Discrete ones uniform among the
        allowed actions; in a Box, uniform between the bounds where both are finite (as skrl's ``random_act``), and
        where a bound is infinite the exploration noise (times ``scale``, the noise factor of the step) around the
        point of the dimension nearest 0, clipped to its finite bound (``Box(0, inf)``: ``max(0, noise)``)."""
        if group.discrete:
            if mask is None:
                return torch.randint(group.num_actions, (rows, 1), device=self.device)
            # uniform among the allowed actions
            zeros = torch.zeros(rows, group.num_actions, device=self.device)
            return gumbel_max_actions(logits=zeros, mask=mask)
        low, high = group.low, group.high
        uniform = low + (high - low) * torch.rand(rows, low.numel(), device=self.device)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        if bool(bounded.all()):
            return uniform
        centre = torch.maximum(torch.minimum(torch.zeros_like(low), high), low)
        noisy = centre + scale * group.noise.sample((rows, low.numel())).to(low)
        return torch.where(bounded, uniform, torch.maximum(torch.minimum(noisy, high), low))

    def _act_group(
        self, group: MADDPGGroup, observations: dict, states: Any, *, timestep: int, timesteps: int
    ) -> tuple[torch.Tensor, dict, torch.Tensor | None]:
        """One group's actions: in training ``clip(mu(o) + scale * noise, low, high)`` for Box actions and a sample of
        the categorical policy for Discrete ones (uniform during ``cfg.random_timesteps``); in evaluation ``mu(o)``
        and the argmax of the logits. A Discrete group's action masks reach the policy as ``inputs["action_mask"]``;
        without one (e.g. the first step after ``reset()`` for masks given through infos) every action is allowed.
        """
        raw_obs = group.stack(observations)
        G, n = group.size, raw_obs.shape[1]
        mask = self.action_masks.of_group(group, raw_obs)  # (G * n, num_actions) or None
        if self.training and timestep < self.cfg.random_timesteps:
            scale = self._noise_scale(timestep, timesteps)
            return self._random_actions(group, G * n, mask, scale=scale).view(G, n, -1), {}
        obs = group.preprocess("observation", raw_obs, agent_dim=0)
        raw_states = group.stack(states) if self.env_states and states else None
        group_states = None
        if raw_states is not None:
            group_states = group.preprocess("state", raw_states, agent_dim=0)
        inputs = {"observations": obs, "states": group_states}
        if mask is not None:
            inputs[ACTION_MASK_KEY] = mask.view(G, n, -1)
        with self._autocast():
            group_actions, group_outputs = group.act("policy", inputs)
        if group.discrete:
            if not self.training:
                logits = mask_logits(self._logits(group.policy, "policy"), mask)
                group_actions = logits.argmax(dim=-1, keepdim=True).view(G, n, 1)
        else:
            group_actions = group_actions.float()
            scale = self._noise_scale(timestep, timesteps)
            if self.training and scale > 0:
                noise = group.noise.sample((G * n, group_actions.shape[-1])).to(group_actions).view(G, n, -1)
                group_actions = group_actions + scale * noise
            if self.training and scale != 1.0 and group.index == self._first_continuous:
                self.track_data("Exploration / Exploration noise scale", scale)
            group_actions = torch.maximum(torch.minimum(group_actions, group.high), group.low)
        return group_actions, group_outputs

    # ------------------------------------------------------------------ record_transition

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
        """Store one env step of every agent in the joint replay (skrl's episode tracking runs first).

        ``infos["action_mask"]`` is kept for the next :meth:`act` (in evaluation too); in training the step is stored
        with ``infos["agent_mask"]`` and ``infos["final_observations"]`` / ``["final_states"]`` (see :meth:`_record`).
        Parameters are skrl's: ``{agent: tensor}`` dicts, rewards, terminated and truncated of shape ``(N, 1)``.
        """
        step, infos = self._recorded_step(locals())  # shifted, checked, tracked by skrl
        acted_masks = self.action_masks.from_infos  # the masks act() used for ``observations``
        self.action_masks.keep(infos, self.group_of)  # the masks of next_observations, for the next act
        if self.training:
            self._record(step, infos=infos, acted_masks=acted_masks)

    def _record(self, step: dict[str, Any], *, infos: dict, acted_masks: dict | None) -> None:
        """Store the transition of every agent, one row of each agent's memory (the rows stay aligned).

        Agents absent from the observations, or masked by ``infos["agent_mask"]``, get a False agent mask (absent ones
        a zero row): no loss or preprocessor statistic reads them. Discrete agents' rows also store ``action_mask``
        (the mask acted on: the previous step's ``infos["action_mask"]`` or the Dict observation's) and
        ``next_action_mask`` (this step's), all True where none was given.
        """
        num_envs = next(iter(step["observations"].values())).shape[0]
        self.replay.check_num_envs(num_envs)
        agent_masks = {  # each group's (G, num_envs, 1) agent mask, once per step
            group.index: agent_mask(group, step["observations"], infos.get(AGENT_MASK_KEY), num_envs, self.device)
            for group in self.groups
        }
        rows = {
            uid: self._agent_row(uid, step, infos, acted_masks, num_envs, agent_masks) for uid in self.possible_agents
        }
        self._non_finite_skipped += self.replay.add(rows, skip_non_finite=self.cfg.non_finite == "skip")

    def _agent_row(
        self, uid: str, step: dict, infos: dict, acted_masks: Any, num_envs: int, agent_masks: dict
    ) -> dict[str, torch.Tensor]:
        """Agent ``uid``'s replay row of one step, ``{name: (num_envs, size)}``; zeros and a False agent mask when
        the agent is absent from the observations (``agent_masks``: each group's, by group index)."""

        def get(tensors, size, dtype=torch.float32):
            x = tensors.get(uid) if isinstance(tensors, dict) else None
            if x is None:
                return torch.zeros(num_envs, size, dtype=dtype, device=self.device)
            return x.reshape(num_envs, -1).to(dtype)

        group = self.group_of[uid]
        mask = agent_masks[group.index]
        reward = get(step["rewards"], 1)
        if self.cfg.rewards_shaper is not None:
            reward = self.cfg.rewards_shaper(reward, step["timestep"], step["timesteps"])
        obs_size = self._obs_sizes[uid]
        row = {
            "observations": get(step["observations"], obs_size),
            "next_observations": get(step["next_observations"], obs_size),
            "actions": get(step["actions"], self.replay.width(uid, "actions")),
            "rewards": reward,
            "terminated": get(step["terminated"], 1, torch.bool),
            "truncated": get(step["truncated"], 1, torch.bool),
            "agent_mask": mask[group.uids.index(uid)],
        }
        if self.env_states:
            size = self.replay.width(uid, "states")
            row["states"] = get(step["states"], size)
            row["next_states"] = get(step["next_states"], size)
        self._use_final_observations(uid, row, infos.get(FINAL_OBSERVATIONS_KEY), infos.get(FINAL_STATES_KEY), get)
        if group.discrete:
            if group.mask_in_observations:
                row["action_mask"] = self.action_masks.of_observations(group, row["observations"])
                row["next_action_mask"] = self.action_masks.of_observations(group, row["next_observations"])
            else:
                row["action_mask"] = self.action_masks.of_infos(uid, num_envs, acted_masks)
                row["next_action_mask"] = self.action_masks.of_infos(uid, num_envs, self.action_masks.from_infos)
        return row

    def _use_final_observations(self, uid: str, samples: dict, finals: Any, final_states: Any, get: Callable) -> None:
        """Where an episode ended and the env handed its final observation (and state) in the infos
        (:data:`~skrl_marl_ext.keys.FINAL_OBSERVATIONS_KEY`), store those as the row's next observation (and next
        state) instead of the next episode's first one, which an env that resets in place returns."""
        if not isinstance(finals, dict) or finals.get(uid) is None:
            return
        ended = samples["terminated"] | samples["truncated"]
        final = get(finals, self._obs_sizes[uid])
        samples["next_observations"] = torch.where(ended, final, samples["next_observations"])
        if self.env_states and isinstance(final_states, dict) and final_states.get(uid) is not None:
            final_state = get(final_states, samples["next_states"].shape[-1])
            samples["next_states"] = torch.where(ended, final_state, samples["next_states"])

    # ------------------------------------------------------------------ post_interaction and update

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Count the step; from ``cfg.learning_starts`` on, ``cfg.gradient_steps`` gradient steps; then skrl's
        tracking and checkpoints at their intervals.

        :param timestep: Current timestep (the trainer's, from 0; shifted by the steps completed before a load).
        :param timesteps: Number of timesteps.
        """
        timestep, timesteps = self._shift(timestep, timesteps)
        if self.training:
            self.progress.timestep = timestep + 1
        if self.training and timestep >= self.cfg.learning_starts and len(self.replay):
            start = time.perf_counter()
            self._online_training_mode(True)
            for _ in range(self.cfg.gradient_steps):
                self._gradient_step()
            self._online_training_mode(False)
            self.track_data("Stats / Algorithm update time (ms)", (time.perf_counter() - start) * 1000.0)
            if self.cfg.non_finite == "skip":
                self.track_data("Stats / Non-finite samples skipped", float(self._non_finite_skipped))
        self._track_and_checkpoint(timestep=timestep, timesteps=timesteps)

    def _online_training_mode(self, enabled: bool) -> None:
        """Training mode of the policies and critics (the targets only ever evaluate)."""
        for group in self.groups:
            for role in ("policy", *group.critic_roles):
                group.models[role].enable_training_mode(enabled)

    def update(self, *, timestep: int, timesteps: int, uid: str) -> None:
        """Run ``cfg.gradient_steps`` gradient steps (skrl's per-agent entry point). One batch of joint transitions
        serves every agent, so every group is updated, whichever ``uid`` is given.

        :param timestep: Current timestep.
        :param timesteps: Number of timesteps.
        :param uid: Agent name.
        """
        if uid not in self.group_of:
            raise ValueError(
                f"{type(self).__name__}.update: unknown agent '{uid}'; choose one of {self.possible_agents}"
            )
        for _ in range(self.cfg.gradient_steps):
            self._gradient_step()

    # ------------------------------------------------------------------ update: one gradient step

    def _gradient_step(self) -> None:
        """One gradient step of every group on one batch of joint transitions, in phases: sample, critic targets,
        critic step, the actor step (every ``cfg.policy_delay`` gradient steps), then the target updates."""
        batch, joint_taken = self._sample()
        joint_next, next_critic_states = self._next_joint_action(batch)
        self.progress.gradient_steps += 1
        policy_step = self.progress.gradient_steps % self.cfg.policy_delay == 0
        stats, stepped = [], {}
        for group in self.groups:
            targets = self._critic_targets(group, batch, joint_next, next_critic_states[group.index])
            critic_stepped, critic = self._critic_step(group, batch, joint_taken, targets)
            policy_stepped, q_pi = self._actor_step(group, batch, joint_taken) if policy_step else (False, None)
            # a schedule counts the optimiser steps that happened (torch warns of a scheduler stepped before one)
            stepped[group.index] = (
                (group.policy_schedulers, policy_stepped),
                (group.critic_schedulers, critic_stepped),
            )
            stats.append(self._group_stats(critic, q_pi))
        self.scaler.update()  # once per gradient step, after every optimiser has stepped
        self._update_targets(policy_step=policy_step, stepped=stepped)
        self._track(stats, policy_step=policy_step)

    def sample_indexes(self) -> torch.Tensor:
        """One set of ``cfg.batch_size`` row indexes (with replacement) into the filled part of the memories.

        The same indexes are read from every agent's memory, so row ``b`` of every batch is one joint transition.
        """
        return self.replay.sample_indexes(self.cfg.batch_size)

    def sample_batch(self, indexes: torch.Tensor | None = None) -> dict[str, dict[str, torch.Tensor]]:
        """Read the rows ``indexes`` (:meth:`sample_indexes` when None) of every agent's memory.

        :return: ``{agent: {tensor name: (batch, size)}}``; Discrete agents' also hold ``"action_mask"`` and
            ``"next_action_mask"``, bool ``(batch, n)``.
        """
        return self.replay.sample(self.sample_indexes() if indexes is None else indexes, device=self.device)

    def _sample(self) -> tuple[dict, torch.Tensor]:
        """Sample phase: a batch of joint transitions (:meth:`sample_batch`), the preprocessors' statistics updated
        from it, and the stored joint action as the critics read it, ``(B, joint size)``."""
        batch = self.sample_batch()
        for group in self.groups:
            self._update_statistics(group, batch)
        taken = {u: self._encode_actions(u, batch[u]["actions"]) for u in self.possible_agents}
        return batch, self._joint(taken)

    def _update_statistics(self, group: MADDPGGroup, batch: dict) -> None:
        mask = self._per_agent(group, batch, "agent_mask")  # (G, B, 1)
        if group.observation_preprocessor is not identity:
            obs = self._per_agent(group, batch, "observations")
            group.update_statistics("observation", obs, mask, agent_dim=0)
        if group.state_preprocessor is not identity:
            if self.env_states:
                group.update_statistics("state", self._per_agent(group, batch, "states"), mask, agent_dim=0)
            else:  # one joint observation for the group: where any agent is alive (each agent's own: where it is)
                joint_obs = torch.cat([batch[u]["observations"] for u in self.possible_agents], dim=-1)
                mask = mask if group.own_models else mask.any(dim=0, keepdim=True)
                group.update_statistics("state", joint_obs.unsqueeze(0), mask, agent_dim=0)

    def _encode_actions(self, uid: str, actions: torch.Tensor) -> torch.Tensor:
        space = self.action_spaces[uid]
        if isinstance(space, gymnasium.spaces.Discrete):
            return one_hot_actions(actions, int(space.n))
        return actions

    def _joint(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([parts[u] for u in self.possible_agents], dim=-1)

    def _next_joint_action(self, batch: dict) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The next joint action ``a' = (mu'_1(o'_1), ..., mu'_n(o'_n))`` of the target policies, ``(B, joint size)``
        (for discrete agents the one-hot argmax of the logits masked with the stored ``next_action_mask``; with
        ``cfg.smooth_regularization_noise`` TD3's smoothing), and each group's preprocessed next critic states."""
        next_actions, next_states = {}, {}
        with torch.no_grad(), self._autocast():
            for group in self.groups:
                obs, group_states, next_states[group.index] = self._group_inputs(group, batch, next_=True)
                inputs = {"observations": obs, "states": group_states}
                mask = self._group_action_mask(group, batch, next_=True)
                if mask is not None:
                    inputs[ACTION_MASK_KEY] = mask.view(group.size, obs.shape[1], -1)
                a, _ = group.act("target_policy", inputs)
                if group.discrete:
                    logits = mask_logits(self._logits(group.target_policy, "target_policy"), mask)
                    a = one_hot_actions(logits.argmax(dim=-1), group.num_actions)
                elif self.cfg.smooth_regularization_noise is not None:
                    a = a.reshape(-1, a.shape[-1])  # one noise row per (agent, sample)
                    noise = self.cfg.smooth_regularization_noise.sample(a.shape).to(a)
                    clip = self.cfg.smooth_regularization_clip
                    a = smooth_target_actions(actions=a, noise=noise, noise_clip=clip, low=group.low, high=group.high)
                a = a.float().view(group.size, -1, a.shape[-1])
                for i, uid in enumerate(group.uids):
                    next_actions[uid] = a[i]
        return self._joint(next_actions), next_states

    def _critic_targets(
        self, group: MADDPGGroup, batch: dict, joint_next: torch.Tensor, next_critic_states: torch.Tensor
    ) -> torch.Tensor:
        """Critic targets phase: ``y = r + gamma (1 - d) Q'(s', a')`` (the smaller of the twin target critics),
        ``(G, B, 1)``, from the next joint action and the group's next critic states ``(G, B, S)``."""
        G, B = group.size, joint_next.shape[0]
        inputs = {"states": next_critic_states, "taken_actions": joint_next.unsqueeze(0).repeat(G, 1, 1)}
        roles = [f"target_{role}" for role in group.critic_roles]
        with torch.no_grad(), self._autocast():
            # the (twin) target critics in one call for a batched group
            next_qs = [q.float().view(G, B, 1) for q, _ in group.act_many(*((role, inputs) for role in roles))]
            return critic_target(
                rewards=self._per_agent(group, batch, "rewards"),
                next_q_values=next_qs,
                terminated=self._per_agent(group, batch, "terminated"),
                discount_factor=group.cfg.discount_factor,
            )

    def _critic_step(
        self, group: MADDPGGroup, batch: dict, joint_taken: torch.Tensor, targets: torch.Tensor
    ) -> tuple[bool, dict[str, torch.Tensor]]:
        """Critic phase: one optimiser step of the group's critic(s) on ``(Q_k(s, a) - y)^2``, summed over twin
        critics. Rows of masked agents, and truncated rows unless ``cfg.time_limit_bootstrap`` (their next
        observation may be the next episode's), are left out.

        :return: Whether the optimiser stepped, and ``{"q", "target", "error", "mask", "agent_mask"}``, ``(G, B, 1)``.
        """
        G, B = group.size, joint_taken.shape[0]
        agent_mask = self._per_agent(group, batch, "agent_mask")
        mask = agent_mask
        if not group.cfg.time_limit_bootstrap:
            mask = mask & ~self._per_agent(group, batch, "truncated")
        _, _, critic_states = self._group_inputs(group, batch, next_=False)
        inputs = {"states": critic_states, "taken_actions": joint_taken.unsqueeze(0).repeat(G, 1, 1)}
        with self._autocast():
            # both critics in one call for a batched group
            qs = [q.float().view(G, B, 1) for q, _ in group.act_many(*((r, inputs) for r in group.critic_roles))]
            loss = critic_loss(q_values=qs, targets=targets, mask=mask, per_agent=group.own_models)
        stepped = self._optimizer_step(
            group.critic_optimizer,
            loss["loss"],
            group.parameters(*group.critic_roles),
            group.cfg.grad_norm_clip,
            count=bool(group.critic_schedulers),
        )
        error = loss["squared_error"].detach()
        return stepped, {"q": qs[0].detach(), "target": targets, "error": error, "mask": mask, "agent_mask": agent_mask}

    def _actor_step(self, group: MADDPGGroup, batch: dict, joint_taken: torch.Tensor) -> tuple[bool, torch.Tensor]:
        """Actor phase: one optimiser step of the group's policy on ``-Q_1(s, a_1, .., mu_i(o_i), .., a_n)`` (plus the
        pre-tanh penalty): only agent ``i``'s own action comes from its policy (for discrete agents the
        straight-through Gumbel-softmax of the logits masked with the stored ``action_mask``), so agent ``i``'s loss
        reaches no other agent's policy.

        :return: Whether the optimiser stepped, and ``Q`` of the policy actions, ``(G, B, 1)``.
        """
        cfg, G = group.cfg, group.size
        obs, group_states, critic_states = self._group_inputs(group, batch, next_=False)
        inputs = {"observations": obs, "states": group_states}
        action_mask = self._group_action_mask(group, batch, next_=False)
        if action_mask is not None:
            inputs[ACTION_MASK_KEY] = action_mask.view(G, obs.shape[1], -1)
        with self._autocast():
            own, outputs = group.act("policy", inputs)
            if group.discrete:
                logits = self._logits(group.policy, "policy").float()
                own = gumbel_softmax_st(logits=logits, temperature=cfg.gumbel_temperature, mask=action_mask)
            own = own.float().view(G, -1, own.shape[-1])
            B = own.shape[1]
            joint = joint_with_own_actions(joint_actions=joint_taken, own_actions=own, columns=group.joint_columns)
            q_pi, _ = group.act("critic", {"states": critic_states, "taken_actions": joint.contiguous()})
            q_pi = q_pi.float().view(G, B, 1)
            loss = actor_loss(
                q_values=q_pi,
                mask=self._per_agent(group, batch, "agent_mask"),
                pre_tanh=self._pre_tanh(group, outputs, G, B),
                regularization=group.policy_regularization,
                per_agent=group.own_models,
            )
        stepped = self._optimizer_step(
            group.policy_optimizer,
            loss["loss"],
            group.parameters("policy"),
            cfg.grad_norm_clip,
            count=bool(group.policy_schedulers),
        )
        return stepped, q_pi.detach()

    def _update_targets(self, *, policy_step: bool, stepped: dict[int, tuple]) -> None:
        """Polyak phase: on the actor's steps every target follows its online model (stacked tensors for a batched
        group: one update for all agents); then the schedulers of the optimisers that stepped."""
        for group in self.groups:
            for role in ("policy", *group.critic_roles) if policy_step else ():
                target, online = group.parameters(f"target_{role}"), group.parameters(role)
                polyak_update_(target=target, online=online, polyak=group.cfg.polyak)
            for schedulers, optimizer_stepped in stepped[group.index]:
                for scheduler in schedulers if optimizer_stepped else ():
                    scheduler.step()

    @staticmethod
    def _group_stats(critic: dict[str, torch.Tensor], q_pi: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Per agent of the group, ``(G,)`` each: the tracked statistics of one gradient step by name."""
        q, mask, big = critic["q"], critic["agent_mask"], torch.finfo(torch.float32).max
        with torch.no_grad():
            return {
                "critic_loss": masked_mean(critic["error"], critic["mask"], dim=(1, 2)),
                "policy_loss": -masked_mean(q_pi if q_pi is not None else q, mask, dim=(1, 2)),
                "q_mean": masked_mean(q, mask, dim=(1, 2)),
                "q_min": q.masked_fill(~mask, big).amin(dim=(1, 2)),
                "q_max": q.masked_fill(~mask, -big).amax(dim=(1, 2)),
                "target_mean": masked_mean(critic["target"], critic["mask"], dim=(1, 2)),
            }

    def _track(self, stats: list[dict[str, torch.Tensor]], *, policy_step: bool = True) -> None:
        """Track each group's statistics (:meth:`_group_stats`, in group order): one host read per gradient step."""
        names = list(stats[0])
        values = dict(zip(names, torch.stack([torch.cat([s[n] for s in stats]) for n in names]).tolist(), strict=True))
        i = 0
        for group in self.groups:
            policy_lr = group.policy_optimizer.param_groups[0]["lr"]
            critic_lr = group.critic_optimizer.param_groups[0]["lr"]
            for uid in group.uids:
                self.track_data(f"Loss / Critic loss ({uid})", values["critic_loss"][i])
                if policy_step:  # skrl's TD3 tracks the policy loss on the actor's steps only
                    self.track_data(f"Loss / Policy loss ({uid})", values["policy_loss"][i])
                self.track_data(f"Q-network / Q ({uid}) (mean)", values["q_mean"][i])
                self.track_data(f"Q-network / Q ({uid}) (min)", values["q_min"][i])
                self.track_data(f"Q-network / Q ({uid}) (max)", values["q_max"][i])
                self.track_data(f"Target / Target ({uid}) (mean)", values["target_mean"][i])
                self.track_data(f"Learning / Policy learning rate ({uid})", policy_lr)
                self.track_data(f"Learning / Critic learning rate ({uid})", critic_lr)
                i += 1

    # ------------------------------------------------------------------ update: inputs of the models

    def _group_inputs(self, group: MADDPGGroup, batch: dict, *, next_: bool) -> tuple[torch.Tensor, ...]:
        """Preprocessed ``(G, B, size)`` policy observations, policy states (or None) and critic states."""
        prefix = "next_" if next_ else ""
        G = group.size
        raw_obs = self._per_agent(group, batch, f"{prefix}observations")  # (G, B, o)
        obs = group.preprocess("observation", raw_obs, agent_dim=0).contiguous()
        if self.env_states:
            raw_states = self._per_agent(group, batch, f"{prefix}states")  # (G, B, S)
            states = group.preprocess("state", raw_states, agent_dim=0).contiguous()
            return obs, states, states
        joint_obs = torch.cat([batch[u][f"{prefix}observations"] for u in self.possible_agents], dim=-1)  # (B, S)
        critic_states = group.preprocess("state", joint_obs.unsqueeze(0), agent_dim=0)
        return obs, None, critic_states.expand(G, *critic_states.shape[1:]).contiguous()

    def _group_action_mask(self, group: MADDPGGroup, batch: dict, *, next_: bool) -> torch.Tensor | None:
        """The stored action masks of the group's rows, bool ``(G * B, n)`` (``next_action_mask`` when ``next_``);
        None for continuous agents."""
        if not group.discrete:
            return None
        key = "next_action_mask" if next_ else "action_mask"
        return torch.cat([batch[u][key] for u in group.uids])

    def _per_agent(self, group: MADDPGGroup, batch: dict, key: str) -> torch.Tensor:
        return torch.stack([batch[u][key] for u in group.uids])  # (G, B, size)

    @staticmethod
    def _logits(policy: Model, role: str) -> torch.Tensor:
        """Logits (log-probabilities) of a categorical policy's last call: its distribution's, whether the network
        gives logits or probabilities (the argmax and the Gumbel-softmax do not see the per-row constant)."""
        return policy.distribution(role=role).logits

    def _pre_tanh(self, group: MADDPGGroup, outputs: Any, G: int, B: int) -> torch.Tensor | None:
        """The policy's output before the tanh, ``(G, B, A)``, where the group's actor loss penalises it."""
        if not group.policy_regularization or group.discrete:
            return None
        pre_tanh = outputs.get(PRE_TANH_ACTIONS_KEY) if isinstance(outputs, dict) else None
        if pre_tanh is None:
            raise ValueError(self._no_pre_tanh(group))
        return pre_tanh.float().view(G, B, -1)
