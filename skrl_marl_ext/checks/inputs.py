"""The per-step check of what ``act`` and ``record_transition`` are handed: every step the shapes and dtypes of the
first.

An env whose observations lose a column, whose rewards gain one, whose flags turn from bool to int or whose
``num_envs`` changes mid-run would otherwise stop deep inside torch (or, for a reward of two columns, be stored
wrongly without an error). :class:`InputCheck` refuses it with a ValueError naming the agent class, the input (e.g.
``next_observations['agent_1']``), the received and the expected shape or dtype, the timestep and the fix. The first
time an agent's input is seen its shape is checked against the agent's spaces; its shape and dtype then become what
every later step must give (dtypes are not checked against the spaces: an env giving float64 observations
consistently gets what it gets today).

Only host metadata is read (``shape``, ``dtype``), never tensor values: no device sync. Per input and step, the
``(shape, dtype)`` of every agent's tensor is compared at once with the last accepted step's; the agent-by-agent
diagnosis runs only when that comparison fails (a change, or the agents present changed).
"""

from __future__ import annotations

import math
import operator
from itertools import repeat
from typing import Any

import gymnasium
import torch
from skrl.utils.spaces.torch import compute_space_size

INPUTS = (
    ("observations", "observations"),
    ("states", "states"),
    ("actions", "actions"),
    ("next_observations", "observations"),
    ("next_states", "states"),
    ("rewards", "rewards"),
    ("terminated", "terminated"),
    ("truncated", "truncated"),
)
"""``(argument, kind)`` of the inputs checked: an argument and its ``next_`` twin share one expectation per agent."""

SPACES = {"observations": "observation_spaces", "states": "state_spaces", "actions": "action_spaces"}
"""The agent's spaces that size each kind of input (rewards and flags: one value per env)."""

_META = operator.attrgetter("shape", "dtype")


class InputCheck:
    def __init__(self, *, owner: str, spaces: dict[str, dict[str, gymnasium.Space | None]]) -> None:
        """The expected inputs of an agent's ``act`` and ``record_transition``.

        :param owner: The agent's class name, for the messages.
        :param spaces: ``{"observation_spaces": ..., "state_spaces": ..., "action_spaces": ...}``, each
            ``{agent: space or None}`` (an agent without a state space does not read states: they are not checked).
        """
        self.owner = owner
        self.sizes: dict[str, dict[str, int]] = {}
        """``{kind: {agent: values per env}}`` from the spaces."""
        self.spaces = spaces
        for kind, argument in SPACES.items():
            per_agent = spaces.get(argument) or {}
            self.sizes[kind] = {
                uid: compute_space_size(space, occupied_size=True)
                for uid, space in per_agent.items()
                if space is not None
            }
        for kind in ("rewards", "terminated", "truncated"):
            self.sizes[kind] = dict.fromkeys(self.sizes["observations"], 1)
        self.training: bool | None = None
        self.reset()

    @classmethod
    def of(cls, agent: Any) -> InputCheck:
        """The check of a multi-agent's inputs, from its class name and its (skrl) spaces."""
        names = ("observation_spaces", "state_spaces", "action_spaces")
        return cls(owner=type(agent).__name__, spaces={name: getattr(agent, name) for name in names})

    def reset(self) -> None:
        """Forget what was seen (the next step is a first step again)."""
        self.num_envs: tuple[int, str] | None = None
        """``(num_envs, where it was first seen)``."""
        self.expected: dict[tuple[str, str], tuple[torch.Size, torch.dtype, str, int]] = {}
        """``{(kind, agent): (shape, dtype, argument, timestep)}`` of the first time each was seen."""
        self.accepted: dict[str, tuple | None] = {}
        """``{argument: (agents, [(shape, dtype), ...] or one (shape, dtype))}`` of the last step that passed."""
        self.last: dict[str, tuple] = {}
        """``{kind: (agents, tensors)}`` that passed last (held, so that no other tensor can take their ids)."""

    def check(self, inputs: dict[str, Any], *, timestep: int, training: bool) -> None:
        """Check the ``{agent: tensor}`` dicts of ``inputs`` (``act``'s or ``record_transition``'s arguments by name;
        others are ignored). Evaluation and training each start from a first step (an agent may be evaluated on
        another env than the one it trained on).

        :raises ValueError: When a tensor's shape or dtype is not the one its first step gave, or a first step's
            shape does not fit the agent's spaces.
        """
        if training != self.training:
            self.training = training
            self.reset()
        for argument, kind in INPUTS:
            tensors = inputs.get(argument)
            if not isinstance(tensors, dict) or not tensors:
                continue
            agents, values = tuple(tensors), tuple(tensors.values())
            last = self.last.get(kind)
            if last is not None and last[0] == agents and all(map(operator.is_, last[1], values)):
                continue  # the very tensors accepted last (observations acted on are the last next_observations)
            first = values[0]
            try:
                if all(map(operator.is_, values, repeat(first))):  # one tensor for all (a shared state), or all None
                    signature = (agents, None if first is None else _META(first))
                else:
                    signature = (agents, list(map(_META, values)))
            except AttributeError:  # None for some agent (absent), or not a tensor: agent by agent
                signature = None
            if signature is None or signature != self.accepted.get(argument):
                self._diagnose(argument, kind, tensors, timestep)
                self.accepted[argument] = signature
            self.last[kind] = (agents, values)

    def _diagnose(self, argument: str, kind: str, tensors: dict[str, Any], timestep: int) -> None:
        sizes = self.sizes[kind]
        for uid, x in tensors.items():
            if x is None or uid not in sizes:
                continue  # an absent agent, no state; a key that is no agent's (or states an agent does not read)
            what = f"{argument}['{uid}']"
            expected = self.expected.get((kind, uid))
            if expected is None or not torch.is_tensor(x):
                self._first(argument, kind, uid, x, timestep)
                continue
            shape, dtype, first_argument, first_step = expected
            if x.shape == shape and x.dtype == dtype:
                continue
            first = f"{first_argument}['{uid}']"
            rows, first_rows = (x.shape[0] if x.dim() else 1), (shape[0] if shape else 1)
            if rows != first_rows:
                raise ValueError(
                    f"{self.owner}: {what} has {rows} rows (num_envs) at timestep {timestep}, shape "
                    f"{tuple(x.shape)}, where the first step gave {first_rows} ({first} of shape {tuple(shape)} at "
                    f"timestep {first_step}); {self._fix(kind, 'number of envs')}"
                )
            if x.shape != shape:
                raise ValueError(
                    f"{self.owner}: {what} has shape {tuple(x.shape)} at timestep {timestep}, expected "
                    f"{tuple(shape)}: {self._fix(kind, 'shapes')}; the first step gave {first} of shape "
                    f"{tuple(shape)} (timestep {first_step})"
                )
            raise ValueError(
                f"{self.owner}: {what} has dtype {x.dtype} at timestep {timestep}, expected {dtype}: "
                f"{self._fix(kind, 'dtypes')}; the first step gave {first} as {dtype} (timestep {first_step})"
            )

    @staticmethod
    def _fix(kind: str, what: str) -> str:
        if kind == "actions":
            return f"record_transition must get the actions act returned, of the same {what} every step"
        return f"the env must give every step the same {what}"

    def _first(self, argument: str, kind: str, uid: str, x: Any, timestep: int) -> None:
        """Check the first tensor seen of an agent's input against the agent's spaces and the step's num_envs."""
        what = f"{argument}['{uid}']"
        if not torch.is_tensor(x) or (x.dim() == 0 and kind in SPACES):  # a 0-d reward or flag: one env
            got = f"shape {tuple(x.shape)}" if torch.is_tensor(x) else f"a {type(x).__name__}"
            raise ValueError(
                f"{self.owner}: {what} is {got} at timestep {timestep}; expected a torch tensor of shape "
                f"(num_envs, ...) (skrl's env wrappers give them)"
            )
        size, width = self.sizes[kind][uid], math.prod(x.shape[1:])
        if width != size:
            if kind in SPACES:
                space = f"{SPACES[kind]}['{uid}'] ({self.spaces[SPACES[kind]][uid]})"
                fix = "pass the env's spaces (e.g. observation_spaces=env.observation_spaces) and give the inputs "
                fix += "they describe, flattened as skrl's env wrappers flatten them"
                if kind == "actions":
                    fix = "record_transition must get the actions act returned"
                raise ValueError(
                    f"{self.owner}: {what} has shape {tuple(x.shape)} at timestep {timestep} but {space} needs "
                    f"(num_envs, {size}); {fix}"
                )
            name = "reward" if kind == "rewards" else f"{kind} flag"
            raise ValueError(
                f"{self.owner}: {what} has shape {tuple(x.shape)} at timestep {timestep}, expected (num_envs, 1) or "
                f"(num_envs,): one {name} per env (skrl's env wrappers give (num_envs, 1))"
            )
        rows = x.shape[0] if x.dim() else 1
        if self.num_envs is None:
            self.num_envs = (rows, what)
        elif rows != self.num_envs[0]:
            raise ValueError(
                f"{self.owner}: {what} has {rows} rows (num_envs) at timestep {timestep}, shape "
                f"{tuple(x.shape)}, where {self.num_envs[1]} had {self.num_envs[0]}; every input must have one row per "
                "env, the same num_envs every step"
            )
        self.expected[(kind, uid)] = (x.shape, x.dtype, argument, timestep)
