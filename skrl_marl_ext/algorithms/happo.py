"""HAPPO: heterogeneous-agent PPO, the agents updated one after another (Kuba et al., "Trust Region Policy
Optimisation in Multi-Agent Reinforcement Learning", ICLR 2022, https://arxiv.org/abs/2109.11251; HARL, Zhong et al.,
JMLR 2024, https://github.com/PKU-MARL/HARL).

Everything but the order of the update is MAPPO's (:mod:`~skrl_marl_ext.algorithms.mappo`): acting, the rollout, the
centralised critic, bootstrap and GAE, the statistics, the epochs of mini-batches and the critic's loss. At the end
of a rollout HAPPO draws an order of the agents and updates them one after another::

    M = 1                                            # per sample (step, env) of the rollout
    for agent i_m in the order:
        A = GAE advantages of i_m, standardised      # as MAPPO
        PPO epochs of i_m on   min(r A M, clip(r) A M) + value loss,   r = pi_new / pi_old of i_m
        M = M * pi_new / pi_old of i_m               # after its epochs, no gradient; 1 where i_m was masked

``pi_old`` is the behaviour policy's log-probability stored with the rollout (the denominator of the loss's own
ratio); HARL re-evaluates it just before the agent's update, which is the same number unless the input statistics
were refreshed by this rollout (then ours also carries that refresh, which the agent's clip already bounds).

A *team critic* (HARL's one critic for all agents) is one value model object given to every agent, each keeping a
policy of its own: the agents' updates then train their policies alone, and the critic is trained once, after all of
them, on every agent's samples with an optimiser of its own (``_update_team_critic``).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import gymnasium
import numpy as np
import torch
from skrl.memories.torch import Memory
from skrl.models.torch import Model
from skrl.resources.schedulers.torch import KLAdaptiveLR

from skrl_marl_ext import distributed
from skrl_marl_ext.algorithms.base import Progress
from skrl_marl_ext.algorithms.happo_cfg import HAPPO_CFG
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent, OnPolicyGroup
from skrl_marl_ext.features.recurrent import is_recurrent
from skrl_marl_ext.functional import masked_mean, value_loss
from skrl_marl_ext.groups.optim import make_adam
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.storage.rollout import TrainingData, mini_batch_indexes

TEAM_CRITIC_FIELDS = (
    "learning_epochs",
    "mini_batches",
    "mini_batch_order",
    "value_clip",
    "huber_delta",
    "value_loss_scale",
    "grad_norm_clip",
    "optimizer_eps",
    "value_preprocessor",
    "value_preprocessor_kwargs",
    "learning_rate_scheduler",
    "learning_rate_scheduler_kwargs",
)
"""Per-agent fields that configure a team critic's update: every agent must be given the same value."""


@dataclasses.dataclass
class HAPPOProgress(Progress):
    """HAPPO's checkpoint module ``progress``: the steps completed, and what the order of the next update is drawn
    from (so a resumed run draws the orders the uninterrupted one would)."""

    order_seed: int = 0
    """Seed of the update orders, taken from rank 0 at construction."""
    updates: int = 0
    """Updates done: update ``k``'s order is a function of ``(order_seed, k)``."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the saved counts; a file without an order seed keeps this agent's."""
        seed = self.order_seed
        super().load_state_dict(state)
        if "order_seed" not in state:
            self.order_seed = seed


def update_order(*, seed: int, update: int, size: int) -> list[int]:
    """The random order of update ``update``: a permutation of ``range(size)`` drawn by a ``torch.Generator`` seeded
    from ``(seed, update)`` (mixed by numpy's ``SeedSequence``, so nearby seeds give unrelated sequences of orders)."""
    mixed = int(np.random.SeedSequence([seed, update]).generate_state(1, np.uint64)[0])
    generator = torch.Generator().manual_seed(mixed)
    return torch.randperm(size, generator=generator).tolist()


class HAPPO(OnPolicyAgent):
    """Heterogeneous-Agent Proximal Policy Optimization: MAPPO whose agents are updated one after another, each
    one's clipped surrogate weighted by the ratios of the agents updated before it in the same update (see the module
    docstring). Suited to agents that differ (bodies, observation and action spaces, models of their own).

    The constructor and models are :class:`~skrl_marl_ext.MAPPO`'s (a centralised value model reading
    ``inputs["states"]``; ``state_spaces`` required), the config :class:`HAPPO_CFG` (``update_order``).

    Agents with models of their own are updated one by one (never stacked: ``cfg.batch_agent_models`` must be False).
    Agents that *share* one model cannot move one after another, since one step moves them all: such a group is
    updated as MAPPO updates it, all its agents together at its place in the order, with one ``M`` (the agents
    before it), and then all of its agents' ratios enter ``M`` for the agents after it. Construction says so in one
    warning. HARL instead steps a shared model once per agent, on that agent's data.

    A **team critic** (HARL's): give every agent the *same* value model object and each its own policy. Each agent's
    update then trains its policy alone, and the critic is trained once per update, after all the policies, on every
    agent's samples (their mean value loss), with an Adam of its own (the value learning rate, ``optimizer_eps``),
    ``learning_epochs`` x ``mini_batches`` steps, its gradient clipped on its own, and one value preprocessor whose
    statistics take in every agent's returns once. Checkpoints hold its optimiser as ``value_optimizer``.

    skrl's per-agent :meth:`update` (not called by the trainers) updates the agent's group as MAPPO would (``M = 1``;
    with a team critic, the policy only).

    :param possible_agents: Names of all the agents the env can have.
    :param models: ``{agent: {"policy": Model, "value": Model}}``.
    :param memories: Optional ``{agent: Memory}``, checked as MAPPO checks them (see :class:`~skrl_marl_ext.MAPPO`).
    :param observation_spaces: ``{agent: gymnasium.Space}``.
    :param state_spaces: ``{agent: gymnasium.Space}`` of the global state (required).
    :param action_spaces: ``{agent: gymnasium.Space}`` (Box, Discrete or MultiDiscrete).
    :param device: Device of the agent's data and computation.
    :param cfg: :class:`HAPPO_CFG` or a dict of its fields (``{}`` gives the defaults). Unknown keys are refused.
    """

    cfg_class = HAPPO_CFG
    requires_states = True
    progress_class = HAPPOProgress
    value_loss = staticmethod(value_loss)  # the team critic's loss (see OnPolicyAgent.ppo_loss)
    team_critic: Model | None = None
    """The team critic: the one value model every agent was given (None: each agent trains its own)."""
    _critic_optimizer: torch.optim.Optimizer | None = None
    """Team critic: its optimiser (with ``_critic_scheduler`` and ``_critic_value_preprocessor``)."""
    _critic_scheduler: Any = None
    _critic_value_preprocessor: Any = identity

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
        """MAPPO's construction; then the seed of the update orders (rank 0's, without drawing from torch's RNG)."""
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
        self.cfg: HAPPO_CFG
        self.progress.order_seed = distributed.broadcast_int(torch.initial_seed() % 2**63, device=self.device)
        shared = [group.uids for group in self.groups if group.size > 1]
        if shared:
            warnings.warn(
                f"HAPPO: agents {shared} share their models, so they cannot be updated one after another; each such "
                "group is updated together as MAPPO would, at its place in the order. Give each agent models of its "
                "own for HAPPO's sequential update",
                stacklevel=2,
            )

    def _batchable(self, uid: str, failures: dict) -> bool:
        """Never: a stacked batch steps its agents at once, HAPPO one after another."""
        return False

    # ------------------------------------------------------------------ team critic

    def _grouping_roles(self) -> tuple[str, ...]:
        """The policy alone where every agent was given one value model object and the policies differ (a team
        critic, kept in :attr:`team_critic`); both roles otherwise."""
        uids = self.possible_agents
        critic = self.models[uids[0]]["value"]
        if len({id(self.models[u]["policy"]) for u in uids}) == 1 or any(
            self.models[u]["value"] is not critic for u in uids
        ):
            return self.roles
        if any(self.models[u]["policy"] is critic for u in uids):
            raise ValueError(
                "HAPPO: the value model given to every agent is also a policy; a team critic must be a value model of "
                "its own (give each agent its own policy and all of them one value model)"
            )
        if is_recurrent(critic):
            raise ValueError(
                "HAPPO: a recurrent team critic (one value model for all agents) is not supported; give each agent a "
                "value model of its own, or use a feed-forward team critic"
            )
        for name in (*TEAM_CRITIC_FIELDS, "learning_rate"):
            values = {u: self.cfg.value_for(name, u) for u in uids}
            if name == "learning_rate":
                values = {u: v[1] if isinstance(v, (tuple, list)) else v for u, v in values.items()}
            if len({repr(v) for v in values.values()}) > 1:
                raise ValueError(
                    f"HAPPO: every agent shares one value model (a team critic), trained by one update, but "
                    f"cfg.{name} differs between agents ({values}); give them the same value"
                )
        self.team_critic = critic
        return ("policy",)

    def _set_up_group(self, group: OnPolicyGroup) -> None:
        """MAPPO's set-up; with a team critic, the group's optimiser leaves the critic out and every group shares the
        critic's optimiser and value preprocessor (made with the first group)."""
        group.trains_value = self.team_critic is None
        super()._set_up_group(group)
        if self.team_critic is None:
            return
        if self._critic_optimizer is None:  # team critic: its optimiser, scheduler and value preprocessor
            cfg = group.cfg
            eps = {} if cfg.optimizer_eps is None else {"eps": cfg.optimizer_eps}
            params = list({id(p): p for p in self.team_critic.parameters()}.values())
            self._critic_optimizer = make_adam([{"params": params, "lr": cfg.learning_rate[1]}], **eps)
            scheduler = cfg.learning_rate_scheduler
            self._critic_scheduler = None
            if scheduler and not (isinstance(scheduler, type) and issubclass(scheduler, KLAdaptiveLR)):
                self._critic_scheduler = scheduler(self._critic_optimizer, **cfg.learning_rate_scheduler_kwargs)
            self._critic_value_preprocessor = group.value_preprocessor
        group.value_preprocessor = self._critic_value_preprocessor
        modules = {
            "value_preprocessor": group.value_preprocessor,
            "value_optimizer": self._critic_optimizer,
            "value_scheduler": self._critic_scheduler,
        }
        self._register_checkpoint(group, modules)

    # ------------------------------------------------------------------ update

    def _update_order(self) -> list[OnPolicyGroup]:
        """This update's order of the groups: drawn from ``(order_seed, updates)`` (``"random"``) or fixed."""
        order = list(range(len(self.groups)))
        if self.cfg.update_order == "random":
            order = update_order(seed=self.progress.order_seed, update=self.progress.updates, size=len(order))
        self.progress.updates += 1
        return [self.groups[index] for index in order]

    def _next_advantage_weights(
        self, group: OnPolicyGroup, data: TrainingData | None, weights: torch.Tensor | None
    ) -> torch.Tensor | None:
        """``M`` of the next group: ``weights`` (``M`` of ``group``; None: 1) times the ratio of ``group``'s agents
        after its epochs (:meth:`_ratio_after_update`); as it was when the group had no rollout."""
        if data is None:
            return weights
        ratio = self._ratio_after_update(group, data)
        return ratio if weights is None else weights * ratio

    def _after_update(self, trained: list[tuple[OnPolicyGroup, TrainingData | None]]) -> None:
        """The team critic, trained once, after every policy (HARL)."""
        if self.team_critic is not None:
            self._update_team_critic(trained)

    def _update_team_critic(self, trained: list[tuple[OnPolicyGroup, TrainingData | None]]) -> None:
        """Train the team critic once, after every policy (HARL's ``critic.train``): its value statistics take in
        every agent's returns once, then ``learning_epochs`` x ``mini_batches`` steps, each on the mean value loss of
        every agent's samples at the mini-batch's (step, env) indexes (the groups' advantages were computed before,
        from the critic and statistics the rollout was collected with)."""
        parts = [(group, data) for group, data in trained if data is not None]
        if not parts:
            return
        first, cfg = parts[0][0], parts[0][0].cfg
        optimizer = self._critic_optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]

        def mask_of(data: TrainingData) -> torch.Tensor:
            return data.mask if data.mask is not None else torch.ones_like(data.column("returns"), dtype=torch.bool)

        # the returns are the groups' raw ones (their updates leave a team critic's statistics alone)
        if first.value_preprocessor is not identity:
            returns = torch.cat([data.column("returns") for _, data in parts])
            first.update_statistics("value", returns, torch.cat([mask_of(data) for _, data in parts]), agent_dim=0)
        T, N = first.rollout.rollouts, first.rollout.num_envs
        shuffle, total, steps = cfg.mini_batch_order == "shuffled", torch.zeros((), device=self.device), 0
        for _ in range(cfg.learning_epochs):
            for indexes in mini_batch_indexes(T, N, first.mini_batches, device=self.device, shuffle=shuffle):
                losses, masks = [], []
                with self._autocast():
                    for group, data in parts:
                        batch = data.batch(indexes)
                        inputs = {"observations": batch["observations"].contiguous(), "states": batch["states"]}
                        predicted, _ = group.act("value", inputs)
                        loss = self.value_loss(
                            predicted_values=predicted.float().view(batch["returns"].shape),
                            old_values=batch["values"],
                            returns=group.preprocess("value", batch["returns"], agent_dim=0),
                            value_clip=cfg.value_clip,
                            huber_delta=cfg.huber_delta,
                        )
                        losses.append(loss)
                        masks.append(batch["mask"] if batch["mask"] is not None else torch.ones_like(loss).bool())
                loss = cfg.value_loss_scale * masked_mean(torch.cat(losses), torch.cat(masks))
                self._optimizer_step(optimizer, loss, params, cfg.grad_norm_clip)
                self.scaler.update()
                total += loss.detach()
                steps += 1
            if self._critic_scheduler is not None:
                self._critic_scheduler.step()
        self.track_data("Loss / Value loss (team critic)", (total / max(steps, 1)).item())

    def _ratio_after_update(self, group: OnPolicyGroup, data: TrainingData) -> torch.Tensor:
        """``prod over the group's agents of pi_new / pi_old`` per sample ``(T * N, 1)``, no gradient: the policy as the
        epochs left it, on the inputs the epochs read (mini-batch by mini-batch, in order); 1 where an agent was
        masked. M > 0, so min(r A, clip(r) A) M = min(r (A M), clip(r) (A M)): weighting the next group's advantages
        by it is HARL's factor * min(surr1, surr2) (harl/algorithms/actors/happo.py), with the clip and the masks
        unchanged."""
        G, T, N = group.size, group.rollout.rollouts, group.rollout.num_envs
        ratio = torch.ones(G, T * N, 1, device=self.device)
        with torch.no_grad(), self._autocast():
            for indexes in group.rollout.mini_batch_indexes(group.mini_batches, shuffle=False):
                batch = data.batch(indexes)
                ((_, outputs),) = group.act_many(("policy", self._model_calls(group, batch)[0]))
                r = torch.exp(outputs["log_prob"].float().view(G, -1, 1) - batch["log_prob"])
                if batch["mask"] is not None:  # masks: an absent agent leaves M as it is
                    r = torch.where(batch["mask"], r, 1.0)
                ratio[:, indexes] = r
        return ratio.prod(dim=0)
