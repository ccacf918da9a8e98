"""The base under MAPPO, IPPO and MADDPG: what every algorithm does the same way, on skrl's ``MultiAgent``.

:class:`GroupedMultiAgent` holds no lifecycle of its own (each algorithm defines ``act``, ``record_transition``,
``post_interaction`` and ``update`` in its file) but the pieces they share:

- construction: the config (built from a dict or dataclass, validated), the constructor's arguments checked with the
  fix named, the groups (:mod:`skrl_marl_ext.groups`) formed when the algorithm asks, the grad scaler;
- rank gating: only rank 0 of a distributed run writes TensorBoard data and checkpoints;
- infos: the action masks, kept by :class:`~skrl_marl_ext.features.masks.ActionMasks` (with the refusal of a policy
  that would ignore them);
- checkpoints: registration of each group's modules per agent, and ``progress`` (the steps completed): the trainer's
  ``timestep``/``timesteps`` are shifted by it at the public entry points (:meth:`_shift`), so a resumed run continues
  its schedules, checkpoint numbering and TensorBoard steps (the files themselves: :mod:`skrl_marl_ext.checkpoints`);
- the optimiser step of one loss: scaled backward, then :func:`~skrl_marl_ext.groups.optim.scaled_step`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import torch
from packaging import version
from skrl.memories.torch import Memory
from skrl.models.torch import Model
from skrl.multi_agents.torch import MultiAgent
from skrl.utils.tensorboard import SummaryWriter

from skrl_marl_ext import checkpoints, distributed
from skrl_marl_ext.checkpoints.files import save_torch
from skrl_marl_ext.checks.arguments import check_agent_inputs
from skrl_marl_ext.checks.inputs import InputCheck
from skrl_marl_ext.config import build_cfg
from skrl_marl_ext.features.masks import ActionMasks
from skrl_marl_ext.groups import AgentGroup
from skrl_marl_ext.groups.forming import batch_groups, group_agents
from skrl_marl_ext.groups.optim import Adam, scaled_step
from skrl_marl_ext.keys import AGENT_MASK_KEY
from skrl_marl_ext.preprocessors import identity
from skrl_marl_ext.tracking import TrackingData


def make_grad_scaler(device_type: str, enabled: bool):
    """``torch.amp.GradScaler`` on torch >= 2.4, ``torch.cuda.amp.GradScaler`` before (disabled unless ``enabled``)."""
    if version.parse(torch.__version__) >= version.parse("2.4"):
        return torch.amp.GradScaler(device=device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # pragma: no cover - old torch


@dataclasses.dataclass
class Progress:
    """What a training run has done, saved as every agent's checkpoint module ``progress`` (plain ints: checkpoints
    load with ``weights_only=True``); loading it makes the agent continue from there."""

    timestep: int = 0
    """Training env steps completed (the trainer's ``timestep + 1`` after each step, shifted as the agent sees it)."""

    def state_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the saved counts (a count the file lacks is 0)."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, int(state.get(field.name, 0)))


class GroupedMultiAgent(MultiAgent):
    """Base of the package's agents (see the module docstring)."""

    cfg_class: type
    """The agent's config dataclass."""
    roles: tuple[str, ...]
    """The model roles every agent's models dict must hold."""
    group_class: type = AgentGroup
    requires_states: bool = False
    """Whether the agent refuses to be built without ``state_spaces``."""
    progress_class: type = Progress
    """The checkpoint module ``progress``: the steps completed and the algorithm's own counters."""

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
        """Build the config, check the arguments and call skrl's constructor; the algorithm then forms its groups
        (:meth:`_form_groups`) and sets them up.

        Parameters are skrl's ``MultiAgent``'s (keyword-only); ``cfg`` is a dict or a config dataclass (see each
        agent's class docstring).
        """
        name = type(self).__name__
        cfg = build_cfg(self.cfg_class, cfg, owner=name)
        cfg.validate(owner=name)
        check_agent_inputs(
            owner=name,
            possible_agents=possible_agents,
            models=models,
            roles=self.roles,
            observation_spaces=observation_spaces,
            state_spaces=state_spaces,
            action_spaces=action_spaces,
            need_states=self.requires_states,
        )
        self._check_action_spaces(action_spaces, possible_agents)
        super().__init__(
            possible_agents=list(possible_agents),
            models=models,
            memories=memories,
            observation_spaces=observation_spaces,
            state_spaces=self._state_spaces(state_spaces, possible_agents),
            action_spaces=action_spaces,
            device=device,
            cfg=cfg,
        )
        self._device_type = torch.device(self.device).type
        self.tracking_data = TrackingData()  # skrl's lists, bounded however long the write interval
        self.groups: list[AgentGroup] = []
        self.group_of: dict[str, AgentGroup] = {}
        self._input_check = InputCheck.of(self)  # act and record_transition: every step the first's shapes
        # one grad scaler for every optimiser of the agent
        self.scaler = make_grad_scaler(self._device_type, self.cfg.mixed_precision)
        self._non_finite_skipped = torch.zeros((), dtype=torch.long, device=self.device)
        self.action_masks = ActionMasks(owner=name, action_spaces=self.action_spaces, device=self.device)  # masks
        self.progress = self.progress_class()
        self._timestep_offset = 0
        """Added to the trainer's ``timestep`` and ``timesteps``: the steps completed when the agent was initialised or
        loaded (see :meth:`_shift`)."""
        self._trainer_timesteps: int | None = None
        """The ``timesteps`` of the trainer that initialised the agent (for skrl's ``"auto"`` intervals)."""
        self.last_checkpoint: tuple[int | None, str] | None = None  # (timestep, path) of write_checkpoint's last
        for uid in self.possible_agents:
            self.checkpoint_modules[uid]["progress"] = self.progress

    # ------------------------------------------------------------------ construction

    def _check_action_spaces(self, action_spaces: dict, possible_agents: list[str]) -> None:
        """Hook: refuse action spaces the algorithm cannot handle (the base takes Box, Discrete, MultiDiscrete)."""

    def _state_spaces(self, state_spaces: dict | None, possible_agents: list[str]) -> dict:
        """The state spaces handed to skrl's constructor (``{agent: None}`` when the env has none)."""
        return state_spaces if state_spaces is not None else {uid: None for uid in possible_agents}

    def _form_groups(self, *, batchable: Callable[[str], bool], roles: tuple[str, ...] | None = None) -> None:
        """Form :attr:`groups`: agents that share their models, then agents with models of their own that stack
        (:func:`~skrl_marl_ext.groups.batch_groups`) where ``batchable(agent)`` allows, each other agent alone.

        :param roles: The roles whose model objects define the groups (all of :attr:`roles` when None; HAPPO's team
            critic, one value model for all agents, leaves it out).
        """
        spaces = {"observation": self.observation_spaces, "action": self.action_spaces, "state": self.state_spaces}
        options = {"models": self.models, "roles": roles or self.roles, "spaces": spaces, "cfg": self.cfg}
        partition = group_agents(owner=type(self).__name__, possible_agents=self.possible_agents, **options)
        singles = [uids for uids in partition if len(uids) == 1 and batchable(uids[0])]
        batched = {tuple(u): b for u, b in batch_groups(singles, **options) if b}
        merged, done = [], set()
        for uids in partition:
            whole = next((list(b) for b in batched if uids[0] in b), uids)
            if whole[0] not in done:
                merged.append((whole, tuple(whole) in batched))
                done.update(whole)
        groups = []
        for index, (uids, is_batched) in enumerate(merged):
            first = uids[0]
            group = self.group_class(
                index=index,
                uids=uids,
                models={role: self.models[first][role] for role in self.roles},
                observation_space=self.observation_spaces[first],
                state_space=self.state_spaces[first],
                action_space=self.action_spaces[first],
                cfg=self.cfg.for_agent(first),
                agent_models={r: [self.models[u][r] for u in uids] for r in self.roles} if is_batched else None,
            )
            group.stack_models()
            groups.append(group)
        self.groups = groups
        self.group_of = {uid: group for group in groups for uid in group.uids}

    def _make_preprocessor(self, group: AgentGroup, kind: str, size: Any) -> Any:
        """The group's ``cfg.<kind>_preprocessor`` (:meth:`~skrl_marl_ext.groups.AgentGroup.make_preprocessor`)."""
        cls, kwargs = getattr(group.cfg, f"{kind}_preprocessor"), getattr(group.cfg, f"{kind}_preprocessor_kwargs")
        return group.make_preprocessor(cls, kwargs, size=size, device=self.device)

    def _register_checkpoint(self, group: AgentGroup, modules: dict[str, Any]) -> None:
        """Save and load ``modules`` (name -> module with a state dict, or a list of one per agent; None and the
        identity are left out) for every agent of the group, with the grad scaler; each agent's own part of what a
        batched group stacks (:meth:`~skrl_marl_ext.groups.AgentGroup.checkpoint_entries`)."""
        modules = group.checkpoint_entries(modules)
        for i, uid in enumerate(group.uids):
            for key, module in modules.items():
                module = module[i if len(module) > 1 else 0] if isinstance(module, list) else module
                if module is not None and module is not identity:
                    self.checkpoint_modules[uid][key] = module
            self.checkpoint_modules[uid]["scaler"] = self.scaler

    def _broadcast_models(self) -> None:
        """Make every rank start from rank 0's parameters (no-op without a process group); each module once."""
        if distributed.is_distributed():
            for module in {id(m): m for group in self.groups for m in group.unique_models()}.values():
                distributed.broadcast_state(module)

    def init(self, *, trainer_cfg: Any = None) -> None:
        """Initialise the agent (skrl's contract; called by the trainers).

        Only rank 0 of a distributed run writes TensorBoard data and checkpoints. The trainer's timesteps continue
        from the steps completed so far (:meth:`_shift`), and skrl's ``"auto"`` intervals (a hundredth and a tenth of
        the run) count those steps too.

        :param trainer_cfg: Trainer configuration (a dataclass).
        """
        if distributed.rank() > 0:
            self.write_interval = 0
            self.checkpoint_interval = 0
        self._timestep_offset = self.progress.timestep
        self._trainer_timesteps = getattr(trainer_cfg, "timesteps", None)
        self._resolve_auto_intervals()
        super().init(trainer_cfg=trainer_cfg)
        self.enable_models_training_mode(False)

    def _resolve_auto_intervals(self) -> None:
        """skrl's ``"auto"`` write and checkpoint intervals over the whole run: the steps completed before the trainer
        started plus its ``timesteps`` (so a resumed run writes where an uninterrupted one would)."""
        if self._trainer_timesteps is None or distributed.rank() > 0:
            return
        total = self._timestep_offset + self._trainer_timesteps
        if self.cfg.experiment.write_interval == "auto":
            self.write_interval = int(total / 100)
        if self.cfg.experiment.checkpoint_interval == "auto":
            self.checkpoint_interval = int(total / 10)

    def load(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save`, refusing one of other agents or model shapes, or one holding
        anything but tensors and state dicts (see :mod:`skrl_marl_ext.checkpoints`).

        The agent then continues from the steps the checkpoint had completed (its ``progress``; from 0 when the file
        has none): a trainer's ``timestep`` 0 is that step, and its ``timesteps`` the steps still to run.

        :param path: Path of the checkpoint file.
        """
        before = self.progress.state_dict()
        self.progress.load_state_dict({})  # a file without progress starts from 0
        try:
            checkpoints.load_checkpoint(self, path)
        except Exception:  # a refused file leaves the agent as it was
            self.progress.load_state_dict(before)
            raise
        self._timestep_offset = self.progress.timestep
        if self._trainer_timesteps is not None:  # loaded after the trainer's init: its "auto" intervals move
            self._resolve_auto_intervals()
            if self.write_interval > 0 and getattr(self, "writer", None) is None:
                self.writer = SummaryWriter(log_dir=self.experiment_dir)
            if self.checkpoint_interval > 0:
                os.makedirs(os.path.join(self.experiment_dir, "checkpoints"), exist_ok=True)

    def save(self, path: str) -> None:
        """skrl's ``save`` (``{agent: {module: state_dict}}``), written whole or not at all: a kill or a full disk
        leaves the previous file of that name as it was (:func:`~skrl_marl_ext.checkpoints.files.write_atomic`).

        :param path: The file to write.
        :raises ~skrl_marl_ext.checkpoints.files.WriteError: When it cannot be written (the message names the file and the cause).
        """
        save_torch(checkpoints.agent_states(self), path)

    def write_checkpoint(self, *, timestep: int, timesteps: int) -> None:
        """skrl's ``write_checkpoint`` (``checkpoints/agent_<timestep>.pt``, ``best_agent.pt`` when a better one was
        kept; one file per agent and module with ``store_separately``), each file written whole or not at all.

        ``timestep`` is the trainer's, as every public entry point takes it (:meth:`_shift`): a loaded run names the
        file by the run's step (Isaac Lab's ``train_skrl.py`` calls this with its trainer's count at the end).
        :attr:`last_checkpoint` then holds ``(step, path)`` of the file written.

        :raises ~skrl_marl_ext.checkpoints.files.WriteError: When a file cannot be written (the message names it and the cause).
        """
        step = self._shift(timestep, timesteps)[0]
        self.last_checkpoint = (step, checkpoints.write_checkpoint(self, timestep=step))

    def _shift(self, timestep: int | None, timesteps: int | None) -> tuple[int | None, int | None]:
        """The trainer's ``timestep`` (from 0) and ``timesteps`` (steps it runs) as the run's: both plus the steps
        completed when the agent was initialised or loaded. Every public entry point shifts them once, so the
        algorithm's schedules, skrl's checkpoint names and TensorBoard steps all continue a loaded run."""
        shift = self._timestep_offset
        return (None if timestep is None else timestep + shift), (None if timesteps is None else timesteps + shift)

    def _recorded_step(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        """``record_transition``'s arguments (its ``locals()``) as the step the algorithm stores: the timesteps shifted
        (:meth:`_shift`), every input checked against the first step's shapes, skrl's episode tracking run; and the
        step's infos (a dict, empty when the env gives none)."""
        step = {k: v for k, v in arguments.items() if k not in ("self", "__class__")}
        step["timestep"], step["timesteps"] = self._shift(step["timestep"], step["timesteps"])
        self._input_check.check(step, timestep=step["timestep"], training=self.training)  # same shapes every step
        MultiAgent.record_transition(self, **step)
        return step, step["infos"] if isinstance(step["infos"], dict) else {}

    def pre_interaction(self, *, timestep: int, timesteps: int) -> None:
        """Nothing to do before the environment step (no timestep to shift)."""

    def _track_and_checkpoint(self, *, timestep: int, timesteps: int) -> None:
        """skrl's ``MultiAgent.post_interaction``: checkpoints (and the best modules by mean total reward) and
        TensorBoard data at their intervals. One difference: a checkpoint module with ``best_state_dict()`` (MADDPG's
        replay) is kept for ``best_agent.pt`` as what that returns, where skrl deep-copies every module's state at
        each better checkpoint."""
        timestep += 1
        if timestep > 1 and self.checkpoint_interval > 0 and not timestep % self.checkpoint_interval:
            best = self.checkpoint_best_modules
            reward = np.mean(self.tracking_data.get("Reward / Total reward (mean)", -(2**31)))
            if reward > best["reward"]:
                best.update(timestep=timestep, reward=reward, saved=False)
                best["modules"] = {
                    uid: {name: checkpoints.best_state(module) for name, module in self.checkpoint_modules[uid].items()}
                    for uid in self.possible_agents
                }
            offset = self._timestep_offset  # skrl's public call, in the trainer's count as it takes it
            self.write_checkpoint(timestep=timestep - offset, timesteps=timesteps - offset)
        if timestep > 1 and self.write_interval > 0 and not timestep % self.write_interval:
            self.write_tracking_data(timestep=timestep, timesteps=timesteps)

    # ------------------------------------------------------------------ optimisation

    def _optimizer_step(
        self, optimizer: Adam, loss: torch.Tensor, parameters: list, clip: float, *, count: bool = False
    ) -> bool:
        """One loss's step: scaled backward, then :func:`~skrl_marl_ext.groups.optim.scaled_step` (clipped to
        ``clip`` when above 0, each agent's own norm for stacked parameters). The caller runs ``self.scaler.update()``
        once its iteration is complete.

        :return: With ``count`` and mixed precision, whether the optimiser stepped (the grad scaler skips a step with
            inf/NaN gradients; two host reads); True otherwise.
        """
        optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        before = optimizer.agent_steps() if count and self.scaler.is_enabled() else None
        scaled_step(self.scaler, optimizer, clip_sets=[parameters], max_norm=clip)
        return before is None or optimizer.agent_steps() != before

    def _autocast(self) -> Callable:
        """``torch.autocast`` of the agent's device, on when ``cfg.mixed_precision`` is."""
        return torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision)


__all__ = [
    "AGENT_MASK_KEY",
    "GroupedMultiAgent",
    "Progress",
    "make_grad_scaler",
]
