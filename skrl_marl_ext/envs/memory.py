"""A small built-in memory task (cue recall), pure torch and vectorized the Isaac Lab way.

``MemoryEnv`` needs a recurrent policy. Each of ``num_agents`` agents is shown its own cue, one of ``num_cues``
(drawn uniformly anew every episode, for every agent and env), at the first step of an episode only; ``delay`` steps
later a query flag asks for it. An episode lasts ``delay + 1`` steps, ``t = 0 ... delay``; agent ``i`` observes
``num_cues + 2`` numbers: the one-hot cue at ``t = 0`` (zeros at every later step), the query flag (1 at
``t = delay`` only) and the fraction of the episode elapsed, ``t / delay``. Its action is one of ``num_cues``; only the
action at the query step counts: reward 1 where it equals the agent's cue, 0 otherwise, and 0 at every other step
(per-agent rewards, no team reward). The episode *terminates* after the query step. No observation after the first
reveals the cue, so a memoryless policy is at chance, whatever it learns.

It has the interface of an Isaac Lab ``DirectMARLEnv`` as skrl's wrapper sees it (like
:class:`~skrl_marl_ext.envs.SpreadEnv`), so :func:`make_memory_env` hands it to skrl's own
``IsaacLabMultiAgentWrapper``. Everything is ``(num_envs, ...)`` tensors; finished envs reset in place (with new
cues). At a step where some env ends, the extras also hold the ended episodes' last observations and states,
``extras["final_observations"]`` and ``extras["final_states"]`` (see :mod:`skrl_marl_ext.keys`): the observation after
the query step, with no cue, no query flag and the elapsed fraction 1.

Returns (per agent, summed over an episode): 1 on success, 0 otherwise, so the mean episode return is the success
rate. A policy without memory gets at most ``1 / num_cues`` (chance); one that remembers its cue gets 1.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

from skrl_marl_ext.envs.base import BuiltinEnv
from skrl_marl_ext.keys import FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY


class MemoryEnv(BuiltinEnv):
    def __init__(
        self,
        num_envs: int = 64,
        num_agents: int = 2,
        *,
        num_cues: int = 4,
        delay: int = 6,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        """Cue recall after a delay (see the module docstring).

        :param num_envs: Number of envs stepped as one batch (at least 1).
        :param num_agents: Number of agents (``agent_0`` ... ``agent_{n-1}``, at least 1).
        :param num_cues: Number of distinct cues, and of actions (at least 2).
        :param delay: Steps from the cue to the query (at least 1); an episode lasts ``delay + 1`` steps.
        :param device: Device of every tensor.
        :param seed: Seed of the env's own random generator (``reset(seed=...)`` reseeds it).

        :raises ValueError: When an argument is out of range (the message names it).
        """
        for name, value, least in (("num_envs", num_envs, 1), ("num_agents", num_agents, 1)):
            if value < least:
                raise ValueError(f"MemoryEnv: {name} must be at least {least}, got {value}")
        if num_cues < 2:
            raise ValueError(f"MemoryEnv: num_cues must be at least 2 (one cue needs no memory), got {num_cues}")
        if delay < 1:
            raise ValueError(f"MemoryEnv: delay must be at least 1 (the query comes after the cue), got {delay}")
        super().__init__(num_envs=num_envs, num_agents=num_agents, episode_length=delay + 1, device=device)
        self.num_cues = num_cues
        self.delay = delay

        obs_space = gymnasium.spaces.Box(0.0, 1.0, (num_cues + 2,), dtype=np.float32)
        act_space = gymnasium.spaces.Discrete(num_cues)
        self.observation_spaces = {uid: obs_space for uid in self.possible_agents}
        self.action_spaces = {uid: act_space for uid in self.possible_agents}
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (num_agents * (num_cues + 2),), dtype=np.float32)

        self._generator = torch.Generator(device=self.device)
        if seed is not None:
            self._generator.manual_seed(seed)
        self.cues = torch.zeros(num_envs, num_agents, dtype=torch.long, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _reset_envs(self, envs: torch.Tensor) -> None:
        """Reset the envs where the boolean ``envs`` (num_envs,) is True, without a Python loop over envs."""
        shape = (self.num_envs, self.num_agents)
        cues = torch.randint(self.num_cues, shape, generator=self._generator, device=self.device)
        self.cues = torch.where(envs.view(-1, 1), cues, self.cues)
        self.steps = torch.where(envs, 0, self.steps)

    def _observation_tensor(self) -> torch.Tensor:
        """Every agent's observation at the current steps, ``(num_envs, num_agents, num_cues + 2)``.

        After the query step (``steps == delay + 1``, before the reset) it is the terminal observation: no cue, no
        query flag, elapsed fraction 1.
        """
        shown = (self.steps == 0).view(-1, 1, 1)
        cue = torch.nn.functional.one_hot(self.cues, self.num_cues).float() * shown
        query = (self.steps == self.delay).float().view(-1, 1, 1).expand(-1, self.num_agents, 1)
        elapsed = (self.steps.float() / self.delay).clamp(max=1.0).view(-1, 1, 1).expand(-1, self.num_agents, 1)
        return torch.cat([cue, query, elapsed], dim=-1)

    def _observations(self) -> dict[str, torch.Tensor]:
        observations = self._observation_tensor()
        return {uid: observations[:, i] for i, uid in enumerate(self.possible_agents)}

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Reset every env. :return: ``(observations, extras)``."""
        if seed is not None:
            self._generator.manual_seed(seed)
        self._reset_envs(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._observations(), {}

    def step(self, actions: dict[str, torch.Tensor]):
        """Step every env; finished envs are reset (new cues) and their new observations returned.

        :param actions: ``{agent: (num_envs, 1) int}``, the cue each agent names.
        :return: ``(observations, rewards, terminated, truncated, extras)``, rewards and signals of shape
            ``(num_envs,)`` per agent.
        """
        answers = torch.stack([actions[uid].reshape(self.num_envs) for uid in self.possible_agents], dim=1).long()
        query = (self.steps == self.delay).unsqueeze(-1)
        reward = ((answers == self.cues) & query).float()  # (envs, agents)
        self.steps += 1

        terminated = self.steps > self.delay
        truncated = torch.zeros_like(terminated)
        extras: dict[str, Any] = {}
        if bool(terminated.any()):  # one host read per step: the final observations are handed only when some env ends
            # the last observation and state of the episodes that end here, before the reset replaces them
            extras[FINAL_OBSERVATIONS_KEY] = self._observations()
            state = self.state()
            extras[FINAL_STATES_KEY] = {uid: state for uid in self.possible_agents}
        self._reset_envs(terminated)

        observations = self._observations()
        return (
            observations,
            {uid: reward[:, i] for i, uid in enumerate(self.possible_agents)},
            {uid: terminated for uid in self.possible_agents},
            {uid: truncated for uid in self.possible_agents},
            extras,
        )

    def state(self) -> torch.Tensor:
        """Global state: every agent's observation, concatenated, shape ``(num_envs, num_agents * (num_cues + 2))``."""
        return self._observation_tensor().reshape(self.num_envs, -1)


def make_memory_env(**kwargs) -> IsaacLabMultiAgentWrapper:
    """A :class:`MemoryEnv` behind skrl's ``IsaacLabMultiAgentWrapper`` (what ``wrap_env(env, "isaaclab")`` gives).

    :param kwargs: Arguments of :class:`MemoryEnv`.
    """
    return IsaacLabMultiAgentWrapper(MemoryEnv(**kwargs))
