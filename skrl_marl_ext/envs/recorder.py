"""Episode returns of any skrl multi-agent env, counted as it is stepped (for learning curves and evaluation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper


class EpisodeRecorder(MultiAgentEnvWrapper):
    def __init__(
        self,
        env: MultiAgentEnvWrapper,
        *,
        keep: int | None = None,
        on_episodes: Callable[[int, list[list[float]]], None] | None = None,
    ) -> None:
        """Wrap a skrl multi-agent env (vectorized, auto-resetting) and count every finished episode's return.

        An env's episode ends at the step where every agent is terminated or truncated (the rule of every wrapper of
        this package, and of Isaac Lab's, where all agents share the done signals). Each finished episode is kept as
        ``(step, {agent: return})``, ``step`` being the number of :meth:`step` calls so far, and handed to
        ``on_episodes``.

        :param env: A skrl ``MultiAgentEnvWrapper`` with ``num_envs`` envs that reset themselves.
        :param keep: How many of the newest finished episodes :attr:`episodes` keeps (None: all of them). A long run
            keeps none and writes them where they belong through ``on_episodes`` (``skrl-marl train`` appends them
            to ``episodes.csv``): kept, they take memory without end.
        :param on_episodes: Called as ``on_episodes(step, returns)`` at each step where episodes ended, ``returns``
            holding one list per ended episode of its return per agent, in ``possible_agents`` order.
        """
        super().__init__(env)
        self._agents = list(env.possible_agents)
        self._steps = 0
        self._returns: torch.Tensor | None = None
        self._keep, self._on_episodes = keep, on_episodes
        self.episodes: list[tuple[int, dict[str, float]]] = []
        """Finished episodes, oldest first (the newest ``keep``): ``(step, {agent: undiscounted return})``."""
        self.finished = 0
        """Episodes finished so far, kept or not."""

    def __getattr__(self, key: str) -> Any:
        return getattr(self._env, key)

    @property
    def num_envs(self) -> int:
        return self._env.num_envs

    @property
    def device(self) -> torch.device:
        return self._env.device

    @property
    def possible_agents(self) -> list[str]:
        return self._env.possible_agents

    @property
    def agents(self) -> list[str]:
        return self._env.agents

    @property
    def observation_spaces(self):
        return self._env.observation_spaces

    @property
    def action_spaces(self):
        return self._env.action_spaces

    @property
    def state_spaces(self):
        return self._env.state_spaces

    def reset(self):
        """Reset the wrapped env; returns of unfinished episodes are discarded.

        skrl's Isaac Lab wrappers reset the env only at their first ``reset()`` and later return the last observations
        (the env resets itself); the episodes then go on, and so does their count here.
        """
        resets = getattr(self._env, "_reset_once", True)  # False: skrl's Isaac Lab wrapper after its first reset
        if resets:
            self._returns = None
        return self._env.reset()

    def step(self, actions: dict[str, torch.Tensor]):
        """Step the wrapped env and record the episodes that ended (outputs are passed through unchanged)."""
        observations, rewards, terminated, truncated, infos = self._env.step(actions)
        self._steps += 1
        reward = torch.cat([rewards[uid].reshape(-1, 1) for uid in self._agents], dim=1).float()
        if self._returns is None:
            self._returns = torch.zeros_like(reward)
        self._returns += reward
        done = torch.stack([(terminated[uid] | truncated[uid]).reshape(-1) for uid in self._agents], dim=1).all(dim=1)
        if bool(done.any()):
            rows = self._returns[done].tolist()
            self._returns[done] = 0.0
            self.finished += len(rows)
            if self._on_episodes is not None:
                self._on_episodes(self._steps, rows)
            if self._keep != 0:
                self.episodes += [(self._steps, dict(zip(self._agents, row, strict=True))) for row in rows]
                if self._keep is not None and len(self.episodes) > self._keep:
                    del self.episodes[: len(self.episodes) - self._keep]
        return observations, rewards, terminated, truncated, infos

    def state(self):
        return self._env.state()

    def render(self, *args, **kwargs):
        return self._env.render(*args, **kwargs)

    def close(self) -> None:
        self._env.close()
