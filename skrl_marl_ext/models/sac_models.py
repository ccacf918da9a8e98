"""The squashed Gaussian policy of MASAC and HASAC: ``a = center + scale * tanh(u)``, ``u ~ N(mean(o), std(o))``.

skrl's ``GaussianMixin`` clips its samples to the action bounds and takes the log-density of the clipped sample, which
is not the density of the action taken; a soft actor-critic's entropy term needs the density of the squashed sample
(Haarnoja et al. 2018, appendix C). :class:`SquashedGaussianMixin` is a skrl mixin that gives it
(:func:`~skrl_marl_ext.functional.sac.squashed_gaussian_log_prob`). Discrete-action agents use a categorical policy
(:class:`~skrl_marl_ext.models.CategoricalMLP`).
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium
import numpy as np
import torch
from skrl.models.torch import Model
from torch import nn
from torch.distributions import Normal

from skrl_marl_ext.functional.sac import squashed_gaussian_log_prob
from skrl_marl_ext.keys import MEAN_ACTIONS_KEY
from skrl_marl_ext.models.mlp import _ACTIVATIONS, _input_size, box_bounds

LOG_STD_BOUNDS = (-20.0, 2.0)
"""Bounds of the log standard deviation (SAC's, HARL's and skrl's)."""


class SquashedGaussianMixin:
    def __init__(
        self,
        *,
        min_log_std: float = LOG_STD_BOUNDS[0],
        max_log_std: float = LOG_STD_BOUNDS[1],
        action_bound: float | None = None,
    ) -> None:
        """A skrl mixin for a tanh-squashed Gaussian policy over a bounded Box action space.

        The model's ``compute`` returns the mean of ``u`` and ``{"log_std": ...}`` (per row or one per dimension);
        ``act`` draws ``u`` by the reparameterisation trick and returns ``center + scale * tanh(u)``, with
        ``outputs["log_prob"]`` its log-density ``(rows, 1)`` and ``outputs["mean_actions"]`` the squashed mean (the
        deterministic action). It has no log-density of given actions: a soft actor-critic only needs its own samples'.

        :param action_bound: For a Box without finite bounds (Isaac Lab's tasks declare theirs so and clip or scale
            the actions themselves): squash onto ``[-action_bound, action_bound]``.
        :raises ValueError: For an action space that is not a Box with finite bounds (nor ``action_bound`` given), or
            ``action_bound`` with a Box that has bounds of its own.
        """
        space = self.action_space
        name = type(self).__name__
        if not isinstance(space, gymnasium.spaces.Box):
            raise ValueError(
                f"{name}: a squashed Gaussian policy needs a Box action space, got {space}; use a categorical policy "
                "(CategoricalMLP) for Discrete actions"
            )
        low, high = box_bounds(name, space, action_bound)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(
                f"{name}: a squashed Gaussian policy needs a Box action space with finite bounds, got {space}; give "
                "the policy action_bound (e.g. 1.0) to squash onto [-action_bound, action_bound]"
            )
        center, scale = (high + low).reshape(-1) / 2, (high - low).reshape(-1) / 2
        self._s_unit = bool((center == 0).all() and (scale == 1).all())  # [-1, 1]: tanh(u) as it is
        self.register_buffer("_s_center", torch.tensor(center, dtype=torch.float32), persistent=False)
        self.register_buffer("_s_scale", torch.tensor(scale, dtype=torch.float32), persistent=False)
        self._s_log_std_bounds = (float(min_log_std), float(max_log_std))
        self._s_distribution = None

    def act(self, inputs: dict[str, Any], *, role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        """A squashed sample of the policy, with its log-density and the deterministic action (see ``__init__``)."""
        mean, outputs = self.compute(inputs, role)
        log_std = outputs["log_std"].clamp(*self._s_log_std_bounds)
        outputs["log_std"] = log_std
        self._s_distribution = Normal(mean, log_std.exp())
        pre_tanh = self._s_distribution.rsample()
        scale = None if self._s_unit else self._s_scale
        outputs["log_prob"] = squashed_gaussian_log_prob(
            log_prob=self._s_distribution.log_prob(pre_tanh), pre_tanh=pre_tanh, scale=scale
        )
        actions, deterministic = torch.tanh(pre_tanh), torch.tanh(mean)
        if not self._s_unit:
            actions, deterministic = (
                self._s_center + self._s_scale * actions,
                self._s_center + self._s_scale * deterministic,
            )
        outputs[MEAN_ACTIONS_KEY] = deterministic
        return actions, outputs

    def get_entropy(self, *, role: str = "") -> torch.Tensor:
        """The entropy of ``u``'s Gaussian (before the squash), ``(rows, 1)``."""
        if self._s_distribution is None:
            return torch.tensor(0.0, device=self.device)
        return self._s_distribution.entropy().sum(dim=-1, keepdim=True)

    def distribution(self, *, role: str = "") -> Normal | None:
        """The Gaussian of ``u`` of the last call (before the squash)."""
        return self._s_distribution


class SquashedGaussianMLP(SquashedGaussianMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.spaces.Box,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        hidden_sizes=(256, 256),
        activation: str = "relu",
        final_activation: str | None = None,
        input: Literal["observations", "states"] = "observations",
        action_bound: float | None = None,
    ) -> None:
        """Squashed Gaussian policy: an MLP trunk, then a linear mean and a linear log standard deviation (state
        dependent, as SAC's).

        :param hidden_sizes: Widths of the trunk's layers.
        :param activation: Activation after each trunk layer but the last.
        :param final_activation: Activation after the last trunk layer; None: ``activation``. HARL's HASAC policy
            uses ``"tanh"`` (its ``final_activation_func``).
        :param input: Which input the network reads.
        :param action_bound: For a Box without finite bounds: squash onto ``[-action_bound, action_bound]``.
        """
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        SquashedGaussianMixin.__init__(self, action_bound=action_bound)
        self.input = input
        for name in (activation, final_activation):
            if name is not None and name not in _ACTIVATIONS:
                raise ValueError(f"SquashedGaussianMLP: activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
        layers, size = [], _input_size(self, input)
        for i, width in enumerate(hidden_sizes):
            last = i == len(hidden_sizes) - 1
            layers += [nn.Linear(size, width), _ACTIVATIONS[(final_activation or activation) if last else activation]()]
            size = width
        self.net = nn.Sequential(*layers)
        self.mean_layer = nn.Linear(size, self.num_actions)
        self.log_std_layer = nn.Linear(size, self.num_actions)

    def compute(self, inputs, role=""):
        features = self.net(inputs[self.input])
        return self.mean_layer(features), {"log_std": self.log_std_layer(features)}
