"""Agent masks and action masks as the agents read them from the env: which agents are present at a step (absent
from the observations, or masked by ``infos["agent_mask"]``), and which actions a Discrete policy may take (from a
Dict observation space's ``"action_mask"`` entry, or ``infos["action_mask"]``), with the refusal of a policy that would
ignore them. :class:`ActionMasks` is the part of the package's agents that does it, entered where the algorithms
mark ``# masks``."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from skrl.utils.spaces.torch import unflatten_tensorized_space

from skrl_marl_ext.keys import ACTION_MASK_KEY
from skrl_marl_ext.models.masked_categorical import MaskedCategoricalMixin


def allowed_somewhere(mask: torch.Tensor) -> torch.Tensor:
    """The boolean ``mask`` ``(rows, n)`` with rows that allow no action made all True (e.g. an absent agent's zero
    observation): every row then has an allowed action to sample, take the argmax of, or relax."""
    mask = mask.bool()
    return mask | ~mask.any(dim=-1, keepdim=True)


def agent_mask(group: Any, observations: dict, agent_masks: Any, num_envs: int, device: Any) -> torch.Tensor:
    """``(G, num_envs, 1)`` bool: False for the group's agents absent from ``observations`` and where
    ``infos["agent_mask"]`` (``agent_masks``, :data:`~skrl_marl_ext.keys.AGENT_MASK_KEY`) says so, True elsewhere."""
    agent_masks = agent_masks if isinstance(agent_masks, dict) else {}
    if all(uid in observations and uid not in agent_masks for uid in group.uids):  # the usual case: one op
        return torch.ones(group.size, num_envs, 1, dtype=torch.bool, device=device)
    rows = []
    for uid in group.uids:
        if uid not in observations:
            rows.append(torch.zeros(num_envs, 1, dtype=torch.bool, device=device))
        elif uid in agent_masks:
            rows.append(agent_masks[uid].reshape(num_envs, 1).bool())
        else:
            rows.append(torch.ones(num_envs, 1, dtype=torch.bool, device=device))
    return torch.stack(rows)


class ActionMasks:
    """The action masks of an agent's Discrete groups (see the module docstring): from a Dict observation space's
    ``"action_mask"`` entry, or from the last recorded step's ``infos["action_mask"]``, kept here for the next ``act``
    (:attr:`from_infos`); a policy that would ignore them is refused."""

    def __init__(self, *, owner: str, action_spaces: dict[str, gymnasium.Space], device: Any) -> None:
        self.owner, self.action_spaces, self.device = owner, action_spaces, device
        self.from_infos: dict[str, torch.Tensor] | None = None
        """``infos["action_mask"]`` of the last recorded step: the masks of the observations the next ``act`` sees."""

    def note_observation_mask(self, group: Any) -> None:
        """Mark a Discrete group whose Dict observation space carries the action mask (its policy must honour it)."""
        group.mask_in_observations = (
            group.discrete
            and isinstance(group.observation_space, gymnasium.spaces.Dict)
            and ACTION_MASK_KEY in group.observation_space.spaces
        )
        if group.mask_in_observations:
            self.require_masked_policy(group, source='the "action_mask" entry of their Dict observation space')

    def require_masked_policy(self, group: Any, *, source: str) -> None:
        """Refuse a policy that would ignore the action masks the env gives."""
        policy = group.models["policy"]
        if not isinstance(policy, MaskedCategoricalMixin):
            raise ValueError(
                f"{self.owner}: agents {group.uids} receive action masks ({source}) but their policy "
                f"({type(policy).__name__}) ignores them and would take masked (invalid) actions; build the "
                "policy with skrl_marl_ext.models.MaskedCategoricalMixin instead of CategoricalMixin (e.g. "
                "skrl_marl_ext.models.CategoricalMLP)"
            )

    def keep(self, infos: dict, group_of: dict[str, Any]) -> None:
        """Keep ``infos["action_mask"]`` (copied: an env may reuse its buffers) for the next ``act``, refusing it for
        agents whose policy would ignore it (:data:`~skrl_marl_ext.keys.ACTION_MASK_KEY`)."""
        masks = infos.get(ACTION_MASK_KEY)
        if not isinstance(masks, dict):
            self.from_infos = None
            return
        kept = {}
        for uid, mask in masks.items():
            group = group_of.get(uid)
            if group is None or mask is None or not group.discrete:
                continue  # a mask of continuous actions means nothing here
            if not group.masks_seen:
                self.require_masked_policy(group, source='infos["action_mask"]')
                group.masks_seen = True
            mask = torch.as_tensor(mask, device=self.device)
            mask = mask.reshape(mask.shape[0], -1) if mask.dim() else mask.reshape(1, -1)
            if mask.shape[1] != group.num_actions:
                raise ValueError(
                    f"{self.owner}: infos['action_mask']['{uid}'] has shape {tuple(mask.shape)}; expected "
                    f"(num_envs, {group.num_actions}), bool, True where an action of {group.action_space} is allowed"
                )
            kept[uid] = mask.to(dtype=torch.bool, copy=True)
        self.from_infos = kept or None

    def of_observations(self, group: Any, raw_obs: torch.Tensor) -> torch.Tensor:
        """The ``"action_mask"`` part of raw flattened Dict observations ``(..., obs_size)``, bool ``(rows, n)``."""
        flat = raw_obs.reshape(-1, raw_obs.shape[-1])
        return allowed_somewhere(unflatten_tensorized_space(group.observation_space, flat)[ACTION_MASK_KEY])

    def of_infos(self, uid: str, num_envs: int, masks: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """Agent ``uid``'s mask in ``masks`` (an ``infos["action_mask"]``), or all True, bool ``(num_envs, n)``."""
        mask = masks.get(uid) if masks else None
        n = int(self.action_spaces[uid].n)
        if mask is None:
            return torch.ones(num_envs, n, dtype=torch.bool, device=self.device)
        return allowed_somewhere(mask.reshape(num_envs, n))

    def of_group(self, group: Any, raw_obs: torch.Tensor) -> torch.Tensor | None:
        """Action mask ``(G * n, num_actions)`` for the group's raw observations ``(G, n, obs_size)``: from the Dict
        observation space, or from the last recorded infos; None for continuous agents or when there is none."""
        if not group.discrete:
            return None
        if group.mask_in_observations:
            return self.of_observations(group, raw_obs)
        masks = self.from_infos
        if not masks or not any(uid in masks for uid in group.uids):
            return None
        n = raw_obs.shape[1]
        return torch.cat([self.of_infos(uid, n, masks) for uid in group.uids])


__all__ = ["ActionMasks", "agent_mask", "allowed_somewhere"]
