"""MADDPG's joint replay: one skrl memory per agent, written and sampled row-aligned.

Row ``i`` of every agent's memory is one joint transition (the same step of the same env), so a gradient step draws
*one* set of row indexes and reads it from every memory (:meth:`JointReplay.sample`); independent draws would pair
agent ``i``'s observation with other agents' actions from other moments. ``record_transition`` writes one row per
agent per step (:meth:`JointReplay.add`).

Storage: the agents whose tensor ``name`` has the same width share one ``(agents, memory_size, num_envs, width)``
tensor, and each agent's memory holds its slice as its tensor ``name``, so ``memories[uid].tensors`` and skrl's
sampling methods see skrl's layout while a step is written, and a batch read, with one op per (name, width) whatever
the number of agents. skrl has no public way to hand a memory a tensor or to set its write position: the two small
functions at the end of this module are the only places that set a memory's attributes.

Checkpoints (``MADDPG_CFG.checkpoint_replay``): :class:`ReplayState`, an agent's checkpoint module ``replay``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch
from skrl.memories.torch import Memory

from skrl_marl_ext.storage.non_finite import FIX, first_non_finite, skip_non_finite_

BUILD = "pass memories={uid: RandomMemory(memory_size=..., num_envs=env.num_envs) for uid in env.possible_agents}"

CHECKED = ("observations", "states", "next_observations", "next_states", "rewards", "actions")
"""The row tensors checked for NaN/inf, inputs first (a NaN observation also makes the action, and through the env
later rewards, non-finite)."""

ADVANCE = "_joint_replay_advance"
"""A tensor name no memory has: ``add_samples`` of it writes nothing and advances the memory's indexes."""

_STORAGES: weakref.WeakKeyDictionary[Memory, dict[str, tuple[torch.Tensor, int]]] = weakref.WeakKeyDictionary()
"""Per memory, ``{name: (storage, k)}``: its tensor ``name`` is ``storage[k]``. A second agent built on the same
memories finds the storage and shares its rows (as skrl's ``create_tensor`` keeps an existing tensor)."""


class JointReplay:
    def __init__(self, memories: object, *, owner: str, possible_agents: Sequence[str]) -> None:
        """Check and hold one distinct skrl memory per agent, all with the same ``num_envs`` and ``memory_size``.

        :param memories: ``{agent: Memory}``.
        :param owner: The agent's class name, for the messages.
        :param possible_agents: Agent names.

        :raises ValueError: Naming the agent and the fix when a memory is missing, shared or of another size.
        """
        if not isinstance(memories, dict) or not memories:
            raise ValueError(f"{owner} learns from a replay memory per agent; {BUILD}")
        seen: dict[int, str] = {}
        for uid in possible_agents:
            memory = memories.get(uid)
            if not isinstance(memory, Memory):
                raise ValueError(f"{owner}: memories has no skrl Memory for agent '{uid}' (got {memory!r}); {BUILD}")
            if id(memory) in seen:
                raise ValueError(
                    f"{owner}: agents '{seen[id(memory)]}' and '{uid}' were given the same memory object; each agent "
                    f"needs its own (their rows are aligned, not shared); {BUILD}"
                )
            seen[id(memory)] = uid
        sizes = {uid: memories[uid].num_envs for uid in possible_agents}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"{owner}: the memories were created with different num_envs {sizes}; use env.num_envs")
        lengths = {uid: memories[uid].memory_size for uid in possible_agents}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{owner}: the memories have different memory_size {lengths}; one joint transition is one row of "
                "every memory, so give them the same size"
            )
        devices = {uid: memories[uid].device for uid in possible_agents}
        if len(set(devices.values())) > 1:
            raise ValueError(f"{owner}: the memories were created on different devices {devices}; use one device")
        self.owner, self.uids, self.memories = owner, list(possible_agents), memories
        self.names: dict[str, list[str]] = {uid: [] for uid in self.uids}
        """The tensor names of each agent's rows, in creation order."""
        self.parts: dict[str, list[tuple[list[str], torch.Tensor]]] = {}
        """Per tensor name, the agents sharing one storage tensor and that ``(agents, memory_size, num_envs, width)``
        tensor."""
        self._checked_num_envs = False
        self._advance = {ADVANCE: torch.empty(self.num_envs, 0)}

    @property
    def num_envs(self) -> int:
        return self.memories[self.uids[0]].num_envs

    def __len__(self) -> int:
        """Rows written so far, over all envs (``memory_size * num_envs`` once full): the sampling range."""
        return len(self.memories[self.uids[0]])

    def create_tensor(self, name: str, *, sizes: dict[str, int], dtype: torch.dtype) -> None:
        """Create tensor ``name`` in the memories of the agents of ``sizes`` (``{agent: columns}``): one storage
        tensor per width, its slices the memories' tensors (floats filled with NaN, as skrl's ``create_tensor``)."""
        if name in self.parts:
            raise ValueError(f"{self.owner}: replay tensor '{name}' was created twice")
        by_width: dict[int, list[str]] = {}
        for uid in self.uids:  # agent order, so a storage tensor's slices follow possible_agents
            if uid in sizes:
                by_width.setdefault(int(sizes[uid]), []).append(uid)
        first = self.memories[self.uids[0]]
        self.parts[name] = []
        for width, uids in by_width.items():
            shape = (len(uids), first.memory_size, first.num_envs, width)
            storage = self._shared_storage(name, uids)
            if storage is None or storage.shape != shape or storage.dtype != dtype:
                fill = float("nan") if dtype.is_floating_point else 0
                storage = torch.full(shape, fill, dtype=dtype, device=first.device)
            for k, uid in enumerate(uids):
                _use_storage(self.memories[uid], name, storage, k)
                self.names[uid].append(name)
            self.parts[name].append((uids, storage))

    def _shared_storage(self, name: str, uids: list[str]) -> torch.Tensor | None:
        """The storage an earlier replay on these memories created for ``name``, holding these agents in this order."""
        found = [_STORAGES.get(self.memories[uid], {}).get(name) for uid in uids]
        if None in found or len({id(storage) for storage, _ in found}) != 1:
            return None
        return found[0][0] if [k for _, k in found] == list(range(len(uids))) else None

    def width(self, uid: str, name: str) -> int:
        return self.memories[uid].get_tensor_by_name(name).shape[-1]

    def check_num_envs(self, num_envs: int) -> None:
        """Refuse (once) an env whose ``num_envs`` is not the memories'."""
        if not self._checked_num_envs and num_envs != self.num_envs:
            raise ValueError(
                f"{self.owner}: the memories were created with num_envs={self.num_envs} but the env gives {num_envs} "
                "observations per step; create RandomMemory(memory_size=..., num_envs=env.num_envs)"
            )
        self._checked_num_envs = True

    def add(self, rows: dict[str, dict[str, torch.Tensor]], *, skip_non_finite: bool) -> torch.Tensor:
        """Append one row per env to every agent's memory (the rows stay aligned).

        Rows with NaN/inf are refused (an error naming the agent, the tensor and the env; nothing is stored), or with
        ``skip_non_finite`` stored zeroed and masked out of ``agent_mask``. A zeroed row still enters the other agents'
        critics as part of the joint state and action, as a dead agent's zero row does; only its own losses leave it
        out. One host read per step when refusing, none when skipping.

        :param rows: ``{agent: {name: (num_envs, width)}}`` in the tensors' dtypes.
        :return: How many (agent, env) rows were masked out (a tensor).
        """
        if not skip_non_finite:
            found = first_non_finite([(_as_step(rows[uid]), [uid]) for uid in self.uids], CHECKED)
            if found is not None:
                name, who, _, env = found
                raise ValueError(
                    f"{self.owner}: non-finite {name} (NaN or inf) for {who} in env {env}; refusing to store it. {FIX}"
                )
        index = self.memories[self.uids[0]].memory_index
        for name, parts in self.parts.items():
            for uids, storage in parts:
                storage[:, index].copy_(torch.stack([rows[uid][name] for uid in uids]))
        skipped = torch.zeros((), dtype=torch.long, device=self.memories[self.uids[0]].device)
        if skip_non_finite:  # in place on the stored row, not on the caller's tensors
            for uid in self.uids:
                stored = {name: self.memories[uid].get_tensor_by_name(name)[index] for name in self.names[uid]}
                skipped += skip_non_finite_(_as_step(stored), CHECKED)
        for uid in self.uids:
            # skrl skips the write of a name the memory has no tensor for but advances its indexes (and exports it
            # once full) as for any num_envs rows: the memories' position follows the rows just written
            self.memories[uid].add_samples(**self._advance)
        return skipped

    def sample_indexes(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` row indexes drawn with replacement from the filled part of the memories."""
        return torch.randint(len(self), (batch_size,), device=self.memories[self.uids[0]].device)

    def sample(
        self,
        indexes: torch.Tensor,
        *,
        device: torch.device | str,
        n_step: int = 1,
        discounts: dict[str, float] | None = None,
        through_truncation: bool = False,
    ) -> dict[str, dict[str, torch.Tensor]]:
        """Rows ``indexes`` of every agent's memory: ``{agent: {name: (batch, width)}}``, the same rows for all (one
        read per storage tensor; row ``r`` is step ``r // num_envs`` of env ``r % num_envs``, skrl's flat order).

        With ``n_step > 1`` each row is the start of an ``n``-step transition (HARL's ``n_step``): ``rewards`` become
        each agent's ``sum_j gamma^j r_{t+j}`` over the steps reached (``discounts``: ``{agent: gamma}``), the next
        observations, states, action masks and the ``terminated``/``truncated`` flags are those of the last step
        reached, and ``discount`` holds each agent's ``gamma^k`` for the ``k`` steps reached, ``(batch, 1)``. The
        steps reached are the same for every agent, so the joint next state is one moment: from step ``t + j`` the
        transition goes on to ``t + j + 1`` while no agent's episode ended at ``t + j``, ``t + j`` is not the newest
        step written, every agent acted at both steps, and ``t + j + 1`` is not a truncation (unless
        ``through_truncation``: the critics bootstrap from truncated transitions).
        """
        batch = self._read(self.parts, indexes, device)
        if n_step > 1:
            for uid, rows in self._n_step(indexes, n_step, discounts or {}, through_truncation, device).items():
                batch[uid].update(rows)
        return batch

    def _read(self, parts: dict, indexes: torch.Tensor, device: torch.device | str) -> dict[str, dict]:
        batch: dict[str, dict[str, torch.Tensor]] = {uid: {} for uid in self.uids}
        for name, name_parts in parts.items():
            for uids, storage in name_parts:
                sampled = storage.flatten(1, 2)[:, indexes].to(device)  # (agents, batch, width)
                for k, uid in enumerate(uids):
                    batch[uid][name] = sampled[k]
        return batch

    def _n_step(
        self, indexes: torch.Tensor, n_step: int, discounts: dict, through_truncation: bool, device
    ) -> dict[str, dict[str, torch.Tensor]]:
        """The ``n_step`` rows that replace the one-step ones of rows ``indexes`` (see :meth:`sample`): the ``n_step``
        steps of each row's env from it on are read at once, and step ``j`` is reached while every step before it
        lets the transition go on. ``{agent: {name: (batch, width)}}``: the summed rewards, ``discount``, and the
        next observations, states, masks and flags of the last step reached."""
        first, E, here = self.memories[self.uids[0]], self.num_envs, indexes.device
        newest = (first.memory_index - 1) % first.memory_size  # the step written last
        ahead = torch.arange(n_step, device=here)
        steps = (indexes // E).unsqueeze(1) + ahead  # (B, n)
        rows = (steps % first.memory_size) * E + (indexes % E).unsqueeze(1)
        names = ("terminated", "truncated", "agent_mask", "rewards")
        got = self._read({name: self.parts[name] for name in names}, rows.flatten(), here)

        def per_step(name: str) -> torch.Tensor:  # (agents, B, n)
            return torch.stack([got[u][name].view(rows.shape) for u in self.uids])

        truncated = per_step("truncated").any(dim=0)
        ended = per_step("terminated").any(dim=0) | truncated
        acted = per_step("agent_mask").all(dim=0)
        goes_on = ~ended[:, :-1] & acted[:, :-1] & acted[:, 1:] & (steps[:, :-1] % first.memory_size != newest)
        if not through_truncation:
            goes_on = goes_on & ~truncated[:, 1:]
        reached = torch.cat([torch.ones_like(goes_on[:, :1]), goes_on.cumprod(dim=1).bool()], dim=1)  # (B, n)
        count = reached.sum(dim=1, keepdim=True)
        last = rows.gather(1, count - 1).squeeze(1)  # the row of the last step reached
        ends = {name: parts for name, parts in self.parts.items() if name.startswith("next_")}
        ends.update(terminated=self.parts["terminated"], truncated=self.parts["truncated"])
        out = self._read(ends, last, device)
        # every agent at once: (agents, 1, 1) discounts, (agents, B, n) rewards
        gammas = torch.tensor([float(discounts.get(u, 1.0)) for u in self.uids], dtype=torch.float64, device=device)
        rewards = per_step("rewards").to(device)
        weights = (gammas.view(-1, 1, 1) ** ahead.to(device)).to(rewards.dtype)
        summed = torch.where(reached.to(device), rewards * weights, 0.0).sum(dim=2, keepdim=True)
        discount = (gammas.view(-1, 1, 1) ** count.to(device)).to(rewards.dtype)
        for k, uid in enumerate(self.uids):
            out[uid].update(rewards=summed[k], discount=discount[k])
        return out


def _as_step(rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One agent's rows ``{name: (num_envs, width)}`` as the one-step, one-row set of :mod:`.non_finite`."""
    return {name: row.reshape(1, 1, *row.shape) for name, row in rows.items()}


class ReplayState:
    """Agent ``uid``'s part of the joint replay as a checkpoint module: its memory's filled rows ``{name: (rows,
    num_envs, width)}`` (``memory_size`` rows once the memory has wrapped around, else the rows written), the write
    position, whether it has wrapped, and the state of the noises given (skrl's ``OrnsteinUhlenbeckNoise`` keeps its
    last sample; ``GaussianNoise`` has none)."""

    def __init__(self, replay: JointReplay, uid: str, *, noises: dict[str, Any] | None = None) -> None:
        self.replay, self.uid, self.noises = replay, uid, dict(noises or {})

    def state_dict(self, *, rows: bool = True) -> dict[str, Any]:
        """The state to save; without ``rows`` that of an empty replay (what ``best_agent.pt`` keeps)."""
        memory = self.replay.memories[self.uid]
        count = (memory.memory_size if memory.filled else memory.memory_index) if rows else 0
        return {
            "memory_index": int(memory.memory_index) if rows else 0,
            "filled": bool(memory.filled) and rows,
            # cloned: saving a view would write the whole storage tensor it belongs to (every agent's rows)
            "tensors": {name: memory.get_tensor_by_name(name)[:count].clone() for name in self.replay.names[self.uid]},
            "noises": {name: _noise_state(noise) for name, noise in self.noises.items()},
        }

    def best_state_dict(self) -> dict[str, Any]:
        """What skrl keeps of this module for ``best_agent.pt`` at a better checkpoint: an empty replay, not a deep copy
        of the rows (loading ``best_agent.pt`` starts from an empty replay)."""
        return self.state_dict(rows=False)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Write the saved rows into the memory and set its indexes (and the noises' state).

        :raises ValueError: When the saved tensors are not this memory's (names, ``num_envs``, widths, more rows than
            ``memory_size``).
        """
        memory = self.replay.memories[self.uid]
        names, tensors = self.replay.names[self.uid], state["tensors"]
        if set(tensors) != set(names):
            raise ValueError(f"the replay holds tensors {sorted(tensors)} where this agent stores {sorted(names)}")
        filled, index = bool(state["filled"]), int(state["memory_index"])
        count = memory.memory_size if filled else index
        for name in names:
            saved, target = tensors[name], memory.get_tensor_by_name(name)
            if saved.shape != (count, *target.shape[1:]) or count > memory.memory_size:
                raise ValueError(
                    f"the replay's '{name}' has shape {tuple(saved.shape)}, which does not fit this memory's "
                    f"{tuple(target.shape)} (memory_size, num_envs, width); build the memories with the memory_size "
                    "and num_envs of the run that wrote the checkpoint"
                )
        for name in names:
            target = memory.get_tensor_by_name(name)
            target[:count].copy_(tensors[name])
            target[count:].fill_(float("nan") if torch.is_floating_point(target) else 0)
        _set_position(memory, index=index, filled=filled)
        for name, noise in self.noises.items():
            _load_noise_state(noise, state.get("noises", {}).get(name, {}))


def _noise_state(noise: Any) -> dict[str, Any]:
    """A noise's ``state_dict()`` if it has one, else its tensor ``state`` (skrl's Ornstein-Uhlenbeck noise)."""
    if callable(getattr(noise, "state_dict", None)):
        return noise.state_dict()
    state = getattr(noise, "state", None)
    return {"state": state.clone()} if torch.is_tensor(state) else {}


def _load_noise_state(noise: Any, state: dict[str, Any]) -> None:
    if callable(getattr(noise, "load_state_dict", None)):
        noise.load_state_dict(state)
    elif hasattr(noise, "state"):  # skrl's Ornstein-Uhlenbeck noise starts from 0
        noise.state = state["state"].clone() if "state" in state else 0


# ---------------------------------------------------------------- what skrl's public Memory methods cannot do


def _use_storage(memory: Memory, name: str, storage: torch.Tensor, k: int) -> None:
    """Make ``storage[k]`` the memory's tensor ``name``, laid out as skrl's ``create_tensor`` lays one out.

    skrl has no public way to give a memory a tensor; its methods read these two dicts. Agents sharing one storage is
    what keeps a step's write and a batch's read at one op per tensor name, whatever the number of agents.
    """
    memory.tensors[name] = storage[k]
    memory.tensors_view[name] = storage[k].view(-1, storage.shape[-1])
    _STORAGES.setdefault(memory, {})[name] = (storage, k)


def _set_position(memory: Memory, *, index: int, filled: bool) -> None:
    """Put the memory's write position at row ``index``, full or not, as the checkpointed run left it.

    skrl's public methods move the position only by writing rows (``add_samples``, which would export a full memory)
    or back to 0 (``reset``); ``memory_index`` and ``filled`` are the circular buffer's state its docstring names.
    """
    memory.reset()
    memory.memory_index, memory.filled = index, filled
