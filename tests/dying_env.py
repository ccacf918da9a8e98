"""A tiny PettingZoo ParallelEnv where an agent dies, importable as a module (``parallel_env``) by the CLI tests."""

from __future__ import annotations

import gymnasium
import numpy as np


class DyingEnv:
    """A tiny ParallelEnv: ``runner`` lives ``length`` steps; ``dier`` dies after 2 steps (terminated).

    Observations are ``[step, agent index, 1]``; ``dier`` has a Dict observation with an action mask that allows
    only action 2 of Discrete(3). Reward of each agent: its action value.
    """

    metadata = {"name": "dying_v0"}

    def __init__(self, length: int = 4) -> None:
        self.length = length
        self.possible_agents = ["runner", "dier"]
        self.agents: list[str] = []
        self._box = gymnasium.spaces.Box(-10, 10, (3,), dtype=np.float32)
        self._mask = gymnasium.spaces.MultiBinary(3)

    def observation_space(self, agent):
        if agent == "dier":
            return gymnasium.spaces.Dict({"observation": self._box, "action_mask": self._mask})
        return self._box

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(3)

    def _obs(self):
        out = {}
        for i, uid in enumerate(self.agents):
            value = np.array([self.t, i, 1.0], dtype=np.float32)
            out[uid] = {"observation": value, "action_mask": np.array([0, 0, 1], np.int8)} if uid == "dier" else value
        return out

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._obs(), {uid: {} for uid in self.agents}

    def step(self, actions):
        self.t += 1
        rewards = {uid: float(actions[uid]) for uid in self.agents}
        terminated = {uid: uid == "dier" and self.t >= 2 for uid in self.agents}
        truncated = {uid: uid == "runner" and self.t >= self.length for uid in self.agents}
        self.agents = [uid for uid in self.agents if not (terminated[uid] or truncated[uid])]
        return self._obs(), rewards, terminated, truncated, {uid: {} for uid in rewards}

    def close(self):
        pass


def parallel_env(length: int = 4) -> DyingEnv:
    return DyingEnv(length)
