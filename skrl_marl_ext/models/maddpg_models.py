"""Models for MADDPG: a deterministic (tanh-squashed) policy, a centralised Q critic, and the joint action space.

Discrete-action MADDPG policies are categorical policies whose logits are read from ``outputs["net_output"]``
(:class:`~skrl_marl_ext.models.CategoricalMLP` or any skrl ``CategoricalMixin`` model); with action masks they must be
:class:`~skrl_marl_ext.models.MaskedCategoricalMixin` models (``CategoricalMLP`` is one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import gymnasium
import numpy as np
import torch
from skrl.models.torch import DeterministicMixin, Model
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext.keys import PRE_TANH_ACTIONS_KEY
from skrl_marl_ext.models.mlp import _input_size, box_bounds, mlp


def action_encoding_size(space: gymnasium.Space) -> int:
    """Width of one agent's action as a critic reads it: ``n`` (one-hot) for ``Discrete(n)``, the flat size for Box.

    :raises ValueError: For other spaces (MADDPG supports Box and Discrete actions).
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gymnasium.spaces.Box):
        return int(np.prod(space.shape))
    raise ValueError(f"MADDPG supports Box and Discrete action spaces, got {space}")


def joint_action_space(
    action_spaces: dict[str, gymnasium.Space], possible_agents: Sequence[str] | None = None
) -> gymnasium.spaces.Box:
    """The space of every agent's action concatenated, as MADDPG's critics receive it in ``inputs["taken_actions"]``.

    Size a critic with it: ``QMLP(state_space=env.state_space(uid), action_space=joint_action_space(env.action_spaces,
    env.possible_agents))``. Agents come in ``possible_agents`` order; a ``Discrete(n)`` action is one-hot (``n``
    entries in ``[0, 1]``), a Box action its flattened values within its bounds.

    :param action_spaces: ``{agent: space}`` (``env.action_spaces``).
    :param possible_agents: Agent order; the dict's order when None.
    :return: ``Box(low, high, (sum of the agents' encoding sizes,), float32)``.
    """
    agents = list(possible_agents) if possible_agents is not None else list(action_spaces)
    lows, highs = [], []
    for uid in agents:
        space = action_spaces[uid]
        size = action_encoding_size(space)
        if isinstance(space, gymnasium.spaces.Discrete):
            lows.append(np.zeros(size, dtype=np.float32))
            highs.append(np.ones(size, dtype=np.float32))
        else:
            lows.append(np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float32))
            highs.append(np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float32))
    return gymnasium.spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)


class DeterministicMLP(DeterministicMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.spaces.Box,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(64, 64),
        activation: str = "relu",
        input: Literal["observations", "states"] = "observations",
        action_bound: float | None = None,
    ) -> None:
        """Deterministic policy ``mu(o)``: an MLP whose ``tanh`` output is mapped onto the bounds of a Box action space.

        Without finite bounds the raw MLP output is used, unless ``action_bound`` gives bounds. With bounds, the
        outputs hold the output before the ``tanh`` under ``"pre_tanh_actions"``
        (:data:`~skrl_marl_ext.keys.PRE_TANH_ACTIONS_KEY`).

        :param input: Which input the network reads.
        :param action_bound: For a Box without finite bounds: ``tanh`` onto ``[-action_bound, action_bound]`` (Isaac
            Lab's envs declare their actions unbounded and scale them themselves). Refused for a bounded Box.

        :raises ValueError: If ``action_bound`` is not positive, or the Box has finite bounds of its own.
        """
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        self.input = input
        self.net = mlp(_input_size(self, input), self.num_actions, hidden_sizes, activation)
        low, high = box_bounds("DeterministicMLP", action_space, action_bound)
        self.bounded = bool(np.isfinite(low).all() and np.isfinite(high).all())
        if self.bounded:
            self.register_buffer("_center", torch.tensor((high + low) / 2).reshape(-1), persistent=False)
            self.register_buffer("_half_range", torch.tensor((high - low) / 2).reshape(-1), persistent=False)

    def compute(self, inputs, role=""):
        out = self.net(inputs[self.input])
        if self.bounded:  # the pre-tanh output for MADDPG's cfg.policy_regularization
            return self._center + self._half_range * torch.tanh(out), {PRE_TANH_ACTIONS_KEY: out}
        return out, {}


class QMLP(DeterministicMixin, Model):
    def __init__(
        self,
        *,
        state_space: gymnasium.Space,
        action_space: gymnasium.Space,
        observation_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(64, 64),
        activation: str = "relu",
    ) -> None:
        """Centralised critic ``Q(s, a_1, ..., a_n)``: an MLP on ``cat(inputs["states"], inputs["taken_actions"])``.

        :param state_space: The critic's state space: ``env.state_space(uid)``, or the concatenated observation
            spaces when the env has no global state.
        :param action_space: The joint action space, :func:`joint_action_space`.
        """
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        size = compute_space_size(state_space, occupied_size=True) + compute_space_size(
            action_space, occupied_size=True
        )
        self.net = mlp(size, 1, hidden_sizes, activation)

    def compute(self, inputs, role=""):
        return self.net(torch.cat([inputs["states"], inputs["taken_actions"]], dim=-1)), {}
