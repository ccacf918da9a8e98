"""MASAC: multi-agent soft actor-critic with centralised twin critics (Haarnoja et al. 2018,
https://arxiv.org/abs/1812.05905, with MADDPG's centralised critics; BenchMARL's MASAC, HARL's soft twin critic).

Every agent ``i`` has a stochastic policy ``pi_i(a_i | o_i)``: a tanh-squashed Gaussian for Box actions
(:class:`~skrl_marl_ext.models.SquashedGaussianMLP`), a categorical one sampled through a straight-through
Gumbel-softmax in the update for Discrete actions; an entropy temperature ``alpha_i``; and twin soft critics
``Q_1, Q_2(s, a_1, ..., a_n)`` of the state (or every agent's observation) and the joint action, with target copies:
each agent's own, or one pair for the whole team (every agent given the same critic objects: HARL's team critic).
With ``B`` joint transitions drawn from the replay (MADDPG's, :mod:`skrl_marl_ext.storage.replay`)::

    a'_j ~ pi_j(. | o'_j)  for every agent (no gradient)             # the current policies, no target policies
    y = r + gamma (min_k Q'_k(s', a') - alpha_c sum_j log pi_j(a'_j | o'_j)) (1 - terminated)   # critic_entropy
    critic loss = sum_k mean (Q_k(s, a) - y)^2                        # the stored joint action a
    a_j ~ pi_j(. | o_j)  for every agent, once                          # reparameterised (Box), straight-through
    actor loss of i = mean (alpha_i log pi_i(a_i | o_i) - min_k Q_k(s, a_1.., a_i, ..a_n))   # only a_i differentiated
    temperature loss of i = -mean log alpha_i (log pi_i(a_i | o_i) + target entropy_i)
    critics' temperature loss = -mean log alpha_c (sum_j log pi_j(a_j | o_j) + sum_j target entropy_j)
    targets <- polyak * critics + (1 - polyak) * targets

``critic_entropy="own"`` gives agent ``i``'s critic target ``- alpha_i log pi_i(a'_i | o'_i)`` instead (BenchMARL).
The terms are the pure functions of :mod:`skrl_marl_ext.functional.sac`. HASAC (:mod:`~skrl_marl_ext.algorithms.hasac`)
is this agent with the policies updated one after another (``_actor_phase``).

The class reads in skrl's lifecycle order: construction, acting, (recording and ``post_interaction``: the off-policy
base's, :mod:`~skrl_marl_ext.algorithms.off_policy`), then the gradient step in its phases.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import CategoricalMixin, Model
from skrl.utils.spaces.torch import compute_space_size
from torch import nn

from skrl_marl_ext.algorithms.masac_cfg import MASAC_CFG
from skrl_marl_ext.algorithms.off_policy import OffPolicyAgent, OffPolicyGroup
from skrl_marl_ext.checks.arguments import dry_run
from skrl_marl_ext.functional import critic_loss, gumbel_softmax_st, joint_with_own_actions, masked_mean, polyak_update_
from skrl_marl_ext.functional.sac import soft_actor_loss, soft_q_target, temperature_loss
from skrl_marl_ext.groups.stacked import StackedModules
from skrl_marl_ext.keys import ACTION_MASK_KEY, MEAN_ACTIONS_KEY
from skrl_marl_ext.models.masked_categorical import mask_logits
from skrl_marl_ext.models.sac_models import SquashedGaussianMixin

ROLES = ("policy", "critic", "critic_2", "target_critic", "target_critic_2")
"""Model roles every agent needs: its policy and twin soft critics with their targets (skrl SAC's ``critic_1``,
``critic_2``, ``target_critic_1``, ``target_critic_2``, named as MADDPG names them)."""
CRITIC_ROLES = ("critic", "critic_2")
TARGET_PAIRS = (("target_critic", "critic"), ("target_critic_2", "critic_2"))


class Temperature(nn.Module):
    """An entropy temperature, kept as its logarithm: ``alpha = exp(log_temperature)`` (a checkpoint module)."""

    def __init__(self, initial: float) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.full((1,), math.log(initial)))


@dataclasses.dataclass(eq=False)
class SACGroup(OffPolicyGroup):
    """A MASAC group: its policy (and its own twin critics with their targets, unless a team critic judges it), the
    temperature of each of its agents, its optimisers and action bounds."""

    log_temperature: torch.Tensor | None = None
    """Each agent's ``log alpha``: a batched group's stacked ``(G, 1)`` parameter, another group's one
    :class:`Temperature`'s ``(1,)`` (agents that share a policy share its temperature)."""
    temperatures: list = dataclasses.field(default_factory=list)
    """The :class:`Temperature` modules, one per agent of a batched group, one otherwise (what checkpoints hold)."""
    temperature_optimizer: Any = None
    target_entropy: float = 0.0

    def alpha(self, agents: slice = slice(None)) -> torch.Tensor:
        """``alpha`` of the agents ``agents``, ``(K', 1, 1)``, no gradient."""
        return self.log_temperature.detach()[agents if self.batched else slice(None)].exp().view(-1, 1, 1)


class MASAC(OffPolicyAgent):
    """Multi-Agent Soft Actor-Critic: stochastic policies with learned entropy temperatures, twin soft critics of the
    state and the joint action (each agent's, or one team critic), one replay memory per agent sampled at shared
    indexes; all policies updated at once. The update, its options and what differs from HARL and BenchMARL are on
    the MASAC docs page (``docs/masac.md``).

    :param possible_agents: Agent names (``env.possible_agents``).
    :param models: ``{agent: {"policy", "critic", "critic_2", "target_critic", "target_critic_2": Model}}``.
        Policies are :class:`~skrl_marl_ext.models.SquashedGaussianMixin` models for Box actions (e.g.
        :class:`~skrl_marl_ext.models.SquashedGaussianMLP`) and ``CategoricalMixin`` ones for Discrete actions,
        ``MaskedCategoricalMixin`` where the env gives action masks (e.g. :class:`~skrl_marl_ext.models.CategoricalMLP`).
        A critic reads ``inputs["states"]`` (the env's state, or every agent's observation concatenated when
        ``state_spaces`` is None) and ``inputs["taken_actions"]`` (every agent's action, one-hot for discrete agents:
        size it with :func:`~skrl_marl_ext.models.joint_action_space`) and returns ``(batch, 1)``, e.g.
        :class:`~skrl_marl_ext.models.QMLP`. Targets have their online model's architecture and start from its
        parameters. The same four critic objects for every agent, each agent its own policy, make one team critic
        (trained once per gradient step on the team's mean reward).
    :param memories: ``{agent: Memory}``, one distinct skrl memory per agent (e.g. ``RandomMemory``), all with
        ``num_envs=env.num_envs``.
    :param observation_spaces: ``{agent: space}``.
    :param state_spaces: ``{agent: space}`` of the global state, or None when the env has none.
    :param action_spaces: ``{agent: Box or Discrete}``.
    :param device: Device of the computation (skrl's default when None).
    :param cfg: :class:`~skrl_marl_ext.MASAC_CFG` or a dict of its fields (``{}`` for the defaults).
    """

    cfg_class = MASAC_CFG
    roles = ROLES
    group_class = SACGroup

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
        """Check the arguments (skrl's ``MultiAgent``'s, keyword-only), form the groups (by policy alone under a
        team critic), set each up (optimisers, temperatures, targets, preprocessors), then the joint replay."""
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
        self.cfg: MASAC_CFG
        team = self._is_team_critic(ROLES[1:])
        if team and self.cfg.critic_entropy == "own":
            raise ValueError(
                f"{type(self).__name__}: cfg.critic_entropy='own' gives each agent's critic its own entropy term, but "
                "every agent shares one team critic; set critic_entropy='joint' or give each agent critics of its own"
            )
        if team:
            self.roles = ("policy",)  # the groups hold the policies; the team critic is a group of its own
        self._form_groups(batchable=self._batchable)
        self._refuse_recurrent()
        self._make_replay()
        self._broadcast_models()  # before the targets copy their online models
        self.team_critic = self._make_team_critic(ROLES[1:]) if team else None
        self.critic_temperature = Temperature(self.cfg.initial_temperature).to(self.device)
        """``alpha_c`` of the critics' soft target (``critic_entropy="joint"``)."""
        self.critic_temperature_optimizer = None
        if self.cfg.critic_entropy == "joint" and self.cfg.learn_temperature:
            self.critic_temperature_optimizer = torch.optim.Adam(
                self.critic_temperature.parameters(), lr=self.cfg.temperature_learning_rate
            )
        for group in self.groups:
            self._set_up_group(group)
        for uid in self.possible_agents:
            self.checkpoint_modules[uid]["critic_temperature"] = self.critic_temperature
            if self.critic_temperature_optimizer is not None:
                self.checkpoint_modules[uid]["critic_temperature_optimizer"] = self.critic_temperature_optimizer
        self._create_memory_tensors()
        self._keep_replay()

    def _set_up_group(self, group: SACGroup) -> None:
        team = self.team_critic
        group.critic_state_space = self._critic_state_space(group.uids[0])
        group.joint_columns = self._joint_columns(group)
        group.critics = team if team is not None else group
        self._check_policy(group)
        group.observation_preprocessor = self._make_preprocessor(group, "observation", group.observation_space)
        if team is None:
            self._check_critics(group, ROLES[1:], rows=2 * group.size)
            group.state_preprocessor = self._make_preprocessor(group, "state", group.critic_state_space)
            self._copy_targets(group, list(TARGET_PAIRS))
        else:  # the policies read the state the team critic's statistics scale
            group.state_preprocessor = team.state_preprocessor
        self._set_up_optimizers(group, critic_roles=() if team is not None else None)
        self._set_bounds(group)

        # each agent's temperature: one module per agent, stacked for a batched group
        group.temperatures = [Temperature(self.cfg.initial_temperature).to(self.device) for _ in group.uids]
        if group.batched:
            group.log_temperature = StackedModules(group.temperatures).params["log_temperature"]
        else:
            group.temperatures = group.temperatures[:1]
            group.log_temperature = group.temperatures[0].log_temperature
        if self.cfg.learn_temperature:
            params = [{"params": [group.log_temperature], "lr": self.cfg.temperature_learning_rate}]
            group.temperature_optimizer = group.make_optimizer(params)
        group.target_entropy = self._target_entropy(group)

        modules = {role: group.models[role] for role in (ROLES if team is None else ("policy",))}
        modules.update(policy_optimizer=group.policy_optimizer, policy_scheduler=group.policy_schedulers or None)
        if team is None:
            modules.update(critic_optimizer=group.critic_optimizer, critic_scheduler=group.critic_schedulers or None)
            modules["state_preprocessor"] = group.state_preprocessor
        modules.update(temperature=group.temperatures, temperature_optimizer=group.temperature_optimizer)
        modules["observation_preprocessor"] = group.observation_preprocessor
        self._register_checkpoint(group, modules)

    def _target_entropy(self, group: SACGroup) -> float:
        """``cfg.target_entropy``, or its default: ``-A`` for Box actions, ``0.2 log n`` for ``Discrete(n)``."""
        value = group.cfg.target_entropy
        if value is not None:
            return float(value)
        if group.discrete:
            return 0.2 * math.log(group.num_actions)
        return -float(compute_space_size(group.action_space))

    def _check_policy(self, group: SACGroup) -> None:
        """The policy's kind for the action space, and a dry run of it on zeros of the inputs it will read."""
        name, uids = type(self).__name__, group.uids
        if group.discrete and not isinstance(group.policy, CategoricalMixin):
            raise ValueError(
                f"{name}: agents {uids} have the discrete action space {group.action_space}; their policy must be a "
                f"CategoricalMixin model (e.g. skrl_marl_ext.models.CategoricalMLP), got {type(group.policy).__name__}"
            )
        if not group.discrete and not isinstance(group.policy, SquashedGaussianMixin):
            raise ValueError(
                f"{name}: agents {uids} have continuous actions; their policy must be a squashed Gaussian "
                f"(skrl_marl_ext.models.SquashedGaussianMLP, or a model with SquashedGaussianMixin), got "
                f"{type(group.policy).__name__}: skrl's GaussianMixin clips its samples and gives the density of the "
                "clipped sample, not of the action taken, which the entropy term needs"
            )
        self.action_masks.note_observation_mask(group)
        rows = 2 * group.size
        inputs = {"observations": torch.zeros(rows, self._obs_sizes[uids[0]], device=self.device), "states": None}
        if self.env_states:
            size = compute_space_size(group.critic_state_space, occupied_size=True)
            inputs["states"] = torch.zeros(rows, size, device=self.device)
        if group.discrete:
            inputs[ACTION_MASK_KEY] = torch.ones(rows, group.num_actions, dtype=torch.bool, device=self.device)
        dry_run(owner=name, group=group, policy_inputs=inputs, device=self.device)

    # ------------------------------------------------------------------ acting

    def _act_group(
        self, group: SACGroup, observations: dict, states: Any, *, timestep: int, timesteps: int
    ) -> tuple[torch.Tensor, dict]:
        """One group's actions: in training a sample of each policy (uniform during ``cfg.random_timesteps``); in
        evaluation the squashed mean and the argmax of the logits. A Discrete group's action masks reach the policy
        as ``inputs["action_mask"]``; without one (e.g. the first step after ``reset()`` for masks given through
        infos) every action is allowed."""
        raw_obs = group.stack(observations)
        G, n = group.size, raw_obs.shape[1]
        mask = self.action_masks.of_group(group, raw_obs)  # (G * n, num_actions) or None
        if self.training and timestep < self.cfg.random_timesteps:
            return self._random_actions(group, G * n, mask).view(G, n, -1), {}
        inputs = {"observations": group.preprocess("observation", raw_obs, agent_dim=0), "states": None}
        if self.env_states and states:
            inputs["states"] = group.preprocess("state", group.stack(states), agent_dim=0)
        if mask is not None:
            inputs[ACTION_MASK_KEY] = mask.view(G, n, -1)
        with self._autocast():
            actions, outputs = group.act("policy", inputs)
        if group.discrete:
            if not self.training:
                logits = mask_logits(self._logits(group.policy, "policy"), mask)
                actions = logits.argmax(dim=-1, keepdim=True).view(G, n, 1)
            return actions, outputs
        return (actions if self.training else outputs[MEAN_ACTIONS_KEY]).float(), outputs

    # ------------------------------------------------------------------ update: one gradient step

    def _gradient_step(self) -> None:
        """One gradient step on one batch of joint transitions, in phases: sample, the next actions of the current
        policies, each critic group's soft targets and step, the policies' steps with their temperatures'
        (:meth:`_actor_phase`), the critics' temperature, then the target updates and schedulers."""
        batch, joint_taken = self._sample()
        alive = {u: batch[u]["agent_mask"] for u in self.possible_agents}
        joint_next, next_log_prob = self._sample_next_actions(batch)
        stats = {}
        for critics in self.critic_groups:
            targets = self._soft_targets(critics, batch, joint_next, next_log_prob, alive)
            stats[critics.index] = self._critic_step(critics, batch, joint_taken, targets)
        with self._frozen([p for critics in self.critic_groups for p in critics.parameters(*CRITIC_ROLES)]):
            log_probs, policy_stats = self._actor_phase(batch)
        self._critic_temperature_step(log_probs, alive)
        self.progress.gradient_steps += 1
        self.scaler.update()  # once per gradient step, after every optimiser has stepped
        for critics in self.critic_groups:
            online, target = critics.parameters(*CRITIC_ROLES), critics.parameters("target_critic", "target_critic_2")
            polyak_update_(target=target, online=online, polyak=critics.cfg.polyak)
        for group in {id(g): g for g in (*self.groups, *self.critic_groups)}.values():
            for scheduler in (*group.policy_schedulers, *group.critic_schedulers):
                scheduler.step()
        self._track(stats, policy_stats)

    def _policy_inputs(self, group: SACGroup, batch: dict, *, next_: bool) -> dict:
        """The policy inputs of the group's agents from the batch: preprocessed observations, states (or None), the
        stored action masks; every tensor ``(G, B, ...)``."""
        prefix = "next_" if next_ else ""
        obs = self._per_agent(group, batch, f"{prefix}observations")
        inputs = {"observations": group.preprocess("observation", obs, agent_dim=0).contiguous(), "states": None}
        if self.env_states:
            states = self._per_agent(group, batch, f"{prefix}states")
            inputs["states"] = group.preprocess("state", states, agent_dim=0).contiguous()
        if group.discrete:
            inputs[ACTION_MASK_KEY] = self._per_agent(group, batch, f"{prefix}action_mask")
        return inputs

    def _sample_actions(
        self, group: SACGroup, inputs: dict, *, agents: slice = slice(None)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample of the policies of the group's agents ``agents``: the actions as the critics read them (one-hot,
        straight-through, for discrete agents), ``(G', B, width)``, and their log-probabilities ``(G', B, 1)``."""
        ((actions, outputs),) = group.act_many(("policy", inputs), agents=agents)
        G, B = actions.shape[:2]
        if not group.discrete:
            return actions.float(), outputs["log_prob"].float().view(G, B, 1)
        mask = inputs[ACTION_MASK_KEY].reshape(G * B, -1)
        logits = mask_logits(self._logits(group.policy, "policy").float(), mask).log_softmax(dim=-1)
        one_hot = gumbel_softmax_st(logits=logits, temperature=group.cfg.gumbel_temperature, mask=mask)
        log_prob = (one_hot * logits).sum(dim=-1, keepdim=True)
        return one_hot.view(G, B, -1), log_prob.view(G, B, 1)

    def _sample_next_actions(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The next joint action ``a'`` drawn from the current policies, ``(B, joint size)``, and each agent's
        ``log pi(a' | o')``, ``(B, 1)``."""
        actions, log_probs = {}, {}
        with torch.no_grad(), self._autocast():
            for group in self.groups:
                a, log_prob = self._sample_actions(group, self._policy_inputs(group, batch, next_=True))
                for i, uid in enumerate(group.uids):
                    actions[uid], log_probs[uid] = a[i], log_prob[i]
        return self._joint(actions), log_probs

    def _soft_targets(
        self, critics: SACGroup, batch: dict, joint_next: torch.Tensor, next_log_prob: dict, alive: dict
    ) -> torch.Tensor:
        """Soft targets phase: ``y = r + gamma (min_k Q'_k(s', a') - alpha log pi(a' | o')) (1 - terminated)``,
        ``(G, B, 1)``, the entropy term the joint policy's (over the agents alive) with ``alpha_c``, or with
        ``critic_entropy="own"`` each agent's own with its ``alpha_i``."""
        G, B = critics.size, joint_next.shape[0]
        rows = self._critic_rows(critics, batch)
        _, _, next_states = self._group_inputs(critics, batch, next_=True)
        inputs = {"states": next_states, "taken_actions": joint_next.unsqueeze(0).repeat(G, 1, 1)}
        if self.cfg.critic_entropy == "joint":
            log_prob = sum(alive[u] * next_log_prob[u] for u in self.possible_agents).expand(G, B, 1)
            temperature = self.critic_temperature.log_temperature.detach().exp()
        else:
            log_prob, temperature = torch.stack([next_log_prob[u] for u in critics.uids]), critics.alpha()
        with torch.no_grad(), self._autocast():
            calls = [(role, inputs) for role in ("target_critic", "target_critic_2")]
            next_qs = [q.float().view(G, B, 1) for q, _ in critics.act_many(*calls)]
            return soft_q_target(
                rewards=rows["rewards"],
                next_q_values=next_qs,
                next_log_prob=log_prob,
                temperature=temperature,
                terminated=rows["terminated"],
                discount_factor=self._discount(critics, rows),
            )

    def _critic_step(
        self, critics: SACGroup, batch: dict, joint_taken: torch.Tensor, targets: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Critic phase: one optimiser step of the twin critics on ``sum_k mean (Q_k(s, a) - y)^2`` over the rows
        where the agent (the team: any agent) acted and, unless ``cfg.time_limit_bootstrap``, was not truncated.

        :return: ``{"q", "target", "error", "mask", "agent_mask"}``, ``(G, B, 1)``.
        """
        G, B = critics.size, joint_taken.shape[0]
        rows = self._critic_rows(critics, batch)
        mask = self._critic_mask(critics, rows)
        _, _, states = self._group_inputs(critics, batch, next_=False)
        inputs = {"states": states, "taken_actions": joint_taken.unsqueeze(0).repeat(G, 1, 1)}
        with self._autocast():
            qs = [q.float().view(G, B, 1) for q, _ in critics.act_many(*((r, inputs) for r in CRITIC_ROLES))]
            loss = critic_loss(q_values=qs, targets=targets, mask=mask, per_agent=critics.own_models)
        params = critics.parameters(*CRITIC_ROLES)
        self._optimizer_step(critics.critic_optimizer, loss["loss"], params, critics.cfg.grad_norm_clip)
        error = loss["squared_error"].detach()
        return {"q": qs[0].detach(), "target": targets, "error": error, "mask": mask, "agent_mask": rows["agent_mask"]}

    def _actor_phase(self, batch: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Every policy steps at once: each agent's action drawn once from the current policies, each agent's loss
        the critics' value of that joint action with only its own action differentiated; then each agent's
        temperature steps (:meth:`_temperature_step`).

        :return: Each agent's ``log pi(a | o)`` of the step's samples ``(B, 1)``, and the per-agent statistics."""
        samples = {}
        with self._autocast():
            for group in self.groups:
                samples[group.index] = self._sample_actions(group, self._policy_inputs(group, batch, next_=False))
        current = self._joint({u: samples[g.index][0][i].detach() for g in self.groups for i, u in enumerate(g.uids)})
        log_probs, stats = {}, {}
        for group in self.groups:
            own, log_prob = samples[group.index]
            stats.update(self._policy_step(group, batch, current, own, log_prob, one_joint=True))
            for i, uid in enumerate(group.uids):
                log_probs[uid] = log_prob[i].detach()
        return log_probs, stats

    def _policy_step(
        self,
        group: SACGroup,
        batch: dict,
        joint: torch.Tensor,
        own: torch.Tensor,
        log_prob: torch.Tensor,
        agents: slice = slice(None),
        *,
        one_joint: bool = False,
    ) -> dict[str, torch.Tensor]:
        """One optimiser step of the policies of the group's agents ``agents`` on ``mean (alpha log pi(a_i | o_i) -
        min_k Q_k(s, joint with a_i))``, then the same agents' temperature step (the others' parameters, moments and
        step counts stay as they are).

        :param joint: The joint action of the other agents, ``(B, joint size)``.
        :param own: The agents' own actions ``(G', B, width)``, with the gradient of their policies.
        :param one_joint: ``joint`` already holds ``own``'s values in the agents' columns (MASAC: each agent's one
            sample), so every agent's row of a team critic is the same joint action.
        :return: ``{agent: {"policy_loss", "entropy"}}`` of the agents stepped, ``(1,)`` tensors.
        """
        uids = group.uids[agents]
        mask = torch.stack([batch[u]["agent_mask"] for u in uids])  # (G', B, 1)
        flags = None if agents == slice(None) or not group.batched else [u in uids for u in group.uids]
        with self._autocast():
            q = self._policy_q(group, batch, joint, own, agents, one_joint=one_joint)
            loss = soft_actor_loss(
                q_values=q, log_prob=log_prob, temperature=group.alpha(agents), mask=mask, per_agent=group.own_models
            )
        self._agents_step(
            group.policy_optimizer, loss["loss"], group.parameters("policy"), group.cfg.grad_norm_clip, agents=flags
        )
        if group.temperature_optimizer is not None:
            log_temperature = group.log_temperature[agents if group.batched else slice(None)].view(-1, 1, 1)
            t_loss = temperature_loss(
                log_temperature=log_temperature,
                log_prob=log_prob,
                target_entropy=group.target_entropy,
                mask=mask,
                per_agent=group.own_models,
            )
            self._agents_step(group.temperature_optimizer, t_loss, [group.log_temperature], 0.0, agents=flags)
        with torch.no_grad():
            entropy = -masked_mean(log_prob.detach(), mask, dim=(1, 2))
            objective = masked_mean((group.alpha(agents) * log_prob - q).detach(), mask, dim=(1, 2))
        return {uid: {"policy_loss": objective[i : i + 1], "entropy": entropy[i : i + 1]} for i, uid in enumerate(uids)}

    def _policy_q(
        self, group: SACGroup, batch: dict, joint: torch.Tensor, own: torch.Tensor, agents: slice, *, one_joint: bool
    ) -> torch.Tensor:
        """``min_k Q_k(s, a_1, .., a_i, .., a_n)`` for each agent ``i`` of ``agents`` (``(G', B, 1)``): the joint
        action ``joint`` with agent ``i``'s columns its own action, judged by its critics (its own, or the team's)."""
        critics = group.critics
        G, B = own.shape[:2]
        columns = group.joint_columns[agents]
        taken = joint_with_own_actions(joint_actions=joint, own_actions=own, columns=columns)  # (G', B, J)
        _, _, states = self._group_inputs(critics, batch, next_=False)
        if critics is group:
            inputs = {"states": states[agents].contiguous(), "taken_actions": taken}
            calls = [(role, inputs) for role in CRITIC_ROLES]
            q_1, q_2 = (q.float().view(G, B, 1) for q, _ in critics.act_many(*calls, agents=agents))
        elif one_joint and G > 1 and not self.scaler.is_enabled():
            return self._team_q_once(critics, states, taken[0], own, columns)
        else:  # the team critic: the G' agents' rows as one batch
            inputs = {
                "states": states.expand(G, B, -1).reshape(1, G * B, -1),
                "taken_actions": taken.view(1, G * B, -1),
            }
            q_1, q_2 = (q.float().view(G, B, 1) for q, _ in critics.act_many(*((r, inputs) for r in CRITIC_ROLES)))
        return torch.minimum(q_1, q_2)

    @staticmethod
    def _team_q_once(
        critics: SACGroup, states: torch.Tensor, joint: torch.Tensor, own: torch.Tensor, columns: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`_policy_q` of a team critic when every agent's row holds the same joint action ``joint`` ``(B, J)``:
        the critics run once on the ``B`` rows, and each agent's value carries the gradient of its own columns only
        (``dQ/da`` of that pass), the same values and gradients as a pass per agent at a ``G``-th of the cost."""
        G, B = own.shape[:2]
        joint = joint.detach().requires_grad_(True)
        inputs = {"states": states, "taken_actions": joint.unsqueeze(0)}
        q_1, q_2 = (q.float().view(B, 1) for q, _ in critics.act_many(*((r, inputs) for r in CRITIC_ROLES)))
        q = torch.minimum(q_1, q_2)
        (slope,) = torch.autograd.grad(q.sum(), joint)  # (B, J): each row's dQ/da
        own_slope = slope[:, columns].transpose(0, 1).to(own.dtype)  # (G, B, A)
        return q.detach() + ((own - own.detach()) * own_slope).sum(-1, keepdim=True).float()

    def _critic_temperature_step(self, log_probs: dict[str, torch.Tensor], alive: dict) -> None:
        """``alpha_c``'s step towards the sum of the agents' target entropies, on the joint ``log pi`` of the policy
        step's samples over the agents alive (HARL's ``critic.update_alpha``)."""
        if self.critic_temperature_optimizer is None:
            return
        targets = {u: self.group_of[u].target_entropy for u in self.possible_agents}
        joint = sum(alive[u] * log_probs[u] for u in self.possible_agents).unsqueeze(0)
        target = sum(alive[u] * targets[u] for u in self.possible_agents).unsqueeze(0)
        any_alive = torch.stack([alive[u] for u in self.possible_agents]).any(dim=0, keepdim=True)
        loss = temperature_loss(
            log_temperature=self.critic_temperature.log_temperature,
            log_prob=joint,
            target_entropy=target,
            mask=any_alive,
        )
        self._optimizer_step(self.critic_temperature_optimizer, loss, list(self.critic_temperature.parameters()), 0.0)

    def _track(self, critic_stats: dict[int, dict], policy_stats: dict[str, dict]) -> None:
        """Track each agent's (and a team critic's) statistics by name: one host read per gradient step."""
        names, values = self._critic_tracking(critic_stats)
        with torch.no_grad():
            for group in self.groups:
                alphas = group.alpha().view(-1).expand(group.size)
                for i, uid in enumerate(group.uids):
                    names += [f"Loss / Policy loss ({uid})", f"Policy / Entropy ({uid})"]
                    values += [policy_stats[uid]["policy_loss"][0], policy_stats[uid]["entropy"][0]]
                    names.append(f"Coefficient / Temperature ({uid})")
                    values.append(alphas[i])
            if self.cfg.critic_entropy == "joint":
                names.append("Coefficient / Critic temperature")
                values.append(self.critic_temperature.log_temperature.detach().exp()[0])
        for name, value in zip(names, torch.stack(values).tolist(), strict=True):
            self.track_data(name, value)
        for group in self.groups:
            for uid in group.uids:
                self.track_data(
                    f"Learning / Policy learning rate ({uid})", group.policy_optimizer.param_groups[0]["lr"]
                )
        self._track_critic_learning_rates()


__all__ = ["MASAC", "SACGroup", "Temperature"]
