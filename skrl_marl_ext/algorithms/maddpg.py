"""MADDPG: multi-agent DDPG with centralised critics (Lowe et al. 2017, https://arxiv.org/abs/1706.02275).

Every agent ``i`` has a deterministic policy ``mu_i(o_i)`` (continuous actions) or a categorical policy trained
through a straight-through Gumbel-softmax (discrete actions), and a critic ``Q_i(s, a_1, ..., a_n)`` that reads the
global state and *every* agent's action. With ``B`` joint transitions drawn from the replay memories:

- critic: ``L_i = mean_b (Q_i(s, a_1..a_n) - y_i)^2``, ``y_i = r_i + gamma (1 - terminated_i) Q'_i(s', a'_1..a'_n)``
  with ``a'_j = mu'_j(o'_j)`` from the target policies (greedy one-hot for discrete agents);
- actor: ``J_i = -mean_b Q_i(s, a_1, .., mu_i(o_i), .., a_n)``: only agent ``i``'s action is replaced by its
  policy's (differentiable) one, the others are the stored ones;
- targets: ``target = polyak * online + (1 - polyak) * target`` after every gradient step (skrl's convention).

The same critic objects given to every agent, each agent its own policy, make one team critic (HARL's MADDPG): one
``Q(s, a_1, ..., a_n)`` trained on the team's mean reward, every agent's actor loss taken from it.

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
import warnings
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.resources.noises.torch import GaussianNoise
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext.algorithms.maddpg_cfg import MADDPG_CFG
from skrl_marl_ext.algorithms.off_policy import OffPolicyAgent, OffPolicyGroup, OffPolicyProgress
from skrl_marl_ext.checks.arguments import call_model, dry_run
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
from skrl_marl_ext.keys import ACTION_MASK_KEY, PRE_TANH_ACTIONS_KEY
from skrl_marl_ext.models.masked_categorical import mask_logits

ROLES = ("policy", "target_policy", "critic", "target_critic")
"""Model roles every agent needs (skrl DDPG's names)."""
TWIN_ROLES = ("critic_2", "target_critic_2")
"""Optional second critic and its target (TD3's clipped double Q): every agent has both, or no agent has either."""

DEFAULT_POLICY_REGULARIZATION = 1e-3
"""``cfg.policy_regularization`` where it is None and the policy gives its pre-tanh output (the MADDPG paper code's)."""


MADDPGProgress = OffPolicyProgress
"""MADDPG's checkpoint module ``progress``: the steps completed and the gradient steps taken (the actors and the
targets step when their count is a multiple of ``cfg.policy_delay``)."""


@dataclasses.dataclass(eq=False)
class MADDPGGroup(OffPolicyGroup):
    """A MADDPG group: its four (or six) models, two optimisers, exploration noise and action bounds."""

    policy_regularization: float = 0.0
    """The weight of the pre-tanh penalty, ``cfg.policy_regularization`` resolved at construction."""
    noise: Any = None

    target_policy = property(lambda self: self.models["target_policy"])
    target_critic = property(lambda self: self.models["target_critic"])


class MADDPG(OffPolicyAgent):
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
        self.cfg: MADDPG_CFG
        critic_roles = tuple(role for role in self.roles if "critic" in role)
        team = self._is_team_critic(critic_roles)
        if team:
            self.roles = ("policy", "target_policy")  # the groups hold the policies; the team critic is a group
        self._form_groups(batchable=self._batchable)
        self._refuse_recurrent()
        self._make_replay()
        self._first_continuous = next((group.index for group in self.groups if not group.discrete), None)
        """The group whose acting tracks the exploration noise scale (once per step)."""
        self._broadcast_models()  # before the targets copy their online models
        self.team_critic = self._make_team_critic(critic_roles) if team else None
        for group in self.groups:
            self._set_up_group(group)
        self._create_memory_tensors()
        self._keep_replay(lambda uid: self._noises(self.group_of[uid]))

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

    def _set_up_group(self, group: MADDPGGroup) -> None:
        team = self.team_critic
        group.critic_state_space = self._critic_state_space(group.uids[0])
        group.joint_columns = self._joint_columns(group)
        group.critics = team if team is not None else group
        self._check_models(group)

        group.observation_preprocessor = self._make_preprocessor(group, "observation", group.observation_space)
        if team is None:
            group.state_preprocessor = self._make_preprocessor(group, "state", group.critic_state_space)
        else:  # the policies read the state the team critic's statistics scale
            group.state_preprocessor = team.state_preprocessor

        # a group under a team critic has no critic roles: its policy's target only
        pairs = [("target_policy", "policy"), *((f"target_{role}", role) for role in group.critic_roles)]
        self._copy_targets(group, pairs)
        self._set_up_optimizers(group)
        self._set_bounds(group)
        if not group.discrete:
            if self.cfg.exploration_noise is None:
                group.noise = GaussianNoise(mean=0.0, std=0.3, device=self.device)
            else:
                group.noise = copy.deepcopy(self.cfg.exploration_noise)

        modules = {role: group.models[role] for role in self.roles}
        modules.update(policy_optimizer=group.policy_optimizer, critic_optimizer=group.critic_optimizer)
        modules.update(
            policy_scheduler=group.policy_schedulers or None, critic_scheduler=group.critic_schedulers or None
        )
        modules["observation_preprocessor"] = group.observation_preprocessor
        if team is None:
            modules["state_preprocessor"] = group.state_preprocessor
        self._register_checkpoint(group, modules)

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
        if group.critics is group:
            self._check_critics(group, ("critic", "target_critic", *(TWIN_ROLES if group.twin else ())), rows)

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

    # ------------------------------------------------------------------ acting

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
            noise = group.noise  # this step's exploration noise where a bound is infinite
            actions = self._random_actions(group, G * n, mask, noise=lambda shape: scale * noise.sample(shape))
            return actions.view(G, n, -1), {}
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

    # ------------------------------------------------------------------ update: one gradient step

    def _gradient_step(self) -> None:
        """One gradient step on one batch of joint transitions, in phases: sample, the next joint action, each critic
        group's targets and step, every group's actor step (every ``cfg.policy_delay`` gradient steps), then the
        target updates."""
        batch, joint_taken = self._sample()
        joint_next, next_critic_states = self._next_joint_action(batch)
        self.progress.gradient_steps += 1
        policy_step = self.progress.gradient_steps % self.cfg.policy_delay == 0
        critic_stats, actor_stats, stepped = {}, {}, []
        for critics in self.critic_groups:
            targets = self._critic_targets(critics, batch, joint_next, next_critic_states[critics.index])
            critic_stepped, critic_stats[critics.index] = self._critic_step(critics, batch, joint_taken, targets)
            # a schedule counts the optimiser steps that happened (torch warns of a scheduler stepped before one)
            stepped.append((critics.critic_schedulers, critic_stepped))
        if policy_step:
            critic_parameters = [p for critics in self.critic_groups for p in critics.parameters(*critics.critic_roles)]
            with self._frozen(critic_parameters):
                for group in self.groups:
                    policy_stepped, actor_stats[group.index] = self._actor_step(group, batch, joint_taken)
                    stepped.append((group.policy_schedulers, policy_stepped))
        self.scaler.update()  # once per gradient step, after every optimiser has stepped
        self._update_targets(policy_step=policy_step, stepped=stepped)
        self._track(critic_stats, actor_stats)

    def _next_joint_action(self, batch: dict) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The next joint action ``a' = (mu'_1(o'_1), ..., mu'_n(o'_n))`` of the target policies, ``(B, joint size)``
        (for discrete agents the one-hot argmax of the logits masked with the stored ``next_action_mask``; with
        ``cfg.smooth_regularization_noise`` TD3's smoothing), and each critic group's preprocessed next critic
        states by group index."""
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
            if self.team_critic is not None:
                next_states[self.team_critic.index] = self._group_inputs(self.team_critic, batch, next_=True)[2]
        return self._joint(next_actions), next_states

    def _critic_targets(
        self, critics: MADDPGGroup, batch: dict, joint_next: torch.Tensor, next_critic_states: torch.Tensor
    ) -> torch.Tensor:
        """Critic targets phase: ``y = r + gamma (1 - d) Q'(s', a')`` (the smaller of the twin target critics),
        ``(G, B, 1)``, from the next joint action and the critic group's next critic states ``(G, B, S)``."""
        G, B = critics.size, joint_next.shape[0]
        rows = self._critic_rows(critics, batch)
        inputs = {"states": next_critic_states, "taken_actions": joint_next.unsqueeze(0).repeat(G, 1, 1)}
        roles = [f"target_{role}" for role in critics.critic_roles]
        with torch.no_grad(), self._autocast():
            # the (twin) target critics in one call for a batched group
            next_qs = [q.float().view(G, B, 1) for q, _ in critics.act_many(*((role, inputs) for role in roles))]
            return critic_target(
                rewards=rows["rewards"],
                next_q_values=next_qs,
                terminated=rows["terminated"],
                discount_factor=self._discount(critics, rows),
            )

    def _critic_step(
        self, critics: MADDPGGroup, batch: dict, joint_taken: torch.Tensor, targets: torch.Tensor
    ) -> tuple[bool, dict[str, torch.Tensor]]:
        """Critic phase: one optimiser step of the group's critic(s) (or the team critic's) on
        ``(Q_k(s, a) - y)^2``, summed over twin critics, over the rows :meth:`_critic_mask` keeps.

        :return: Whether the optimiser stepped, and ``{"q", "target", "error", "mask", "agent_mask"}``, ``(G, B, 1)``.
        """
        G, B = critics.size, joint_taken.shape[0]
        rows = self._critic_rows(critics, batch)
        mask = self._critic_mask(critics, rows)
        _, _, critic_states = self._group_inputs(critics, batch, next_=False)
        inputs = {"states": critic_states, "taken_actions": joint_taken.unsqueeze(0).repeat(G, 1, 1)}
        with self._autocast():
            # both critics in one call for a batched group
            qs = [q.float().view(G, B, 1) for q, _ in critics.act_many(*((r, inputs) for r in critics.critic_roles))]
            loss = critic_loss(q_values=qs, targets=targets, mask=mask, per_agent=critics.own_models)
        stepped = self._optimizer_step(
            critics.critic_optimizer,
            loss["loss"],
            critics.parameters(*critics.critic_roles),
            critics.cfg.grad_norm_clip,
            count=bool(critics.critic_schedulers),
        )
        error = loss["squared_error"].detach()
        agent_mask = rows["agent_mask"]
        return stepped, {"q": qs[0].detach(), "target": targets, "error": error, "mask": mask, "agent_mask": agent_mask}

    def _actor_step(
        self, group: MADDPGGroup, batch: dict, joint_taken: torch.Tensor
    ) -> tuple[bool, dict[str, torch.Tensor]]:
        """Actor phase: one optimiser step of the group's policy on ``-Q_1(s, a_1, .., mu_i(o_i), .., a_n)`` (plus the
        pre-tanh penalty): only agent ``i``'s own action comes from its policy (for discrete agents the
        straight-through Gumbel-softmax of the logits masked with the stored ``action_mask``), so agent ``i``'s loss
        reaches no other agent's policy. ``Q_1`` is the group's first critic, or the team critic's.

        :return: Whether the optimiser stepped, and ``{"q": Q of the policy actions, "mask": the agents' masks}``,
            ``(G, B, 1)`` each.
        """
        cfg, G = group.cfg, group.size
        obs, group_states, critic_states = self._group_inputs(group, batch, next_=False)
        inputs = {"observations": obs, "states": group_states}
        action_mask = self._group_action_mask(group, batch, next_=False)
        if action_mask is not None:
            inputs[ACTION_MASK_KEY] = action_mask.view(G, obs.shape[1], -1)
        mask = self._per_agent(group, batch, "agent_mask")
        with self._autocast():
            own, outputs = group.act("policy", inputs)
            if group.discrete:
                logits = self._logits(group.policy, "policy").float()
                own = gumbel_softmax_st(logits=logits, temperature=cfg.gumbel_temperature, mask=action_mask)
            own = own.float().view(G, -1, own.shape[-1])
            B = own.shape[1]
            joint = joint_with_own_actions(joint_actions=joint_taken, own_actions=own, columns=group.joint_columns)
            if group.critics is group:
                q_pi, _ = group.act("critic", {"states": critic_states, "taken_actions": joint.contiguous()})
            else:  # the team critic: the G agents' rows as one batch of its state
                _, _, team_states = self._group_inputs(group.critics, batch, next_=False)  # (1, B, S)
                states = team_states.expand(G, B, -1).reshape(1, G * B, -1)
                q_pi, _ = group.critics.act("critic", {"states": states, "taken_actions": joint.reshape(1, G * B, -1)})
            q_pi = q_pi.float().view(G, B, 1)
            loss = actor_loss(
                q_values=q_pi,
                mask=mask,
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
        return stepped, {"q": q_pi.detach(), "mask": mask}

    def _update_targets(self, *, policy_step: bool, stepped: list[tuple[list, bool]]) -> None:
        """Polyak phase: on the actor's steps every target follows its online model (stacked tensors for a batched
        group: one update for all agents); then the schedulers of the optimisers that stepped."""
        for group in self.groups if policy_step else ():
            polyak_update_(
                target=group.parameters("target_policy"), online=group.parameters("policy"), polyak=group.cfg.polyak
            )
        for critics in self.critic_groups if policy_step else ():
            for role in critics.critic_roles:
                target, online = critics.parameters(f"target_{role}"), critics.parameters(role)
                polyak_update_(target=target, online=online, polyak=critics.cfg.polyak)
        for schedulers, optimizer_stepped in stepped:
            for scheduler in schedulers if optimizer_stepped else ():
                scheduler.step()

    def _track(self, critic_stats: dict[int, dict], actor_stats: dict[int, dict]) -> None:
        """Track each critic group's statistics (a team critic's as ``team``) and, on the actor's steps, each agent's
        policy loss (skrl's TD3 tracks it on those only): one host read per gradient step."""
        names, values = self._critic_tracking(critic_stats)
        with torch.no_grad():
            for group in self.groups:
                if group.index in actor_stats:
                    stats = actor_stats[group.index]
                    losses = -masked_mean(stats["q"], stats["mask"], dim=(1, 2))
                    names += [f"Loss / Policy loss ({uid})" for uid in group.uids]
                    values += list(losses)
        for name, value in zip(names, torch.stack(values).tolist(), strict=True):
            self.track_data(name, value)
        for group in self.groups:
            for uid in group.uids:
                self.track_data(
                    f"Learning / Policy learning rate ({uid})", group.policy_optimizer.param_groups[0]["lr"]
                )
        self._track_critic_learning_rates()

    def _pre_tanh(self, group: MADDPGGroup, outputs: Any, G: int, B: int) -> torch.Tensor | None:
        """The policy's output before the tanh, ``(G, B, A)``, where the group's actor loss penalises it."""
        if not group.policy_regularization or group.discrete:
            return None
        pre_tanh = outputs.get(PRE_TANH_ACTIONS_KEY) if isinstance(outputs, dict) else None
        if pre_tanh is None:
            raise ValueError(self._no_pre_tanh(group))
        return pre_tanh.float().view(G, B, -1)
