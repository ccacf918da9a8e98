"""HASAC: heterogeneous-agent soft actor-critic, the policies updated one after another (Liu et al., "Maximum Entropy
Heterogeneous-Agent Reinforcement Learning", ICLR 2024, https://arxiv.org/abs/2306.10715; HARL,
https://github.com/PKU-MARL/HARL, ``harl/runners/off_policy_ha_runner.py``).

Everything but the policies' step is MASAC's (:mod:`~skrl_marl_ext.algorithms.masac`): the replay, the soft critics and
their targets, the temperatures. At each gradient step HASAC draws every agent's action from the current policies,
draws an order of the agents, and updates them one after another::

    a_j ~ pi_j(. | o_j) for every agent (no gradient)
    for agent i_m in the order:
        a_{i_m} ~ pi_{i_m}(. | o_{i_m})                      # reparameterised, with its policy's gradient
        actor loss = mean (alpha_{i_m} log pi_{i_m}(a_{i_m} | o) - min_k Q_k(s, a))   # a: the agents before i_m
                                                             # with their new actions, the others' current ones
        policy step of i_m, then its temperature's step
        a_{i_m} ~ the updated pi_{i_m} (no gradient)        # what the agents after it see

Agents with models of their own that run as one stacked batch still step one at a time (their slice of the batch;
the others' parameters, moments and step counts stay as they are); agents that share one policy move together, at
their place in the order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import Model

from skrl_marl_ext import distributed
from skrl_marl_ext.algorithms.happo import update_order
from skrl_marl_ext.algorithms.hasac_cfg import HASAC_CFG
from skrl_marl_ext.algorithms.masac import MASAC, SACGroup
from skrl_marl_ext.algorithms.off_policy import OffPolicyProgress


@dataclasses.dataclass
class HASACProgress(OffPolicyProgress):
    """HASAC's checkpoint module ``progress``: the steps completed, the gradient steps taken, and the seed the update
    orders are drawn from (a resumed run draws the orders the uninterrupted one would)."""

    order_seed: int = 0
    """Seed of the update orders, taken from rank 0 at construction: gradient step ``k``'s order is a function of
    ``(order_seed, k)``."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the saved counts; a file without an order seed keeps this agent's."""
        seed = self.order_seed
        super().load_state_dict(state)
        if "order_seed" not in state:
            self.order_seed = seed


class HASAC(MASAC):
    """Heterogeneous-Agent Soft Actor-Critic: MASAC whose policies are updated one after another at each gradient
    step, each agent's soft objective taken with the new actions of the agents updated before it (see the module
    docstring). The constructor and models are :class:`~skrl_marl_ext.MASAC`'s, the config :class:`HASAC_CFG`
    (``update_order``). The update and what differs from HARL are on the HASAC docs page (``docs/hasac.md``)."""

    cfg_class = HASAC_CFG
    progress_class = HASACProgress

    def __init__(
        self,
        *,
        possible_agents: list[str],
        models: dict[str, dict[str, Model]],
        memories: dict[str, Memory] | None = None,
        observation_spaces: dict[str, gymnasium.Space] | None = None,
        state_spaces: dict[str, gymnasium.Space] | None = None,
        action_spaces: dict[str, gymnasium.Space] | None = None,
        device: str | torch.device | None = None,
        cfg: Any = None,
    ) -> None:
        """MASAC's construction; then the seed of the update orders (rank 0's, without drawing from torch's RNG)."""
        super().__init__(
            possible_agents=possible_agents,
            models=models,
            memories=memories,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces,
            action_spaces=action_spaces,
            device=device,
            cfg=cfg,
        )
        self.cfg: HASAC_CFG
        self.progress.order_seed = distributed.broadcast_int(torch.initial_seed() % 2**63, device=self.device)

    def update_units(self) -> list[tuple[SACGroup, slice]]:
        """The policies that step one after another, in the order of the next gradient step (the one under way
        inside it): ``(group, agents)``, one agent of a stacked group, or a whole group (one agent, or agents that
        share a policy). ``"random"``: drawn from ``(order_seed, gradient steps taken)``; ``"fixed"``:
        ``possible_agents`` order."""
        units = [
            (group, slice(i, i + 1)) if group.batched else (group, slice(None))
            for group in self.groups
            for i in range(group.size if group.batched else 1)
        ]
        if self.cfg.update_order == "fixed":
            return sorted(units, key=lambda unit: self.possible_agents.index(unit[0].uids[unit[1]][0]))
        order = update_order(seed=self.progress.order_seed, update=self.progress.gradient_steps, size=len(units))
        return [units[k] for k in order]

    def _actor_phase(self, batch: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The policies step one after another (see the module docstring), each with its temperature.

        :return: Each agent's ``log pi(a | o)`` of the sample its step was taken on ``(B, 1)`` (for the critics'
            temperature), and the per-agent statistics."""
        inputs = {group.index: self._policy_inputs(group, batch, next_=False) for group in self.groups}
        current = {}
        with torch.no_grad(), self._autocast():
            for group in self.groups:
                actions, _ = self._sample_actions(group, inputs[group.index])
                current.update({uid: actions[i] for i, uid in enumerate(group.uids)})
        log_probs, stats = {}, {}
        for group, agents in self.update_units():
            uids = group.uids[agents]
            unit_inputs = {k: v[agents] if torch.is_tensor(v) else v for k, v in inputs[group.index].items()}
            with self._autocast():
                own, log_prob = self._sample_actions(group, unit_inputs, agents=agents)
            stats.update(self._policy_step(group, batch, self._joint(current), own, log_prob, agents))
            with torch.no_grad(), self._autocast():  # the agents after it see its updated policy's action
                new, _ = self._sample_actions(group, unit_inputs, agents=agents)
            for i, uid in enumerate(uids):
                log_probs[uid], current[uid] = log_prob[i].detach(), new[i]
        return log_probs, stats


__all__ = ["HASAC", "HASACProgress"]
