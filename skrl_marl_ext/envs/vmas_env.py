"""VMAS scenarios as skrl multi-agent envs, vectorized the Isaac Lab way.

VMAS (https://github.com/proroklab/VectorizedMultiAgentSimulator) simulates ``num_envs`` copies of a scenario as
torch tensors on CPU or CUDA. :class:`VmasWrapper` exposes one as skrl's ``MultiAgentEnvWrapper``: observations
``{agent: (num_envs, obs_size)}``, rewards, ``terminated`` and ``truncated`` ``{agent: (num_envs, 1)}``, gymnasium
spaces (VMAS builds legacy ``gym`` spaces; they are converted), a global state, and finished envs reset in place
(the observations returned by ``step`` are those of the new episodes where an env was reset).

Resets. VMAS scenarios reset either all envs (``env_index=None``, one batched call) or one env index
(``reset_world_at(i)``, which draws ``(1, ...)`` tensors); there is no masked reset. The wrapper resets with one
batched call when every env is finished at once (the usual case under ``max_steps``, since all envs start together),
and otherwise calls the scenario once per finished index, then reads observations once for the whole batch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium
import numpy as np
import torch
from skrl.utils.spaces.torch import compute_space_size, flatten_tensorized_space, tensorize_space

from skrl_marl_ext.checks.configs import did_you_mean
from skrl_marl_ext.envs.base import BatchedWrapper
from skrl_marl_ext.keys import FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY


def to_gymnasium_space(space: Any) -> gymnasium.Space:
    """Convert a legacy ``gym`` space (as VMAS builds them) to the same ``gymnasium`` space.

    :param space: A ``gym`` or ``gymnasium`` Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple.

    :raises TypeError: On another space type.
    """
    name = type(space).__name__
    if isinstance(space, gymnasium.Space):
        return space
    if name == "Box":
        return gymnasium.spaces.Box(low=space.low, high=space.high, shape=space.shape, dtype=space.dtype)
    if name == "Discrete":
        return gymnasium.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if name == "MultiDiscrete":
        return gymnasium.spaces.MultiDiscrete(np.asarray(space.nvec))
    if name == "MultiBinary":
        return gymnasium.spaces.MultiBinary(space.n)
    if name == "Dict":
        return gymnasium.spaces.Dict({key: to_gymnasium_space(value) for key, value in space.spaces.items()})
    if name == "Tuple":
        return gymnasium.spaces.Tuple([to_gymnasium_space(value) for value in space.spaces])
    raise TypeError(f"to_gymnasium_space: cannot convert space of type {type(space).__module__}.{name}")


class VmasWrapper(BatchedWrapper):
    def __init__(self, env: Any) -> None:
        """A VMAS ``Environment`` as a skrl multi-agent env (see the module docstring).

        The VMAS env must be made with ``dict_spaces=True`` and ``terminated_truncated=True`` (as
        :func:`make_vmas_env` does). Every agent gets the same ``terminated``/``truncated`` tensors (VMAS ends
        episodes for the whole env). The global state is the concatenation of the agents' flattened observations,
        in ``possible_agents`` order, shape ``(num_envs, sum of obs sizes)``.

        :param env: A ``vmas.simulator.environment.Environment``.

        :raises ValueError: If the VMAS env was not made with ``dict_spaces=True, terminated_truncated=True``.
        """
        if not getattr(env, "dict_spaces", False) or not getattr(env, "terminated_truncated", False):
            raise ValueError(
                "VmasWrapper: env must be made with vmas.make_env(..., dict_spaces=True, terminated_truncated=True); "
                "or use skrl_marl_ext.envs.make_vmas_env"
            )
        super().__init__(env)
        self._possible_agents = [agent.name for agent in env.agents]
        self._observation_spaces = {
            uid: to_gymnasium_space(env.observation_space.spaces[uid]) for uid in self._possible_agents
        }
        self._action_spaces = {uid: to_gymnasium_space(env.action_space.spaces[uid]) for uid in self._possible_agents}
        state_size = sum(compute_space_size(space, occupied_size=True) for space in self._observation_spaces.values())
        self._state_space = gymnasium.spaces.Box(-np.inf, np.inf, (state_size,), dtype=np.float32)
        self._observations: dict[str, torch.Tensor] | None = None
        self.reset_calls = {"batched": 0, "per_index": 0}
        """How many resets of each kind ran (for tests and for tuning)."""

    # ----------------------------------------------------------------- spaces

    @property
    def unwrapped(self) -> Any:
        """The VMAS ``Environment``."""
        return self._env

    @property
    def num_envs(self) -> int:
        return self._env.num_envs

    # ----------------------------------------------------------------- interaction

    def _flatten(self, observations: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {
            uid: flatten_tensorized_space(tensorize_space(self._observation_spaces[uid], observations[uid]))
            for uid in self._possible_agents
        }

    def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Reset every env (one batched VMAS reset).

        :return: ``({agent: (num_envs, obs_size)}, {})``.
        """
        self._observations = self._flatten(self._env.reset())
        self.reset_calls["batched"] += 1
        return self._observations, {}

    def _reset_finished(self, finished: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """Reset the envs where ``finished`` (num_envs,) is True; return the new observations, or None if none."""
        count = int(finished.sum())
        if count == 0:
            return None
        if count == self.num_envs:
            self.reset_calls["batched"] += 1
            return self._flatten(self._env.reset())
        # VMAS scenarios reset one index at a time (no masked reset); observations are read once afterwards
        for index in finished.nonzero().flatten().tolist():
            self._env.reset_at(index, return_observations=False)  # under VMAS's own seeded random state
        self.reset_calls["per_index"] += count
        observations = self._env.get_from_scenario(
            get_observations=True, get_rewards=False, get_infos=False, get_dones=False, dict_agent_names=True
        )[0]
        return self._flatten(observations)

    def step(self, actions: dict[str, torch.Tensor]):
        """Step every env; finished envs are reset and the new episodes' observations returned.

        :param actions: ``{agent: (num_envs, action_size)}``; ``(num_envs, 1)`` integer indices for Discrete spaces.

        :return: ``(observations, rewards, terminated, truncated, infos)``: observations ``{agent: (num_envs,
            obs_size)}``, the others ``{agent: (num_envs, 1)}``; ``infos`` holds VMAS's per-agent info tensors under
            ``"vmas"`` and, at a step where some env ended, the ended episodes' last observations and states under
            ``"final_observations"`` and ``"final_states"`` (:mod:`skrl_marl_ext.keys`; rows of envs that did not end
            hold their current observation).
        """
        vmas_actions = {}
        for uid in self._possible_agents:
            action = actions[uid]
            if isinstance(self._action_spaces[uid], gymnasium.spaces.Discrete):
                action = action.reshape(self.num_envs, 1).long()
            vmas_actions[uid] = action
        with torch.no_grad():
            observations, rewards, terminated, truncated, infos = self._env.step(vmas_actions)
        terminated = terminated.reshape(-1).bool()
        truncated = truncated.reshape(-1).bool() & ~terminated
        observations = self._flatten(observations)
        step_infos: dict[str, Any] = {"vmas": infos}
        reset = self._reset_finished(terminated | truncated)
        if reset is not None:
            # the ended episodes' last observations and states, before the reset replaces them
            step_infos[FINAL_OBSERVATIONS_KEY] = observations
            final_state = self._state(observations)
            step_infos[FINAL_STATES_KEY] = {uid: final_state for uid in self._possible_agents}
            finished = (terminated | truncated).view(-1, 1)
            observations = {uid: torch.where(finished, reset[uid], observations[uid]) for uid in self._possible_agents}
        self._observations = observations
        terminated, truncated = terminated.view(-1, 1), truncated.view(-1, 1)
        return (
            observations,
            {uid: rewards[uid].reshape(-1, 1).float() for uid in self._possible_agents},
            {uid: terminated for uid in self._possible_agents},
            {uid: truncated for uid in self._possible_agents},
            step_infos,
        )

    def _state(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([observations[uid] for uid in self._possible_agents], dim=-1)

    def state(self) -> dict[str, torch.Tensor]:
        """The global state: every agent's observation concatenated, ``{agent: (num_envs, state_size)}`` (one tensor)."""
        state = self._state(self._observations)
        return {uid: state for uid in self._possible_agents}

    def render(self, *args, **kwargs) -> Any:
        return self._env.render(*args, **kwargs)

    def close(self) -> None:
        pass


def make_vmas_env(
    scenario: str,
    *,
    num_envs: int = 32,
    device: str | torch.device = "cpu",
    continuous_actions: bool = True,
    max_steps: int = 100,
    seed: int | None = None,
    **scenario_kwargs,
) -> VmasWrapper:
    """Make a VMAS scenario and wrap it with :class:`VmasWrapper`.

    :param scenario: A VMAS scenario name (``"balance"``, ``"navigation"``, ...; see ``vmas.scenarios``).
    :param num_envs: Number of envs simulated as one batch.
    :param device: Device of the simulation and of every tensor.
    :param continuous_actions: Box actions; otherwise one Discrete action per agent.
    :param max_steps: Episode length; an episode is *truncated* at this many steps.
    :param seed: Seed of VMAS's random generators.
    :param scenario_kwargs: Arguments of the scenario (e.g. ``n_agents=4``).

    :raises ImportError: If vmas is not installed (the message says what to install).
    :raises ValueError: On an unknown scenario name (the message lists the valid ones), or a CUDA ``device`` when this
        torch build has no CUDA.
    """
    if importlib.util.find_spec("vmas") is None:
        raise ImportError("VMAS is not installed: pip install 'skrl-marl-ext[vmas]' (or pip install vmas)")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"make_vmas_env: device={device!r} but CUDA is not available in this torch build "
            f"({torch.__version__}); use device='cpu', or install a CUDA build of torch on a GPU machine"
        )
    import vmas

    names = sorted(set(vmas.scenarios) | set(getattr(vmas, "mpe_scenarios", [])) | set(vmas.debug_scenarios))
    if isinstance(scenario, str) and scenario not in names:
        raise ValueError(
            f"unknown VMAS scenario '{scenario}'.{did_you_mean(scenario, names)} Valid scenarios: {', '.join(names)}"
        )
    env = vmas.make_env(
        scenario,
        num_envs=num_envs,
        device=device,
        continuous_actions=continuous_actions,
        max_steps=max_steps,
        seed=seed,
        dict_spaces=True,
        terminated_truncated=True,
        clamp_actions=True,
        **scenario_kwargs,
    )
    return VmasWrapper(env)
