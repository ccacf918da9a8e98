"""N copies of a PettingZoo ``ParallelEnv`` stepped as one batch of ``(num_envs, ...)`` tensors.

skrl's own ``PettingZooWrapper`` wraps one env (``num_envs == 1``), which skrl's ``SequentialTrainer`` refuses for
multi-agents. :class:`BatchedParallelEnvWrapper` holds ``num_envs`` copies, steps them one after another (PettingZoo
envs are Python objects; there is nothing to vectorize), stacks the results and resets each copy when its episode
ends, so the observations returned by ``step`` are those of the new episode for a copy that was reset.

What the agents see:

- Observations ``{agent: (num_envs, obs_size)}`` float32 (flattened with skrl's space utilities). An agent absent
  from a copy (dead, not yet joined) gets zeros there. Box spaces of any number type are exposed as float32 Boxes with
  the same bounds (the models' dtype; MuJoCo envs declare float64, camera images uint8), and Box actions go back to
  the env clipped to its bounds, in its dtype (rounded to the nearest integer for an integer Box).
- ``infos["agent_mask"][agent]``: bool ``(num_envs, 1)``, True where the agent acted in the step (it was in the
  copy's ``agents`` before the step). :mod:`skrl_marl_ext`'s agents drop transitions where it is False.
- Action masks: an observation space ``Dict(observation=..., action_mask=...)`` (PettingZoo's convention) is exposed
  as the ``observation`` part only, and the mask goes to ``infos["action_mask"][agent]``, bool ``(num_envs, n)``,
  for the observations returned (a mask in the env's per-agent ``infos`` is taken the same way). Absent agents get
  all-True masks.
- Rewards ``(num_envs, 1)``: 0 where the agent is absent. ``terminated``/``truncated`` ``(num_envs, 1)``: an agent
  absent from a copy counts as terminated there, so a copy's episode has ended exactly where every agent is
  terminated or truncated.
- The global state is the env's ``state()``, shape ``(num_envs, state_size)`` float32. Its space is the env's
  ``state_space`` (e.g. mpe2) or, for an env with ``state()`` but no ``state_space`` (e.g. MaMuJoCo), a Box of the size
  of one ``state()`` after a reset of the first copy. An env whose ``state()`` is PettingZoo's unimplemented default
  has none (None), and only IPPO-style critics can be used.
- ``infos["final_observations"][agent]`` ``(num_envs, obs_size)`` and ``infos["final_states"][agent]``, at a step
  where some copy's episode ended: that copy's last observations and state, before the reset (other rows: the copies'
  current ones). The time-limit bootstrap of the agents uses them (see :mod:`skrl_marl_ext.keys`).

An env that breaks its contract (an observation, state or action mask of another shape than its space, a reward or
done flag that is not one value) gets a ``ValueError`` of one line naming the env, the agent, the copy, the input and
the shapes expected and received. The checks cost nothing while the env keeps its contract: the copying that numpy
does anyway fails, and only then is the culprit looked for (the state and the masks, stacked whole, are compared with
their sizes once per step).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import torch
from skrl.utils.spaces.torch import compute_space_size, flatten_tensorized_space, tensorize_space

from skrl_marl_ext.envs.base import BatchedWrapper
from skrl_marl_ext.keys import ACTION_MASK_KEY, AGENT_MASK_KEY, FINAL_OBSERVATIONS_KEY, FINAL_STATES_KEY


def _split_action_mask(space: gymnasium.Space) -> tuple[gymnasium.Space, bool]:
    """``(observation part, has_mask)`` of an observation space (``Dict(observation, action_mask)`` convention)."""
    if isinstance(space, gymnasium.spaces.Dict) and ACTION_MASK_KEY in space.spaces:
        rest = {key: value for key, value in space.spaces.items() if key != ACTION_MASK_KEY}
        if list(rest) == ["observation"]:
            return rest["observation"], True
        return gymnasium.spaces.Dict(rest), True
    return space, False


def _float32_space(space: gymnasium.Space) -> gymnasium.Space:
    """``space`` with every Box of numbers (floating-point, integer or bool; also inside a Dict or Tuple) as a float32
    Box with the same bounds; other spaces as they are."""
    if isinstance(space, gymnasium.spaces.Box) and space.dtype.kind in "fiub":
        if space.dtype == np.float32:
            return space
        with np.errstate(over="ignore"):  # bounds beyond float32's range become infinite
            low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        return gymnasium.spaces.Box(low, high, shape=space.shape, dtype=np.float32)
    if isinstance(space, gymnasium.spaces.Dict):
        return gymnasium.spaces.Dict({key: _float32_space(value) for key, value in space.spaces.items()})
    if isinstance(space, gymnasium.spaces.Tuple):
        return gymnasium.spaces.Tuple(tuple(_float32_space(value) for value in space.spaces))
    return space


def _state_space(env: Any, seed: int | None) -> gymnasium.Space | None:
    """The env's ``state_space`` as float32; else a Box the size of one ``state()`` after a reset; else None."""
    space = getattr(env, "state_space", None)
    if space is not None:
        return _float32_space(space)
    if not callable(getattr(env, "state", None)):
        return None
    env.reset(seed=seed)  # the wrapper's first reset seeds the copy again
    try:
        size = np.asarray(env.state()).size
    except NotImplementedError:  # PettingZoo's ParallelEnv.state() default
        return None
    return gymnasium.spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)


def _shape(value: Any) -> str:
    """The shape of ``value`` as an array (or its type when it is not one), for the contract errors."""
    try:
        return str(np.shape(value))
    except ValueError:  # a ragged sequence
        return f"a ragged {type(value).__name__}"


def _fits_one_value(value: Any) -> bool:
    """Whether ``value`` is one number (what PettingZoo's rewards and done flags are)."""
    try:
        return np.ndim(value) == 0 and isinstance(float(value), float)
    except (TypeError, ValueError):
        return False


class BatchedParallelEnvWrapper(BatchedWrapper):
    def __init__(
        self,
        env_fn: Callable[[], Any],
        num_envs: int,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        """``num_envs`` copies of a PettingZoo ``ParallelEnv`` as one skrl multi-agent env (see the module docstring).

        :param env_fn: Makes one ``ParallelEnv``; called ``num_envs`` times.
        :param num_envs: Number of copies.
        :param device: Device of the returned tensors.
        :param seed: Copy ``i`` is reset with seed ``seed + i`` at the first :meth:`reset` (None: unseeded).

        :raises ValueError: If ``num_envs < 1`` or ``env_fn`` does not make a ParallelEnv.
        """
        if num_envs < 1:
            raise ValueError(f"BatchedParallelEnvWrapper: num_envs must be >= 1, got {num_envs}")
        envs = [env_fn() for _ in range(num_envs)]
        if not hasattr(envs[0], "possible_agents") or not hasattr(envs[0], "step"):
            raise ValueError(
                "BatchedParallelEnvWrapper: env_fn must return a PettingZoo ParallelEnv (e.g. module.parallel_env); "
                f"got {type(envs[0]).__name__}"
            )
        super().__init__(envs[0])
        self._device = torch.device(device)
        self.envs = envs
        self._num_envs = num_envs
        self._seed = seed
        first = envs[0]
        metadata = getattr(first, "metadata", None)
        self._name = (metadata.get("name") if isinstance(metadata, dict) else None) or type(first).__name__
        self._possible_agents = list(first.possible_agents)
        raw_spaces = {uid: first.observation_space(uid) for uid in self._possible_agents}
        self._observation_spaces, self._has_mask = {}, {}
        for uid, space in raw_spaces.items():
            space, self._has_mask[uid] = _split_action_mask(space)
            self._observation_spaces[uid] = _float32_space(space)
        self._env_action_spaces = {uid: first.action_space(uid) for uid in self._possible_agents}
        self._action_spaces = {uid: _float32_space(space) for uid, space in self._env_action_spaces.items()}
        self._state_space = _state_space(first, seed)
        self._state_size = compute_space_size(self._state_space) if self._state_space is not None else 0
        self._sizes = {
            uid: compute_space_size(space, occupied_size=True) for uid, space in self._observation_spaces.items()
        }
        self._observations: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._masks: list[dict[str, Any]] = [{} for _ in range(num_envs)]

    # ----------------------------------------------------------------- spaces

    @property
    def num_envs(self) -> int:
        return self._num_envs

    # ----------------------------------------------------------------- helpers

    def _split(self, index: int, observations: dict[str, Any], infos: dict[str, Any]) -> None:
        """Store copy ``index``'s observations (mask split off) and action masks."""
        obs, masks = {}, {}
        for uid, value in observations.items():
            if self._has_mask[uid]:
                masks[uid] = value[ACTION_MASK_KEY]
                value = {key: v for key, v in value.items() if key != ACTION_MASK_KEY}
                value = value["observation"] if list(value) == ["observation"] else value
            elif isinstance(infos.get(uid), dict) and ACTION_MASK_KEY in infos[uid]:
                masks[uid] = infos[uid][ACTION_MASK_KEY]
            obs[uid] = value
        self._observations[index], self._masks[index] = obs, masks

    def _reset_copy(self, index: int, seed: int | None = None) -> None:
        observations, infos = self.envs[index].reset(seed=seed)
        self._split(index, observations, infos)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` as a tensor on the wrapper's device (sharing its memory on the CPU)."""
        tensor = torch.from_numpy(array)
        return tensor if self._device.type == "cpu" else tensor.to(self._device)

    def _contract_error(self, what: str, index: int, value: Any, *, expected: str, fix: str) -> ValueError:
        """The one-line error of an env that returned ``value`` for ``what`` in copy ``index``."""
        return ValueError(
            f"PettingZoo env {self._name}: {what} (copy {index}) has shape {_shape(value)}, expected {expected}; {fix}"
        )

    def _observation_error(self, uid: str, index: int, value: Any, reason: str = "") -> ValueError:
        space = self._observation_spaces[uid]
        if isinstance(space, gymnasium.spaces.Box):
            expected = str(space.shape)
        else:
            expected = f"what fits observation_space('{uid}') {space}"
        if reason:
            expected += f" ({' '.join(reason.split())})"
        return self._contract_error(
            f"observation of agent '{uid}'",
            index,
            value,
            expected=expected,
            fix=f"make its reset() and step() return observations of observation_space('{uid}'), or declare the "
            "space of the observations they return",
        )

    def _stack_observations(self, copies: list[dict[str, Any]] | None = None) -> dict[str, torch.Tensor]:
        """``{agent: (num_envs, obs_size)}`` of the copies' observations (``self._observations`` when None)."""
        copies = self._observations if copies is None else copies
        result = {}
        for uid in self._possible_agents:
            space, size = self._observation_spaces[uid], self._sizes[uid]
            rows = np.zeros((len(copies), size), dtype=np.float32)  # zeros: the agent is absent
            for index, obs in enumerate(copies):
                value = obs.get(uid)
                if value is None:
                    continue
                try:
                    if isinstance(space, gymnasium.spaces.Box):
                        row = np.asarray(value)
                    else:
                        row = flatten_tensorized_space(tensorize_space(space, value, device="cpu")).numpy()
                    fits = row.size == size  # else numpy would broadcast a single value into the row
                    if fits:
                        rows[index] = row.reshape(-1)
                except (ValueError, TypeError, RuntimeError, KeyError, AssertionError) as e:
                    raise self._observation_error(uid, index, value, reason=str(e)) from None
                if not fits:
                    raise self._observation_error(uid, index, value)
            result[uid] = self._tensor(rows)
        return result

    def _infos(self) -> dict[str, Any]:
        """``{"action_mask": {agent: (num_envs, n) bool}}`` for the current observations, if the env has masks."""
        if not any(self._masks):
            return {}
        masks = {}
        for uid in self._possible_agents:
            space = self._action_spaces[uid]
            if not isinstance(space, gymnasium.spaces.Discrete):
                continue
            full = np.ones(int(space.n), dtype=bool)
            rows = [np.asarray(m.get(uid, full), dtype=bool).reshape(-1) for m in self._masks]
            try:
                stacked = np.stack(rows)
            except ValueError:  # masks of different sizes
                stacked = None
            if stacked is None or stacked.shape[1] != space.n:
                index = next(i for i, row in enumerate(rows) if row.size != space.n)
                raise self._contract_error(
                    f"action mask of agent '{uid}'",
                    index,
                    self._masks[index][uid],
                    expected=f"({space.n},)",
                    fix=f"make its action masks hold one flag per action of action_space('{uid}') {space}",
                )
            masks[uid] = self._tensor(stacked)
        return {ACTION_MASK_KEY: masks}

    # ----------------------------------------------------------------- interaction

    def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Reset every copy. :return: ``(observations, infos)`` (``infos`` holds the action masks, if any)."""
        for index in range(self._num_envs):
            seed = None if self._seed is None else self._seed + index
            self._reset_copy(index, seed)
        self._seed = None  # seed only the first reset: later episodes continue each copy's random stream
        return self._stack_observations(), self._infos()

    def _numpy_action(self, uid: str, action: torch.Tensor) -> Any:
        space = self._env_action_spaces[uid]
        if isinstance(space, gymnasium.spaces.Discrete):
            return action.reshape(-1).long().cpu().numpy()
        if isinstance(space, gymnasium.spaces.Box):
            action = action.reshape(self._num_envs, *space.shape).cpu().numpy()
            if space.dtype.kind in "iub":  # an integer Box: the nearest integer within the bounds
                return np.rint(action).clip(space.low, space.high).astype(space.dtype)
            return action.astype(space.dtype, copy=False).clip(space.low, space.high)
        return action.reshape(self._num_envs, -1).cpu().numpy()

    def step(self, actions: dict[str, torch.Tensor]):
        """Step every copy; a copy whose agents are all done is reset (see the module docstring for the outputs).

        :param actions: ``{agent: (num_envs, action_size)}``; ``(num_envs, 1)`` integers for Discrete spaces.

        :return: ``(observations, rewards, terminated, truncated, infos)``.
        """
        n, agents = self._num_envs, self._possible_agents
        numpy_actions = {uid: self._numpy_action(uid, actions[uid]) for uid in agents}
        rewards = np.zeros((len(agents), n), dtype=np.float32)
        terminated = np.ones((len(agents), n), dtype=bool)  # absent agents count as terminated
        truncated = np.zeros((len(agents), n), dtype=bool)
        acted = np.zeros((len(agents), n), dtype=bool)
        finals: dict[int, tuple[dict[str, Any], np.ndarray | None]] = {}  # ended copies: last observations, state
        for index, env in enumerate(self.envs):
            live = list(env.agents)
            step_actions = {uid: numpy_actions[uid][index] for uid in live}
            observations, step_rewards, step_terminated, step_truncated, infos = env.step(step_actions)
            for a, uid in enumerate(agents):
                if uid in live:
                    acted[a, index] = True
                    try:
                        rewards[a, index] = step_rewards.get(uid, 0.0)
                        terminated[a, index] = bool(step_terminated.get(uid, False))
                        truncated[a, index] = bool(step_truncated.get(uid, False)) and not terminated[a, index]
                    except (ValueError, TypeError):
                        raise self._step_error(uid, index, step_rewards, step_terminated, step_truncated) from None
            self._split(index, observations, infos)
            if not env.agents:
                state = self._copy_state(env) if self._state_space is not None else None
                finals[index] = (self._observations[index], state)
                self._reset_copy(index)

        def per_agent(array: np.ndarray) -> dict[str, torch.Tensor]:
            rows = array.reshape(len(agents), n, 1)
            return {uid: self._tensor(rows[a]) for a, uid in enumerate(agents)}  # (num_envs, 1) views

        infos = self._infos()
        infos[AGENT_MASK_KEY] = per_agent(acted)
        if finals:
            infos.update(self._final_infos(finals))
        return self._stack_observations(), per_agent(rewards), per_agent(terminated), per_agent(truncated), infos

    def _step_error(self, uid: str, index: int, *outputs: dict[str, Any]) -> ValueError:
        """The error of a reward or done flag of ``uid`` in copy ``index`` that is not one value."""
        names = ("reward", "termination flag", "truncation flag")
        for name, values, default in zip(names, outputs, (0.0, False, False), strict=True):
            value = values.get(uid, default)
            if not _fits_one_value(value):
                plural = "rewards" if name == "reward" else name.replace(" flag", "s")
                return self._contract_error(
                    f"{name} of agent '{uid}'",
                    index,
                    value,
                    expected=f"one number (got {value!r:.60})",
                    fix=f"make its step() return one number per agent in its {plural}",
                )
        raise AssertionError("unreachable: a reward and done flags that numpy takes")  # pragma: no cover

    @staticmethod
    def _copy_state(env: Any) -> np.ndarray:
        return np.asarray(env.state(), dtype=np.float32)

    def _stack_states(self, rows: list[np.ndarray]) -> torch.Tensor:
        """``(num_envs, state_size)`` of the copies' states; an error naming the first copy of another size."""
        try:
            stacked = np.stack([row.reshape(-1) for row in rows])
        except ValueError:  # states of different sizes
            stacked = None
        if stacked is None or stacked.shape[1] != self._state_size:
            index = next(i for i, row in enumerate(rows) if row.size != self._state_size)
            declared = "state_space" if getattr(self.envs[0], "state_space", None) is not None else "its first state()"
            raise self._contract_error(
                "state()",
                index,
                rows[index],
                expected=f"{self._state_space.shape} ({declared})",
                fix=f"make its state() return values of one shape, that of {declared}",
            )
        return self._tensor(stacked)

    def _final_infos(self, finals: dict[int, tuple[dict[str, Any], np.ndarray | None]]) -> dict[str, Any]:
        """``final_observations`` / ``final_states`` of the copies that ended in this step (other rows: current)."""
        copies = [finals[i][0] if i in finals else obs for i, obs in enumerate(self._observations)]
        infos: dict[str, Any] = {FINAL_OBSERVATIONS_KEY: self._stack_observations(copies)}
        if self._state_space is not None:
            rows = [finals[i][1] if i in finals else self._copy_state(env) for i, env in enumerate(self.envs)]
            state = self._stack_states(rows)
            infos[FINAL_STATES_KEY] = {uid: state for uid in self._possible_agents}
        return infos

    def state(self) -> dict[str, torch.Tensor | None]:
        """The env's global state ``(num_envs, state_size)`` (one tensor for every agent), or None without one."""
        if self._state_space is None:
            return {uid: None for uid in self._possible_agents}
        state = self._stack_states([self._copy_state(env) for env in self.envs])
        return {uid: state for uid in self._possible_agents}

    def render(self, *args, **kwargs) -> Any:
        render = getattr(self.envs[0], "render", None)  # the first copy only
        return render() if render is not None else None

    def close(self) -> None:
        for env in self.envs:
            env.close()


_EXTRAS = {"mpe2": "'skrl-marl-ext[mpe]'", "gymnasium_robotics": "'skrl-marl-ext[mamujoco]'"}
"""What to install for a package that has an extra of this package (others: ``pip install <package>``)."""


def import_env_module(module: str) -> Any:
    """Import the PettingZoo env module ``module``, or reach it as an attribute of its package (a re-export such as
    ``gymnasium_robotics.mamujoco_v1``).

    :raises ImportError: Saying what to install when the package (or a module it imports) is missing, or which
        modules of the package are named like ``module`` when the package is installed but has no such module.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing, message = e.name or "", e.msg
    package = module.split(".")[0]
    if missing != module and not module.startswith(missing + "."):  # a module that it imports is missing
        hint = missing.split(".")[0] or _EXTRAS.get(package, package)
        raise ImportError(f"cannot import PettingZoo env module '{module}' ({message}); install it: pip install {hint}")
    if missing == package:
        hint = _EXTRAS.get(package, package)
        raise ImportError(
            f"cannot import PettingZoo env module '{module}': no package '{package}'; install it: pip install {hint}"
        )
    found: Any = importlib.import_module(missing.rpartition(".")[0])  # the deepest module of the path that exists
    for name in module[len(found.__name__) + 1 :].split("."):
        found = getattr(found, name, None)
    if found is not None:
        return found
    close = _close_modules(package, module)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise ImportError(f"package '{package}' is installed but has no module '{module}'{hint}")


def _close_modules(package: str, module: str, *, limit: int = 5000) -> list[str]:
    """Up to 3 modules of ``package`` whose last name part is like ``module``'s, found on disk (nothing imported)."""
    spec = importlib.util.find_spec(package)
    roots = (spec.submodule_search_locations or []) if spec is not None else []
    names: list[str] = []
    for root in roots:
        for directory, subdirectories, files in os.walk(root):
            subdirectories[:] = [d for d in subdirectories if d.isidentifier() and d != "__pycache__"]
            relative = os.path.relpath(directory, root)
            prefix = package if relative == "." else ".".join([package, *relative.split(os.sep)])
            stems = [f[:-3] for f in files if f.endswith(".py") and f[:-3].isidentifier() and f != "__init__.py"]
            names += [f"{prefix}.{stem}" for stem in stems + subdirectories]
            if len(names) > limit:  # a huge package: suggest from what was seen
                break
    leaf = module.rpartition(".")[2]
    # the last part decides (the leading parts are mostly shared), the whole path breaks ties
    likeness = {
        name: (
            difflib.SequenceMatcher(None, name.rpartition(".")[2], leaf).ratio(),
            difflib.SequenceMatcher(None, name, module).ratio(),
        )
        for name in names
    }
    ranked = sorted(names, key=likeness.__getitem__, reverse=True)[:3]
    return [name for name in ranked if likeness[name][0] >= 0.75]


def make_pettingzoo_env(
    module: str,
    *,
    num_envs: int = 8,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **env_kwargs,
) -> BatchedParallelEnvWrapper:
    """Batch ``num_envs`` copies of the PettingZoo env ``module.parallel_env(**env_kwargs)``.

    :param module: Importable module with a ``parallel_env`` function, e.g. ``"mpe2.simple_spread_v3"`` or
        ``"pettingzoo.butterfly.cooperative_pong_v6"`` (or a package's attribute that is one, e.g.
        ``"gymnasium_robotics.mamujoco_v1"``).
    :param num_envs: Number of copies.
    :param device: Device of the returned tensors.
    :param seed: Seed of the first reset (copy ``i`` gets ``seed + i``).
    :param env_kwargs: Arguments of ``parallel_env`` (e.g. ``N=3, max_cycles=25, continuous_actions=True``).

    :raises ImportError: If the module (or its package) is not installed, or the package has no such module; the
        message says what to install or which module names are close.
    :raises ValueError: If the module has no ``parallel_env``.
    """
    imported = import_env_module(module)
    if not hasattr(imported, "parallel_env"):
        raise ValueError(
            f"'{module}' has no parallel_env(); give a PettingZoo env module such as mpe2.simple_spread_v3"
        )
    return BatchedParallelEnvWrapper(
        lambda: imported.parallel_env(**env_kwargs), num_envs=num_envs, device=device, seed=seed
    )
