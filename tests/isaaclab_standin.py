"""A pure-torch stand-in for an Isaac Lab ``DirectMARLEnv`` (not a test module).

It has what skrl 2.1.1's ``IsaacLabMultiAgentWrapper`` (``wrap_env(env, wrapper="isaaclab-multi-agent")``) and its base
``MultiAgentEnvWrapper`` read: ``possible_agents``/``agents``, ``observation_spaces``/``action_spaces`` (dicts of
``Box``), ``state_space``, ``num_envs``, ``device``, ``unwrapped``, ``reset(seed=...)``, ``step(actions)`` and
``state()``. Spaces are built as ``DirectMARLEnv._configure_env_spaces`` builds them from a ``DirectMARLEnvCfg``:
an int ``n`` is ``Box(-inf, inf, (n,))``, and ``state_space = -1`` is the agents' observation spaces flattened into one
(``state()`` then returns the observations concatenated in ``possible_agents`` order), as ``DirectMARLEnv.state`` does.

Dynamics: each agent has a point ``x`` in its observation space that drifts with noise; the first
``min(obs, act)`` coordinates move by ``0.1 * clamp(action, -1, 1)``. An agent's reward is ``-mean(x[:k] ** 2)`` minus
a small action penalty (so a policy can learn to steer toward 0). An env terminates when any coordinate leaves
``[-4, 4]`` and is truncated after ``episode_length`` steps (Isaac Lab's ``episode_length_buf >= max_episode_length -
1``); ended envs are reset in place and the step returns their new first observation, as Isaac Lab does.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch

TASKS: dict[str, dict[str, Any]] = {
    # isaac-sim/IsaacLab source/isaaclab_tasks/isaaclab_tasks/direct/shadow_hand_over/shadow_hand_over_env_cfg.py,
    # ShadowHandOverEnvCfg: possible_agents, action_spaces (20 each), observation_spaces (157 each), state_space = 290;
    # Isaac Lab 3.0.0's isaaclab_tasks/core/handover/handover_env_cfg.py, HandoverEnvCfg, has the same agents and sizes
    "shadow_hand_over": {
        "possible_agents": ["right_hand", "left_hand"],
        "observation_sizes": {"right_hand": 157, "left_hand": 157},
        "action_sizes": {"right_hand": 20, "left_hand": 20},
        "state_size": 290,
    },
    # isaac-sim/IsaacLab .../direct/cart_double_pendulum/cart_double_pendulum_env_cfg.py, CartDoublePendulumEnvCfg:
    # action_spaces {cart: 1, pendulum: 1}, observation_spaces {cart: 4, pendulum: 3}, state_space = -1 (4 + 3 = 7)
    "cart_double_pendulum": {
        "possible_agents": ["cart", "pendulum"],
        "observation_sizes": {"cart": 4, "pendulum": 3},
        "action_sizes": {"cart": 1, "pendulum": 1},
        "state_size": -1,
    },
    # Isaac Lab 3.0.0 isaaclab_tasks/core/pendulum/pendulum_marl_env_cfg.py, PendulumMARLEnvCfg (Isaac-Pendulum-MARL-Direct):
    # action_spaces {cart: 1, pendulum: 1}, observation_spaces {cart: 4, pendulum: 3}, state_space = -1 (4 + 3 = 7)
    "pendulum_marl": {
        "possible_agents": ["cart", "pendulum"],
        "observation_sizes": {"cart": 4, "pendulum": 3},
        "action_sizes": {"cart": 1, "pendulum": 1},
        "state_size": -1,
    },
    # isaac-sim/IsaacLab .../direct/mobile_franka/mobile_franka_marl_cfg.py, MobileFrankaMARLCfg:
    # action_spaces {franka: 7, base: 3}, observation_spaces {franka: 40, base: 40}, state_space = -1 (40 + 40 = 80)
    "mobile_franka": {
        "possible_agents": ["franka", "base"],
        "observation_sizes": {"franka": 40, "base": 40},
        "action_sizes": {"franka": 7, "base": 3},
        "state_size": -1,
    },
}


def _box(size: int) -> gymnasium.spaces.Box:
    return gymnasium.spaces.Box(low=-np.inf, high=np.inf, shape=(size,))  # spec_to_gym_space(int)


class DirectMARLEnvStandIn:
    def __init__(
        self,
        possible_agents: list[str],
        observation_sizes: dict[str, int],
        action_sizes: dict[str, int],
        state_size: int = -1,
        *,
        num_envs: int = 4,
        episode_length: int = 10,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """A ``DirectMARLEnv`` look-alike (see the module docstring).

        :param possible_agents: Agent names, in Isaac Lab's order.
        :param observation_sizes: Observation size per agent (``DirectMARLEnvCfg.observation_spaces``).
        :param action_sizes: Action size per agent (``DirectMARLEnvCfg.action_spaces``).
        :param state_size: ``DirectMARLEnvCfg.state_space``: ``-1`` for the observations concatenated, ``0`` for no
            state, else the size of a state that is the concatenated observations cut or zero-padded to that size.
        :param num_envs: Envs stepped as one batch.
        :param episode_length: Steps before an episode is truncated.
        :param device: Device of every tensor.
        :param seed: Seed of the env's own generator (``reset(seed=...)`` reseeds it).
        """
        self.possible_agents = list(possible_agents)
        self.agents = list(possible_agents)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.episode_length = episode_length
        self.observation_spaces = {uid: _box(observation_sizes[uid]) for uid in self.possible_agents}
        self.action_spaces = {uid: _box(action_sizes[uid]) for uid in self.possible_agents}
        self._state_size = state_size
        if not state_size:
            self.state_space = None
        elif state_size < 0:
            self.state_space = gymnasium.spaces.flatten_space(
                gymnasium.spaces.Tuple([self.observation_spaces[uid] for uid in self.possible_agents])
            )
        else:
            self.state_space = _box(state_size)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._x = {
            uid: torch.zeros(num_envs, observation_sizes[uid], device=self.device) for uid in self.possible_agents
        }
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.extras: dict[str, Any] = {}
        self.episodes_ended = 0
        """Episodes ended (terminated or truncated) so far, over all envs."""

    @property
    def unwrapped(self) -> DirectMARLEnvStandIn:
        return self

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def _sample(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.rand(shape, generator=self._generator, device=self.device) * 2 - 1

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        for x in self._x.values():
            x[env_ids] = self._sample((len(env_ids), x.shape[-1]))
        self.episode_length_buf[env_ids] = 0

    def _observations(self) -> dict[str, torch.Tensor]:
        return {uid: x.clone() for uid, x in self._x.items()}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._generator.manual_seed(int(seed) % 2**63)
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        return self._observations(), self.extras

    def step(self, actions: dict[str, torch.Tensor]):
        rewards = {}
        for uid, x in self._x.items():
            action = actions[uid].to(self.device).clamp(-1.0, 1.0)
            k = min(x.shape[-1], action.shape[-1])
            x.add_(0.02 * self._sample(x.shape))
            x[:, :k] += 0.1 * action[:, :k]
            rewards[uid] = -(x[:, :k] ** 2).mean(-1) - 0.01 * (action**2).mean(-1)
        self.episode_length_buf += 1
        out_of_bounds = torch.stack([(x.abs() > 4.0).any(-1) for x in self._x.values()]).any(0)
        time_out = self.episode_length_buf >= self.episode_length - 1
        terminated = {uid: out_of_bounds.clone() for uid in self.possible_agents}
        truncated = {uid: time_out.clone() for uid in self.possible_agents}
        self.extras = {"log": {"mean_reward": torch.stack(list(rewards.values())).mean()}}
        reset_ids = (out_of_bounds | time_out).nonzero(as_tuple=False).squeeze(-1)
        if len(reset_ids):
            self.episodes_ended += len(reset_ids)
            self._reset_idx(reset_ids)
        return self._observations(), rewards, terminated, truncated, self.extras

    def state(self) -> torch.Tensor | None:
        if self.state_space is None:
            return None
        state = torch.cat([self._x[uid] for uid in self.possible_agents], dim=-1)
        if self._state_size > 0:  # a task-specific state of its own size: cut or zero-pad the observations
            state = torch.nn.functional.pad(state, (0, max(0, self._state_size - state.shape[-1])))
            state = state[:, : self._state_size]
        return state

    def close(self) -> None:
        pass
