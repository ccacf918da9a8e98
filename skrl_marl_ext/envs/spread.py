"""A small built-in cooperative env, pure torch and vectorized the Isaac Lab way.

``SpreadEnv`` is cooperative navigation with assigned goals: each of ``num_agents`` agents on the plane must reach its
own goal, drawn anew every episode, and the team shares one reward, the negative mean distance to the goals. Since
the goals move from episode to episode, no constant action solves it; a policy must read its observation.

It has the interface of an Isaac Lab ``DirectMARLEnv`` as skrl's wrapper sees it (``possible_agents``,
``observation_spaces``, ``action_spaces``, ``state_space``, ``num_envs``, ``device``, ``reset()``, ``step()``,
``state()``), so :func:`make_spread_env` hands it to skrl's own ``IsaacLabMultiAgentWrapper``: the same path an
Isaac Lab multi-agent task takes. Everything is ``(num_envs, ...)`` tensors; finished envs reset in place. Unlike an
Isaac Lab env, at a step where some env ends the extras (the infos the agents get) also hold the ended episodes' last
observations and states, ``extras["final_observations"]`` and ``extras["final_states"]`` (see
:mod:`skrl_marl_ext.keys`), which the time-limit bootstrap uses.

An episode's return (per agent) is the team reward summed over its steps: a policy that moves straight to its goal
scores far higher than a random one.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

from skrl_marl_ext.envs.base import BuiltinEnv
from skrl_marl_ext.keys import ACTION_MASK_KEY, AGENT_MASK_KEY, FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY

# discrete actions: stay, +x, -x, +y, -y
_MOVES = ((0.0, 0.0), (1.0, 0.0), (-1.0, 0.0), (0.0, 1.0), (0.0, -1.0))


class SpreadEnv(BuiltinEnv):
    def __init__(
        self,
        num_envs: int = 64,
        num_agents: int = 3,
        *,
        continuous: bool = True,
        episode_length: int = 25,
        step_size: float = 0.1,
        goal_radius: float = 0.1,
        agent_masks: bool = False,
        action_masks: bool = False,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        """Cooperative navigation with assigned goals (see the module docstring).

        :param num_envs: Number of envs stepped as one batch.
        :param num_agents: Number of agents (``agent_0`` ... ``agent_{n-1}``).
        :param continuous: Box(-1, 1, (2,)) velocity actions; otherwise Discrete(5) moves (stay, +x, -x, +y, -y).
        :param episode_length: Steps before an episode is truncated.
        :param step_size: Distance covered per step at full speed.
        :param goal_radius: Distance at which an agent counts as at its goal; an episode *terminates* when every agent
            is at its goal.
        :param agent_masks: An agent at its goal stops and is masked (``infos["agent_mask"]``) for the rest of the
            episode: a stand-in for agents that die or leave.
        :param action_masks: (Discrete only) moves that would leave the square ``[-1, 1]^2`` are masked
            (``infos["action_mask"]``).
        :param device: Device of every tensor.
        :param seed: Seed of the env's own random generator (``reset(seed=...)`` reseeds it).
        """
        if action_masks and continuous:
            raise ValueError("SpreadEnv: action_masks needs discrete actions (continuous=False)")
        super().__init__(num_envs=num_envs, num_agents=num_agents, episode_length=episode_length, device=device)
        self.continuous = continuous
        self.step_size = step_size
        self.goal_radius = goal_radius
        self.agent_masks = agent_masks
        self.action_masks = action_masks

        obs_size = 4 + 2 * (num_agents - 1)
        obs_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_size,), dtype=np.float32)
        act_space = (
            gymnasium.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32) if continuous else gymnasium.spaces.Discrete(5)
        )
        self.observation_spaces = {uid: obs_space for uid in self.possible_agents}
        self.action_spaces = {uid: act_space for uid in self.possible_agents}
        self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, (4 * num_agents,), dtype=np.float32)

        self._generator = torch.Generator(device=self.device)
        if seed is not None:
            self._generator.manual_seed(seed)
        self._moves = torch.tensor(_MOVES, device=self.device)
        self.positions = torch.zeros(num_envs, num_agents, 2, device=self.device)
        self.goals = torch.zeros(num_envs, num_agents, 2, device=self.device)
        self.active = torch.ones(num_envs, num_agents, dtype=torch.bool, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _uniform(self, shape) -> torch.Tensor:
        return torch.rand(shape, generator=self._generator, device=self.device) * 2.0 - 1.0

    def _reset_envs(self, envs: torch.Tensor) -> None:
        """Reset the envs where the boolean ``envs`` (num_envs,) is True, without a Python loop over envs."""
        where = envs.view(-1, 1, 1)
        shape = (self.num_envs, self.num_agents, 2)
        self.positions = torch.where(where, self._uniform(shape), self.positions)
        self.goals = torch.where(where, self._uniform(shape), self.goals)
        self.active = torch.where(envs.view(-1, 1), True, self.active)
        self.steps = torch.where(envs, 0, self.steps)

    def _observations(self) -> dict[str, torch.Tensor]:
        to_goal = self.goals - self.positions
        relative = self.positions.unsqueeze(1) - self.positions.unsqueeze(2)  # [e, i, j] = p_j - p_i
        observations = {}
        for i, uid in enumerate(self.possible_agents):
            others = torch.cat([relative[:, i, :i], relative[:, i, i + 1 :]], dim=1).reshape(self.num_envs, -1)
            observations[uid] = torch.cat([self.positions[:, i], to_goal[:, i], others], dim=-1)
        return observations

    def _action_masks(self) -> dict[str, dict[str, torch.Tensor]]:
        """``{"action_mask": {agent: (num_envs, 5) bool}}`` for the current positions, when action masks are on."""
        if not self.action_masks:
            return {}
        # a move is allowed unless it takes the agent out of [-1, 1]^2
        target = self.positions.unsqueeze(2) + self.step_size * self._moves  # (envs, agents, 5, 2)
        allowed = (target.abs() <= 1.0).all(dim=-1)
        return {ACTION_MASK_KEY: {uid: allowed[:, i] for i, uid in enumerate(self.possible_agents)}}

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Reset every env. :return: ``(observations, extras)``."""
        if seed is not None:
            self._generator.manual_seed(seed)
        self._reset_envs(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._observations(), self._action_masks()

    def step(self, actions: dict[str, torch.Tensor]):
        """Step every env; finished envs are reset and their new observations returned.

        :param actions: ``{agent: (num_envs, 2) float}`` or ``{agent: (num_envs, 1) int}``.
        :return: ``(observations, rewards, terminated, truncated, extras)``, rewards and signals of shape
            ``(num_envs,)`` per agent.
        """
        if self.continuous:
            velocity = torch.stack([actions[uid].reshape(self.num_envs, 2) for uid in self.possible_agents], dim=1)
            velocity = velocity.clamp(-1.0, 1.0)
        else:
            index = torch.stack([actions[uid].reshape(self.num_envs) for uid in self.possible_agents], dim=1)
            velocity = self._moves[index.long()]
        acted = self.active.clone()
        move = self.step_size * velocity * self.active.unsqueeze(-1)
        self.positions = (self.positions + move).clamp(-1.5, 1.5)
        self.steps += 1

        distance = (self.goals - self.positions).norm(dim=-1)  # (envs, agents)
        at_goal = distance < self.goal_radius
        if self.agent_masks:
            self.active = self.active & ~at_goal
        reward = -distance.mean(dim=-1)
        terminated = at_goal.all(dim=-1)
        truncated = (self.steps >= self.episode_length) & ~terminated
        extras: dict[str, Any] = {}
        if self.agent_masks:
            extras[AGENT_MASK_KEY] = {uid: acted[:, i : i + 1] for i, uid in enumerate(self.possible_agents)}
        ended = terminated | truncated
        if bool(ended.any()):  # one host read per step: the final observations are handed only when some env ends
            # the last observation and state of the episodes that end here, before the reset replaces them
            extras[FINAL_OBSERVATIONS_KEY] = self._observations()
            state = self.state()
            extras[FINAL_STATES_KEY] = {uid: state for uid in self.possible_agents}
        self._reset_envs(ended)
        extras.update(self._action_masks())  # masks of the observations returned, after the resets

        observations = self._observations()
        rewards = {uid: reward for uid in self.possible_agents}
        return (
            observations,
            rewards,
            {uid: terminated for uid in self.possible_agents},
            {uid: truncated for uid in self.possible_agents},
            extras,
        )

    def state(self) -> torch.Tensor:
        """Global state: every agent's position and goal, shape ``(num_envs, 4 * num_agents)``."""
        return torch.cat([self.positions, self.goals], dim=-1).reshape(self.num_envs, -1)


def make_spread_env(**kwargs) -> IsaacLabMultiAgentWrapper:
    """A :class:`SpreadEnv` behind skrl's ``IsaacLabMultiAgentWrapper`` (what ``wrap_env(env, "isaaclab")`` gives).

    :param kwargs: Arguments of :class:`SpreadEnv`.
    """
    return IsaacLabMultiAgentWrapper(SpreadEnv(**kwargs))
