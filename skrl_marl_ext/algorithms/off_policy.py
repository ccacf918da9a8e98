"""The off-policy family's common part (MADDPG, MASAC, HASAC): one joint replay, critics of the state and the joint
action with target copies, and the lifecycle they share.

An off-policy agent writes one joint row per env step (:meth:`OffPolicyAgent.record_transition`, one skrl memory per
agent read at shared row indexes: :mod:`skrl_marl_ext.storage.replay`) and, from ``cfg.learning_starts`` on, takes
``cfg.gradient_steps`` gradient steps per env step (:meth:`OffPolicyAgent.post_interaction`), each on one batch of
joint transitions that serves every agent. What a gradient step does is the algorithm's (``_gradient_step`` in its
own file); this base holds what they do alike:

- construction: refusing recurrent models, the replay and its tensors, each group's optimisers and schedulers, the
  targets copied from their online models and frozen, the critics' dry run against the state and joint action sizes;
- recording: each agent's row of a step (agent masks, action masks, the episode's final observation where the env
  hands it over), stored as one joint row;
- a team critic: the same critic objects given to every agent, each agent its own policy, make one critic for the
  team (HARL's), a group of its own trained once per gradient step on the team's rows (the mean reward of the agents
  alive);
- a batch's inputs: the rows of a group's agents ``(G, B, ...)``, their preprocessed observations and critic states,
  the stored joint action as the critics read it (one-hot for discrete agents);
- uniform random actions of ``cfg.random_timesteps``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import Model
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext import distributed
from skrl_marl_ext.algorithms.base import GroupedMultiAgent, Progress
from skrl_marl_ext.checks.arguments import call_model, expect_shape
from skrl_marl_ext.features.masks import agent_mask
from skrl_marl_ext.features.recurrent import is_recurrent
from skrl_marl_ext.functional import masked_mean, one_hot_actions
from skrl_marl_ext.functional.gumbel import gumbel_max_actions
from skrl_marl_ext.groups import AgentGroup
from skrl_marl_ext.groups.optim import Adam, scaled_step
from skrl_marl_ext.groups.preprocessors import stackable_preprocessor
from skrl_marl_ext.keys import AGENT_MASK_KEY, FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY, MEAN_ACTIONS_KEY
from skrl_marl_ext.models.maddpg_models import action_encoding_size
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.storage.replay import JointReplay, ReplayState

TEAM_CRITIC_FIELDS = (
    "discount_factor",
    "polyak",
    "critic_learning_rate",
    "grad_norm_clip",
    "state_preprocessor",
    "state_preprocessor_kwargs",
    "time_limit_bootstrap",
)
"""Per-agent fields that configure a team critic's update: every agent must be given the same value."""


@dataclasses.dataclass
class OffPolicyProgress(Progress):
    """An off-policy agent's checkpoint module ``progress``: the steps completed and the gradient steps taken."""

    gradient_steps: int = 0
    """Gradient steps taken (MADDPG's actors and targets step when it is a multiple of ``cfg.policy_delay``)."""


@dataclasses.dataclass(eq=False)
class OffPolicyGroup(AgentGroup):
    """A group of an off-policy agent: its models, optimisers, schedulers and action bounds."""

    critic_state_space: gymnasium.Space | None = None
    """What the critics read under ``"states"``: the env's state, or every agent's observation concatenated."""
    policy_optimizer: Adam | None = None
    critic_optimizer: Adam | None = None
    policy_schedulers: list = dataclasses.field(default_factory=list)
    """The actor's learning rate schedulers, one per agent of the optimiser (none without one)."""
    critic_schedulers: list = dataclasses.field(default_factory=list)
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None
    bounded: torch.Tensor | None = None
    """Where both of a continuous group's bounds are finite, ``(A,)``."""
    all_bounded: bool = True
    """Whether every dimension is bounded (known once at construction: no host read per random action)."""
    joint_columns: torch.Tensor | None = None
    """``(G, action encoding size)``: the columns of each agent's action in the joint action (the actor's scatter)."""
    critics: OffPolicyGroup | None = None
    """The group whose critics judge this group's actions: itself, or the team critic."""

    policy = property(lambda self: self.models["policy"])
    critic = property(lambda self: self.models["critic"])
    twin = property(lambda self: "critic_2" in self.models)
    """Whether the group has a second critic (clipped double Q)."""
    critic_roles = property(lambda self: tuple(role for role in ("critic", "critic_2") if role in self.models))
    """The group's online critic roles (none where a team critic judges it), trained by one optimiser (skrl TD3's and
    SAC's one optimiser over both critics)."""


class OffPolicyAgent(GroupedMultiAgent):
    """Base of the off-policy agents (see the module docstring). A subclass forms its groups, sets each up
    (:meth:`_set_up_optimizers`, :meth:`_copy_targets`, :meth:`_check_critics`), calls :meth:`_create_memory_tensors`
    and :meth:`_keep_replay`, and defines ``act`` and ``_gradient_step``."""

    progress_class = OffPolicyProgress
    team_critic: OffPolicyGroup | None = None
    """The team critic (a group of its own, its first agent's models), or None: each group has its own critics."""

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
        """The base's construction (config, argument checks), then the joint replay over ``memories`` and the sizes
        every batch is read with; the subclass forms and sets up its groups."""
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
        self._obs_sizes = {
            u: compute_space_size(self.observation_spaces[u], occupied_size=True) for u in self.possible_agents
        }
        self.joint_action_size = sum(action_encoding_size(self.action_spaces[u]) for u in self.possible_agents)
        """Width of ``inputs["taken_actions"]`` of every critic."""

    def _refuse_recurrent(self) -> None:
        name = type(self).__name__
        for uid in self.possible_agents:
            for role, model in self.models[uid].items():
                if is_recurrent(model):
                    raise ValueError(
                        f"{name}: the {role} model of agent '{uid}' is recurrent (its get_specification() has "
                        f"'rnn'); {name} replays single transitions and feeds no hidden states. Use an MLP model, or "
                        "MAPPO/IPPO for recurrent ones"
                    )

    def _make_replay(self) -> None:
        self.replay = JointReplay(self.memories, owner=type(self).__name__, possible_agents=self.possible_agents)

    def _keep_replay(self, noises: Callable[[str], dict[str, Any]] | None = None) -> None:
        """With ``cfg.checkpoint_replay``, each agent's checkpoint module ``replay`` (and ``noises(agent)``'s state)."""
        if self.cfg.checkpoint_replay:
            for uid in self.possible_agents:
                kept = noises(uid) if noises is not None else None
                self.checkpoint_modules[uid]["replay"] = ReplayState(self.replay, uid, noises=kept)

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

    def _set_up_optimizers(self, group: OffPolicyGroup, critic_roles: tuple[str, ...] | None = None) -> None:
        """The group's policy optimiser and, for ``critic_roles`` (the group's own when None; none when empty), its
        critic optimiser, each with its agents' learning rate schedulers (``cfg.learning_rate_scheduler``)."""
        cfg = group.cfg
        critic_roles = group.critic_roles if critic_roles is None else critic_roles
        (actor_scheduler, critic_scheduler) = cfg.learning_rate_scheduler
        (actor_kwargs, critic_kwargs) = cfg.learning_rate_scheduler_kwargs
        if "policy" in group.models:
            group.policy_optimizer = group.make_optimizer(group.parameters("policy"), lr=cfg.actor_learning_rate)
            if actor_scheduler:
                group.policy_schedulers = [actor_scheduler(v, **actor_kwargs) for v in group.policy_optimizer.views()]
        if critic_roles:
            group.critic_optimizer = group.make_optimizer(group.parameters(*critic_roles), lr=cfg.critic_learning_rate)
            if critic_scheduler:
                views = group.critic_optimizer.views()
                group.critic_schedulers = [critic_scheduler(v, **critic_kwargs) for v in views]

    def _set_bounds(self, group: OffPolicyGroup) -> None:
        """A continuous group's action bounds, ``(A,)`` each."""
        if not group.discrete:
            space = group.action_space
            group.low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device).reshape(-1)
            group.high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device).reshape(-1)
            group.bounded = torch.isfinite(group.low) & torch.isfinite(group.high)
            group.all_bounded = bool(group.bounded.all())

    def _copy_targets(self, group: AgentGroup, pairs: list[tuple[str, str]]) -> None:
        """Targets start as frozen copies of the online models (each agent's of a batched group): ``pairs`` of
        ``(target role, online role)``."""
        name = type(self).__name__
        for target_role, role in pairs:
            if group.models[role] is group.models[target_role]:
                raise ValueError(
                    f"{name}: agents {group.uids} use one object as {role} and {target_role}; the target must be a "
                    "separate model of the same architecture (build it twice)"
                )
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

    def _joint_columns(self, group: AgentGroup) -> torch.Tensor:
        """The columns of each of the group's agents' action in the joint action, ``(G, action encoding size)``."""
        starts, start = {}, 0
        for uid in self.possible_agents:
            starts[uid] = start
            start += action_encoding_size(self.action_spaces[uid])
        width = action_encoding_size(group.action_space)
        return torch.stack([starts[u] + torch.arange(width) for u in group.uids]).to(self.device)

    def _check_critics(self, group: AgentGroup, roles: tuple[str, ...], rows: int) -> None:
        """A dry run of the critic ``roles`` of the group on zero inputs of the critic state and joint action sizes:
        each must return ``(rows, 1)``; one line naming the sizes to build it with otherwise."""
        name, uids = type(self).__name__, group.uids
        if "critic_2" in roles and group.models["critic_2"] is group.models["critic"]:
            raise ValueError(
                f"{name}: agents {uids} use one object as critic and critic_2; clipped double Q needs two critics "
                "(build the model twice, so they start from different weights)"
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
            "observations": torch.zeros(rows, self._obs_sizes[uids[0]], device=self.device),
            "states": torch.zeros(rows, state_size, device=self.device),
            "taken_actions": torch.zeros(rows, self.joint_action_size, device=self.device),
        }
        for role in roles:
            what = f"the {role} of agents {uids}"
            with torch.no_grad():
                values, _ = call_model(name, what, group.models[role], critic_inputs, role=role, hint=hint)
            expect_shape(name, what, values, (rows, 1), hint=hint)

    # ------------------------------------------------------------------ a team critic

    @property
    def critic_groups(self) -> list[OffPolicyGroup]:
        """The groups whose critics a gradient step trains: the team critic, or every group."""
        return [self.team_critic] if self.team_critic is not None else list(self.groups)

    def _is_team_critic(self, critic_roles: tuple[str, ...]) -> bool:
        """Whether every agent was given the same ``critic_roles`` objects and the policies differ (a team critic).
        Critics shared in part, a shared critic that is also a policy, and :data:`TEAM_CRITIC_FIELDS` or critic
        schedules that differ between agents are refused."""
        uids, name = self.possible_agents, type(self).__name__
        shared = [r for r in critic_roles if all(self.models[u][r] is self.models[uids[0]][r] for u in uids)]
        policies = {id(self.models[u]["policy"]) for u in uids}
        if not shared or len(uids) == 1 or len(policies) == 1:
            return False
        if len(shared) < len(critic_roles):
            roles = f"{', '.join(critic_roles[:-1])} and {critic_roles[-1]}"
            raise ValueError(
                f"{name}: every agent shares the {shared} models but not "
                f"{[r for r in critic_roles if r not in shared]}; a team critic is the same {roles} "
                "objects for every agent (or give each agent its own)"
            )
        if any(self.models[u]["policy"] is self.models[uids[0]]["critic"] for u in uids):
            raise ValueError(f"{name}: the critic given to every agent is also a policy; give them models of their own")
        for field in TEAM_CRITIC_FIELDS:
            values = {u: self.cfg.value_for(field, u) for u in uids}
            if len({repr(v) for v in values.values()}) > 1:
                raise ValueError(
                    f"{name}: every agent shares one team critic, trained by one update, but cfg.{field} differs "
                    f"between agents ({values}); give them the same value"
                )
        schedulers = {u: self.cfg.value_for("learning_rate_scheduler", u)[1] for u in uids}
        if len({repr(v) for v in schedulers.values()}) > 1:
            raise ValueError(
                f"{name}: every agent shares one team critic, but the critics' learning_rate_scheduler differs between "
                f"agents ({schedulers}); give them the same value"
            )
        return True

    def _make_team_critic(self, critic_roles: tuple[str, ...]) -> OffPolicyGroup:
        """The team critic as a group of one (the first agent's ``critic_roles`` models and config): checked, its
        targets copied, its optimiser and state preprocessor made, registered in every agent's checkpoint."""
        first = self.possible_agents[0]
        team = self.group_class(
            index=len(self.groups),
            uids=[first],
            models={role: self.models[first][role] for role in critic_roles},
            observation_space=self.observation_spaces[first],
            state_space=self.state_spaces[first],
            action_space=self.action_spaces[first],
            cfg=self.cfg.for_agent(first),
        )
        team.critics = team
        team.critic_state_space = self._critic_state_space(first)
        self._check_critics(team, critic_roles, rows=2)
        team.state_preprocessor = self._make_preprocessor(team, "state", team.critic_state_space)
        if distributed.is_distributed():  # every rank from rank 0's critics (the groups broadcast the policies)
            for model in team.unique_models():
                distributed.broadcast_state(model)
        self._copy_targets(team, [(f"target_{role}", role) for role in team.critic_roles])
        self._set_up_optimizers(team)
        modules = {role: team.models[role] for role in critic_roles}
        modules.update(critic_optimizer=team.critic_optimizer, critic_scheduler=team.critic_schedulers or None)
        modules["state_preprocessor"] = team.state_preprocessor
        for key, module in team.checkpoint_entries(modules).items():
            module = module[0] if isinstance(module, list) else module
            if module is not None and module is not identity:
                for uid in self.possible_agents:
                    self.checkpoint_modules[uid][key] = module
        return team

    def _team_rows(self, batch: dict) -> dict[str, torch.Tensor]:
        """The team's rows ``(1, B, 1)``: the mean reward of the agents alive, terminated and truncated where every
        agent's episode ended so (HARL's ``dones_env``), alive where any agent is."""
        alive = torch.stack([batch[u]["agent_mask"] for u in self.possible_agents])  # (N, B, 1)
        rewards = torch.stack([batch[u]["rewards"] for u in self.possible_agents])
        count = alive.sum(dim=0, keepdim=True)
        mean = (rewards * alive).sum(dim=0, keepdim=True) / count.clamp(min=1)
        flags = {
            k: torch.stack([batch[u][k] for u in self.possible_agents]).all(dim=0, keepdim=True)
            for k in ("terminated", "truncated")
        }
        rows = {"rewards": mean, **flags, "agent_mask": count > 0}
        if "discount" in batch[self.possible_agents[0]]:  # n-step rows: the same steps for every agent
            rows["discount"] = batch[self.possible_agents[0]]["discount"].unsqueeze(0)
        return rows

    def _critic_rows(self, critics: OffPolicyGroup, batch: dict) -> dict[str, torch.Tensor]:
        """Rewards, terminated, truncated and agent mask of a critic group's rows, ``(G, B, 1)`` each, and the
        discount of n-step rows (:meth:`sample_batch`)."""
        if critics is self.team_critic:
            return self._team_rows(batch)
        names = ("rewards", "terminated", "truncated", "agent_mask", "discount")
        return {k: self._per_agent(critics, batch, k) for k in names if k in batch[critics.uids[0]]}

    @staticmethod
    def _discount(critics: OffPolicyGroup, rows: dict[str, torch.Tensor]) -> float | torch.Tensor:
        """``gamma``, or each n-step row's ``gamma^k``."""
        return rows.get("discount", critics.cfg.discount_factor)

    def _critic_mask(self, critics: OffPolicyGroup, rows: dict[str, torch.Tensor]) -> torch.Tensor:
        """The rows a critic learns from: where its agent (the team: any agent) acted and, unless
        ``cfg.time_limit_bootstrap``, was not truncated (the next observation may be the next episode's)."""
        return rows["agent_mask"] if critics.cfg.time_limit_bootstrap else rows["agent_mask"] & ~rows["truncated"]

    def _critic_tracking(self, critic_stats: dict[int, dict]) -> tuple[list[str], list[torch.Tensor]]:
        """The tracked names and ``(1,)``-element values of each critic group's step statistics (``{"q", "target",
        "error", "mask", "agent_mask"}`` by group index): per agent, or ``team`` for a team critic."""
        big, names, values = torch.finfo(torch.float32).max, [], []
        with torch.no_grad():
            for critics in self.critic_groups:
                s = critic_stats[critics.index]
                q, mask = s["q"], s["agent_mask"]
                per_label = {
                    "Loss / Critic loss ({})": masked_mean(s["error"], s["mask"], dim=(1, 2)),
                    "Q-network / Q ({}) (mean)": masked_mean(q, mask, dim=(1, 2)),
                    "Q-network / Q ({}) (min)": q.masked_fill(~mask, big).amin(dim=(1, 2)),
                    "Q-network / Q ({}) (max)": q.masked_fill(~mask, -big).amax(dim=(1, 2)),
                    "Target / Target ({}) (mean)": masked_mean(s["target"], s["mask"], dim=(1, 2)),
                }
                labels = ["team"] if critics is self.team_critic else critics.uids
                for name, value in per_label.items():
                    names += [name.format(label) for label in labels]
                    values += list(value)
        return names, values

    def _track_critic_learning_rates(self) -> None:
        for critics in self.critic_groups:
            for label in ["team"] if critics is self.team_critic else critics.uids:
                self.track_data(
                    f"Learning / Critic learning rate ({label})", critics.critic_optimizer.param_groups[0]["lr"]
                )

    @contextlib.contextmanager
    def _frozen(self, parameters: list[torch.Tensor]) -> Iterator[None]:
        """No gradients for ``parameters`` inside (the critics while the policies step: HARL's ``turn_off_grad``,
        which spares the critics' weight gradients in the policies' backward passes)."""
        flags = [p.requires_grad for p in parameters]
        for p in parameters:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p, flag in zip(parameters, flags, strict=True):
                p.requires_grad_(flag)

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
        """Actions of every agent, one forward pass per group, exploring in training as the algorithm does
        (``_act_group``; nothing is stored here: see :meth:`record_transition`).

        :param observations: ``{agent: (N, obs_size)}``; agents absent from the dict get no action.
        :param states: ``{agent: (N, state_size) or None}``.
        :param timestep: Current timestep (the exploration schedule and ``cfg.random_timesteps`` read it).
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

    def _act_group(
        self, group: OffPolicyGroup, observations: dict, states: Any, *, timestep: int, timesteps: int
    ) -> tuple[torch.Tensor, dict]:
        """One group's actions ``(G, N, size)`` and the policy's outputs (the algorithm's)."""
        raise NotImplementedError

    def _random_actions(
        self, group: OffPolicyGroup, rows: int, mask: torch.Tensor | None = None, *, noise: Callable | None = None
    ) -> torch.Tensor:
        """``rows`` actions of ``cfg.random_timesteps``, always inside the action space: Discrete ones uniform among the
        allowed actions; in a Box, uniform between the bounds where both are finite (as skrl's ``random_act``), and
        where a bound is infinite ``noise(shape)`` (standard normal when None) around the point of the dimension nearest
        0, clipped to its finite bound (``Box(0, inf)``: ``max(0, noise)``)."""
        if group.discrete:
            if mask is None:
                return torch.randint(group.num_actions, (rows, 1), device=self.device)
            zeros = torch.zeros(rows, group.num_actions, device=self.device)  # uniform among the allowed actions
            return gumbel_max_actions(logits=zeros, mask=mask)
        low, high = group.low, group.high
        uniform = low + (high - low) * torch.rand(rows, low.numel(), device=self.device)
        if group.all_bounded:
            return uniform
        centre = torch.maximum(torch.minimum(torch.zeros_like(low), high), low)
        shape = (rows, low.numel())
        noisy = centre + (noise(shape) if noise else torch.randn(shape, device=self.device)).to(low)
        return torch.where(group.bounded, uniform, torch.maximum(torch.minimum(noisy, high), low))

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

    def _online_models(self) -> list[Model]:
        """The models a gradient step trains, a team critic once (the targets only ever evaluate)."""
        policies = [group.models["policy"] for group in self.groups]
        return policies + [critics.models[role] for critics in self.critic_groups for role in critics.critic_roles]

    def _online_training_mode(self, enabled: bool) -> None:
        """Training mode of the policies and critics."""
        for model in self._online_models():
            model.enable_training_mode(enabled)

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

    def _gradient_step(self) -> None:
        """One gradient step of every group on one batch of joint transitions (the algorithm's)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ update: one batch

    def sample_indexes(self) -> torch.Tensor:
        """One set of ``cfg.batch_size`` row indexes (with replacement) into the filled part of the memories.

        The same indexes are read from every agent's memory, so row ``b`` of every batch is one joint transition.
        """
        return self.replay.sample_indexes(self.cfg.batch_size)

    def sample_batch(self, indexes: torch.Tensor | None = None) -> dict[str, dict[str, torch.Tensor]]:
        """Read the rows ``indexes`` (:meth:`sample_indexes` when None) of every agent's memory.

        :return: ``{agent: {tensor name: (batch, size)}}``; Discrete agents' also hold ``"action_mask"`` and
            ``"next_action_mask"``, bool ``(batch, n)``. With ``cfg.n_step > 1``, ``n``-step rows and each row's
            ``"discount"`` (``gamma^k``, :meth:`~skrl_marl_ext.storage.replay.JointReplay.sample`).
        """
        indexes = self.sample_indexes() if indexes is None else indexes
        if self.cfg.n_step == 1:
            return self.replay.sample(indexes, device=self.device)
        uids = self.possible_agents
        return self.replay.sample(
            indexes,
            device=self.device,
            n_step=self.cfg.n_step,
            discounts={uid: self.cfg.value_for("discount_factor", uid) for uid in uids},
            through_truncation=all(self.cfg.value_for("time_limit_bootstrap", uid) for uid in uids),
        )

    def _sample(self) -> tuple[dict, torch.Tensor]:
        """Sample phase: a batch of joint transitions (:meth:`sample_batch`), the preprocessors' statistics updated
        from it (:meth:`_update_all_statistics`), and the stored joint action as the critics read it,
        ``(B, joint size)``."""
        batch = self.sample_batch()
        self._update_all_statistics(batch)
        taken = {u: self._encode_actions(u, batch[u]["actions"]) for u in self.possible_agents}
        return batch, self._joint(taken)

    def _update_all_statistics(self, batch: dict) -> None:
        """The preprocessors' statistics from the batch: each group's own (observations and, without a team critic,
        critic states); a team critic's state statistics from the rows where any agent is alive."""
        team = self.team_critic
        for group in self.groups:
            self._update_statistics(group, batch, kinds=("observation",) if team else ("observation", "state"))
        if team is not None:
            self._update_statistics(team, batch, mask=self._team_rows(batch)["agent_mask"], kinds=("state",))

    def _update_statistics(
        self, group: AgentGroup, batch: dict, mask: torch.Tensor | None = None, kinds=("observation", "state")
    ) -> None:
        """Fold the batch's rows of the group's agents into the statistics of its preprocessors of ``kinds``, where
        ``mask`` (the agents' own masks when None) is True."""
        mask = self._per_agent(group, batch, "agent_mask") if mask is None else mask  # (G, B, 1)
        if "observation" in kinds and group.observation_preprocessor is not identity:
            obs = self._per_agent(group, batch, "observations")
            group.update_statistics("observation", obs, mask, agent_dim=0)
        if "state" in kinds and group.state_preprocessor is not identity:
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

    def _group_inputs(self, group: AgentGroup, batch: dict, *, next_: bool) -> tuple[torch.Tensor, ...]:
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

    def _group_action_mask(self, group: AgentGroup, batch: dict, *, next_: bool) -> torch.Tensor | None:
        """The stored action masks of the group's rows, bool ``(G * B, n)`` (``next_action_mask`` when ``next_``);
        None for continuous agents."""
        if not group.discrete:
            return None
        key = "next_action_mask" if next_ else "action_mask"
        return torch.cat([batch[u][key] for u in group.uids])

    def _per_agent(self, group: AgentGroup, batch: dict, key: str) -> torch.Tensor:
        return torch.stack([batch[u][key] for u in group.uids])  # (G, B, size)

    @staticmethod
    def _logits(policy: Model, role: str) -> torch.Tensor:
        """Logits (log-probabilities) of a categorical policy's last call: its distribution's, whether the network
        gives logits or probabilities (the argmax and the Gumbel-softmax do not see the per-row constant)."""
        return policy.distribution(role=role).logits

    def _agents_step(
        self, optimizer: Adam, loss: torch.Tensor, parameters: list, clip: float, *, agents: list[bool] | None
    ) -> None:
        """:meth:`_optimizer_step` of some of a batched group's agents: ``agents`` flags the ones that step (None:
        all); the others keep their parameters, moments and step counts."""
        if agents is None:
            self._optimizer_step(optimizer, loss, parameters, clip)
            return
        optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        scaled_step(self.scaler, optimizer, clip_sets=[parameters], max_norm=clip, agents=agents)


__all__ = ["OffPolicyAgent", "OffPolicyGroup", "OffPolicyProgress"]
