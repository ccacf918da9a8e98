"""A null env: trivial tensor dynamics, for measuring what the agents (not the simulator) cost.

``NullEnv`` has the interface of an Isaac Lab ``DirectMARLEnv`` as skrl's wrapper sees it (like
:class:`~skrl_marl_ext.envs.SpreadEnv`), so :func:`make_null_env` hands it to skrl's ``IsaacLabMultiAgentWrapper``
and both this package's agents and skrl's built-in MAPPO/IPPO can train on it. Each agent's observation decays
towards zero and is pushed by its action; the team reward is the negative mean squared observation. Every episode
is truncated after ``episode_length`` steps (all envs together). A step costs a handful of tensor operations on
``(num_envs, num_agents, obs_size)``, so the time a run on it takes is the agents' time.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

from skrl_marl_ext.envs.base import BuiltinEnv


class NullEnv(BuiltinEnv):
    def __init__(
        self,
        num_envs: int = 64,
        num_agents: int = 4,
        *,
        obs_size: int = 16,
        action_size: int = 2,
        episode_length: int = 100,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        """Trivial dynamics ``obs <- 0.9 * obs + 0.1 * pad(action)`` per agent (see the module docstring).

        :param num_envs: Number of envs stepped as one batch.
        :param num_agents: Number of agents (``agent_0`` ... ``agent_{n-1}``).
        :param obs_size: Observation size per agent; the global state is all observations, ``num_agents * obs_size``.
        :param action_size: Box(-1, 1) action size per agent (at most ``obs_size``).
        :param episode_length: Steps before every env is truncated.
        :param device: Device of every tensor.
        :param seed: Seed of the initial observations.
        """
        if action_size > obs_size:
            raise ValueError(f"NullEnv: action_size ({action_size}) must not exceed obs_size ({obs_size})")
        super().__init__(num_envs=num_envs, num_agents=num_agents, episode_length=episode_length, device=device)
        self.obs_size = obs_size
        self.action_size = action_size
        obs_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_size,), dtype=np.float32)
        act_space = gymnasium.spaces.Box(-1.0, 1.0, (action_size,), dtype=np.float32)
        self.observation_spaces = {uid: obs_space for uid in self.possible_agents}
        self.action_spaces = {uid: act_space for uid in self.possible_agents}
        self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, (num_agents * obs_size,), dtype=np.float32)
        self._generator = torch.Generator(device=self.device)
        if seed is not None:
            self._generator.manual_seed(seed)
        self.x = torch.zeros(num_envs, num_agents, obs_size, device=self.device)
        self.steps = 0

    def _observations(self) -> dict[str, torch.Tensor]:
        return {uid: self.x[:, i] for i, uid in enumerate(self.possible_agents)}

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Reset every env. :return: ``(observations, extras)``."""
        if seed is not None:
            self._generator.manual_seed(seed)
        self.x = torch.randn(self.x.shape, generator=self._generator, device=self.device)
        self.steps = 0
        return self._observations(), {}

    def step(self, actions: dict[str, torch.Tensor]):
        """Step every env. :return: ``(observations, rewards, terminated, truncated, extras)``, ``(num_envs,)``."""
        a = torch.stack([actions[uid].reshape(self.num_envs, -1) for uid in self.possible_agents], dim=1)
        self.x = 0.9 * self.x
        self.x[..., : self.action_size] += 0.1 * a.clamp(-1.0, 1.0)
        self.steps += 1
        reward = -self.x.square().mean(dim=(1, 2))
        done = self.steps >= self.episode_length
        truncated = torch.full((self.num_envs,), done, dtype=torch.bool, device=self.device)
        terminated = torch.zeros_like(truncated)
        if done:
            self.x = torch.randn(self.x.shape, generator=self._generator, device=self.device)
            self.steps = 0
        return (
            self._observations(),
            {uid: reward for uid in self.possible_agents},
            {uid: terminated for uid in self.possible_agents},
            {uid: truncated for uid in self.possible_agents},
            {},
        )

    def state(self) -> torch.Tensor:
        """Global state: every agent's observation, shape ``(num_envs, num_agents * obs_size)``."""
        return self.x.reshape(self.num_envs, -1)


def make_null_env(**kwargs) -> IsaacLabMultiAgentWrapper:
    """A :class:`NullEnv` behind skrl's ``IsaacLabMultiAgentWrapper``.

    :param kwargs: Arguments of :class:`NullEnv`.
    """
    return IsaacLabMultiAgentWrapper(NullEnv(**kwargs))
