"""A tiny PettingZoo ParallelEnv that can break its contract, importable as a module (``parallel_env``).

Agents ``left`` and ``right`` see Box observations of 4 values in ``dtype`` (``uint8``: a camera's dtype) and act in
Discrete(3), or in an integer Box of 2 values with ``int_actions``; episodes last 5 steps. ``fault`` breaks the
contract at the first step: ``short_observation`` (``right``'s observation one value short), ``two_rewards``
(``right``'s reward two values), ``long_state`` (a state one value long), ``wide_mask`` (``right``'s action mask in
its infos one value too many).
"""

from __future__ import annotations

import gymnasium
import numpy as np


class FaultyEnv:
    metadata = {"name": "faulty_v0"}

    def __init__(self, fault: str | None = None, dtype: str = "float32", int_actions: bool = False) -> None:
        self.fault, self.dtype, self.int_actions = fault, np.dtype(dtype), int_actions
        self.possible_agents = ["left", "right"]
        self.agents: list[str] = []
        self.received: list[dict] = []
        self.state_space = gymnasium.spaces.Box(0, 255, (8,), dtype=self.dtype)

    def observation_space(self, agent):
        return gymnasium.spaces.Box(0, 255, (4,), dtype=self.dtype)

    def action_space(self, agent):
        if self.int_actions:
            return gymnasium.spaces.Box(-5, 5, (2,), dtype=np.int16)
        return gymnasium.spaces.Discrete(3)

    def _obs(self):
        obs = {uid: np.full(4, 10 * self.t + i, dtype=self.dtype) for i, uid in enumerate(self.agents)}
        if self.fault == "short_observation" and self.t == 1:
            obs["right"] = obs["right"][:3]
        return obs

    def state(self):
        size = 9 if self.fault == "long_state" and self.t == 1 else 8
        return np.full(size, self.t, dtype=self.dtype)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {uid: {} for uid in self.agents}

    def step(self, actions):
        self.received.append(actions)
        self.t += 1
        rewards = {uid: 1.0 for uid in self.agents}
        if self.fault == "two_rewards":
            rewards["right"] = np.array([1.0, 2.0])
        infos = {uid: {} for uid in self.agents}
        if self.fault == "wide_mask":
            infos = {uid: {"action_mask": np.ones(4 if uid == "right" else 3, dtype=np.int8)} for uid in self.agents}
        done = self.t >= 5
        truncated = dict.fromkeys(self.agents, done)
        terminated = dict.fromkeys(self.agents, False)
        observations = self._obs()
        self.agents = [] if done else self.agents
        return observations, rewards, terminated, truncated, infos

    def close(self):
        pass


def parallel_env(fault: str | None = None, dtype: str = "float32", int_actions: bool = False) -> FaultyEnv:
    return FaultyEnv(fault, dtype, int_actions)
