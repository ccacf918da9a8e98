"""What the package's envs share: the spaces of a batched multi-agent wrapper, and the plumbing of a built-in env.

:class:`BatchedWrapper` is skrl's ``MultiAgentEnvWrapper`` for an env whose every agent is always present
(possibly masked): ``possible_agents`` and ``agents`` are the same list, and the spaces are fixed at construction.
:class:`BuiltinEnv` is the tail of an Isaac Lab ``DirectMARLEnv`` stand-in (``unwrapped``, ``render``, ``close``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper


class BatchedWrapper(MultiAgentEnvWrapper):
    """Spaces and agent lists read from ``_possible_agents``, ``_observation_spaces``, ``_action_spaces`` and
    ``_state_space`` (one global state space for every agent, or None), which the subclass sets."""

    _possible_agents: list[str]
    _observation_spaces: dict[str, gymnasium.Space]
    _action_spaces: dict[str, gymnasium.Space]
    _state_space: gymnasium.Space | None = None

    @property
    def possible_agents(self) -> list[str]:
        return self._possible_agents

    @property
    def agents(self) -> list[str]:
        return self._possible_agents

    @property
    def observation_spaces(self) -> dict[str, gymnasium.Space]:
        return self._observation_spaces

    @property
    def action_spaces(self) -> dict[str, gymnasium.Space]:
        return self._action_spaces

    @property
    def state_spaces(self) -> dict[str, gymnasium.Space | None]:
        return {uid: self._state_space for uid in self._possible_agents}


class BuiltinEnv:
    """A pure-torch env with the interface skrl's ``IsaacLabMultiAgentWrapper`` reads (see :mod:`.spread`)."""

    def __init__(self, *, num_envs: int, num_agents: int, episode_length: int, device: str | torch.device) -> None:
        """Agents ``agent_0`` ... ``agent_{num_agents - 1}``, all present in every step.

        :param num_envs: Number of envs stepped as one batch.
        :param num_agents: Number of agents.
        :param episode_length: Steps before an episode is truncated.
        :param device: Device of every tensor.
        """
        self.num_envs, self.num_agents, self.episode_length = num_envs, num_agents, episode_length
        self.device = torch.device(device)
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents = list(self.possible_agents)

    @property
    def unwrapped(self) -> Any:
        return self

    def render(self, *args, **kwargs) -> None:
        return None

    def close(self) -> None:
        pass
