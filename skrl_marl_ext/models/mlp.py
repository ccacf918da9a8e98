"""Ready-made MLP models (skrl ``Model`` + mixin), for the examples, the command line, benchmarks and tests.

Any skrl model works with the agents; these save writing one for the common case::

    policy = GaussianMLP(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = ValueMLP(observation_space=..., state_space=env.state_space(uid), action_space=..., input="states")
"""

from __future__ import annotations

from typing import Literal

import gymnasium
import numpy as np
import torch
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.utils.spaces.torch import compute_space_size
from torch import nn

from skrl_marl_ext.models.masked_categorical import MaskedCategoricalMixin

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def mlp(input_size: int, output_size: int, hidden_sizes=(64, 64), activation: str = "tanh") -> nn.Sequential:
    """A plain MLP: ``Linear -> activation`` per hidden size, then a ``Linear`` output layer.

    :param input_size: Input features.
    :param output_size: Output features.
    :param hidden_sizes: Widths of the hidden layers.
    :param activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"mlp: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    layers, size = [], input_size
    for width in hidden_sizes:
        layers += [nn.Linear(size, width), _ACTIVATIONS[activation]()]
        size = width
    layers.append(nn.Linear(size, output_size))
    return nn.Sequential(*layers)


def box_bounds(owner: str, space: gymnasium.spaces.Box, action_bound: float | None) -> tuple[np.ndarray, np.ndarray]:
    """A Box's bounds as float32 arrays; with ``action_bound`` (for a Box without finite bounds, as Isaac Lab's tasks
    declare theirs) ``[-action_bound, action_bound]`` in every dimension.

    :raises ValueError: If ``action_bound`` is not above 0, or is given for a Box with finite bounds of its own.
    """
    low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    if action_bound is None:
        return low, high
    if np.isfinite(low).all() and np.isfinite(high).all():
        raise ValueError(
            f"{owner}: action_bound is for a Box without bounds; this one has [{low.min()}, {high.max()}]: "
            "leave action_bound out"
        )
    if not action_bound > 0:
        raise ValueError(f"{owner}: action_bound must be above 0, got {action_bound!r}")
    return np.full_like(low, -action_bound), np.full_like(high, action_bound)


def _input_size(model: Model, source: str) -> int:
    space = model.state_space if source == "states" else model.observation_space
    if space is None:
        raise ValueError(f"{type(model).__name__}: input='{source}' but no {source[:-1]}_space was given")
    return compute_space_size(space, occupied_size=True)


class GaussianMLP(GaussianMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(64, 64),
        activation: str = "tanh",
        initial_log_std: float = 0.0,
        input: Literal["observations", "states"] = "observations",
        clip_actions: bool = False,
    ) -> None:
        """Gaussian policy: an MLP gives the mean, a state-independent parameter the log standard deviation.

        :param input: Which input the network reads.
        """
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        GaussianMixin.__init__(self, clip_actions=clip_actions)
        self.input = input
        self.net = mlp(_input_size(self, input), self.num_actions, hidden_sizes, activation)
        self.log_std_parameter = nn.Parameter(torch.full((self.num_actions,), float(initial_log_std)))

    def compute(self, inputs, role=""):
        return self.net(inputs[self.input]), {"log_std": self.log_std_parameter}


class CategoricalMLP(MaskedCategoricalMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(64, 64),
        activation: str = "tanh",
        input: Literal["observations", "states"] = "observations",
    ) -> None:
        """Categorical policy over ``Discrete(n)`` actions that honours action masks (see MaskedCategoricalMixin)."""
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        MaskedCategoricalMixin.__init__(self)
        self.input = input
        self.net = mlp(_input_size(self, input), int(action_space.n), hidden_sizes, activation)

    def compute(self, inputs, role=""):
        return self.net(inputs[self.input]), {}


class ValueMLP(DeterministicMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space | None = None,
        action_space: gymnasium.Space | None = None,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(64, 64),
        activation: str = "tanh",
        input: Literal["observations", "states"] = "states",
    ) -> None:
        """Value model (one output). MAPPO's critic reads ``"states"``; for IPPO either key holds the observation."""
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        self.input = input
        self.net = mlp(_input_size(self, input), 1, hidden_sizes, activation)

    def compute(self, inputs, role=""):
        return self.net(inputs[self.input]), {}
