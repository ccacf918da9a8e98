"""A categorical policy mixin that never samples a masked (invalid) action."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from skrl.models.torch import CategoricalMixin
from skrl.utils.spaces.torch import unflatten_tensorized_space
from torch.distributions import Categorical

from skrl_marl_ext.keys import ACTION_MASK_KEY


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Give masked-out actions the lowest finite logit, so their probability is exactly 0.

    A finite fill (not ``-inf``) keeps the entropy and gradients finite: ``p * log p`` is ``0 * finite``.

    :param logits: Unnormalised log-probabilities, shape ``(batch, num_actions)``.
    :param mask: Boolean (or 0/1) mask of allowed actions, shape ``(batch, num_actions)``, or None.

    :return: Masked logits, same shape.
    """
    if mask is None:
        return logits
    return logits.masked_fill(~mask.bool(), torch.finfo(logits.dtype).min)


class MaskedCategoricalMixin(CategoricalMixin):
    def __init__(self, *, unnormalized_log_prob: bool = True, role: str = "") -> None:
        """Categorical mixin (skrl's ``CategoricalMixin``) that honours an action mask.

        The mask is read from ``inputs["action_mask"]``: a boolean tensor of shape ``(batch, num_actions)``,
        True where the action is allowed. skrl_marl_ext's agents fill that key themselves (from the
        ``"action_mask"`` part of a ``Dict`` observation space, or from ``infos["action_mask"][agent]``).
        Used on its own (with another agent), the mixin also finds the mask inside the observations when the
        observation space is a ``Dict`` with an ``"action_mask"`` entry, as PettingZoo's masked envs have.
        With no mask, it behaves exactly as ``CategoricalMixin``.

        Masked actions have probability exactly 0: they are never sampled, their log-probability is the
        lowest finite value, and the entropy is that of the distribution over the allowed actions.
        ``outputs["mean_actions"]`` holds the greedy (most probable allowed) action, shape ``(batch, 1)``.

        :param unnormalized_log_prob: Whether the network outputs logits (True) or probabilities (False).
        :param role: Role played by the model.
        """
        super().__init__(unnormalized_log_prob=unnormalized_log_prob, role=role)

    def _action_mask(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        mask = inputs.get(ACTION_MASK_KEY)
        if mask is None and isinstance(self.observation_space, gymnasium.spaces.Dict):
            if ACTION_MASK_KEY in self.observation_space.spaces and inputs.get("observations") is not None:
                mask = unflatten_tensorized_space(self.observation_space, inputs["observations"])[ACTION_MASK_KEY]
        return mask

    def act(self, inputs: dict[str, Any], *, role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        """Sample an allowed action (see the class docstring for the mask).

        :return: Actions of shape ``(batch, 1)`` and outputs with ``"log_prob"`` ``(batch, 1)``,
            ``"net_output"`` (the masked logits) and ``"mean_actions"`` (greedy actions, ``(batch, 1)``).
        """
        net_output, outputs = self.compute(inputs, role)
        mask = self._action_mask(inputs)
        if self._c_unnormalized_log_prob:
            logits = mask_logits(net_output, mask)
        else:
            probs = net_output if mask is None else net_output * mask.to(net_output.dtype)
            logits = torch.log(probs.clamp(min=torch.finfo(probs.dtype).tiny))
            logits = mask_logits(logits, mask)
        self._c_distribution = Categorical(logits=logits)

        actions = self._c_distribution.sample()
        taken = inputs.get("taken_actions", actions)
        log_prob = self._c_distribution.log_prob(taken.reshape(-1))

        outputs["log_prob"] = log_prob.unsqueeze(-1)
        outputs["net_output"] = logits
        outputs["mean_actions"] = logits.argmax(dim=-1, keepdim=True)
        return actions.unsqueeze(-1), outputs
