"""MADDPG's joint replay: one skrl memory per agent, written and sampled row-aligned, stored jointly.

Row ``i`` of every agent's memory is one joint transition (the same step of the same env), so a gradient step draws
*one* set of row indexes and reads it from every memory (:meth:`JointReplay.sample`). Independent draws per memory
would pair agent ``i``'s observation with other agents' actions from other moments, and the critics would learn
nonsense. Writes happen in ``record_transition`` only, one row per agent per step (:meth:`JointReplay.add`), after
:meth:`JointReplay.refuse_or_skip_non_finite` has looked at them.

Storage: the agents whose tensor ``name`` has the same width share one ``(agents, memory_size, num_envs, width)``
tensor, and each agent's memory holds its slice ``[k]`` as its tensor ``name`` (contiguous, so skrl's
``tensors_view``, ``sample_by_index`` and a user reading ``memories[uid].tensors`` see the usual layout). A step is
then written with two tensor ops per (name, width) and a batch read with one, whatever the number of agents (skrl's
``add_samples`` / ``sample_by_index`` per memory cost 9 ops per agent each); the memories' indexes advance as
``add_samples`` would advance them.

Checkpoints (``MADDPG_CFG.checkpoint_replay``): :class:`ReplayState` is an agent's checkpoint module ``replay``, its
memory's filled rows, write position and fill state, so a resumed run samples from the replay it stopped with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from skrl.memories.torch import Memory

FIX = "pass memories={uid: RandomMemory(memory_size=..., num_envs=env.num_envs) for uid in env.possible_agents}"

STORAGE = "_skrl_marl_ext_storage"
"""Attribute of a memory holding ``{name: storage tensor}`` of the tensors this module created in it."""

CHECKED = ("observations", "states", "next_observations", "next_states", "rewards", "actions")
"""The row tensors scanned for NaN/inf, inputs first (a NaN observation also makes the action, and through the env
later rewards, non-finite)."""


class JointReplay:
    def __init__(self, memories: object, *, owner: str, possible_agents: Sequence[str]) -> None:
        """Check and hold one distinct skrl memory per agent, all with the same ``num_envs`` and ``memory_size``.

        :param memories: ``{agent: Memory}``.
        :param owner: The agent's class name, for the messages.
        :param possible_agents: Agent names.

        :raises ValueError: Naming the agent and the fix when a memory is missing, shared or of another size.
        """
        if not isinstance(memories, dict) or not memories:
            raise ValueError(f"{owner} learns from a replay memory per agent; {FIX}")
        seen: dict[int, str] = {}
        for uid in possible_agents:
            memory = memories.get(uid)
            if not isinstance(memory, Memory):
                raise ValueError(f"{owner}: memories has no skrl Memory for agent '{uid}' (got {memory!r}); {FIX}")
            if id(memory) in seen:
                raise ValueError(
                    f"{owner}: agents '{seen[id(memory)]}' and '{uid}' were given the same memory object; each agent "
                    f"needs its own (their rows are aligned, not shared); {FIX}"
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
            storage = self._existing_storage(name, uids, shape, dtype)
            if storage is None:
                storage = torch.zeros(shape, dtype=dtype, device=first.device)
                if torch.is_floating_point(storage):
                    storage.fill_(float("nan"))
            for k, uid in enumerate(uids):
                memory = self.memories[uid]
                setattr(memory, f"_tensor_{name}", storage[k])  # what skrl's Memory.create_tensor sets
                memory.tensors[name] = storage[k]
                memory.tensors_view[name] = storage[k].view(-1, width)
                setattr(memory, STORAGE, getattr(memory, STORAGE, {}) | {name: storage})
                self.names[uid].append(name)
            self.parts[name].append((uids, storage))

    def _existing_storage(self, name: str, uids: list[str], shape: tuple, dtype: torch.dtype) -> torch.Tensor | None:
        """The storage an earlier agent created on these same memories for ``name``, when it has this layout (skrl's
        ``create_tensor`` likewise keeps an existing tensor of the same size: two agents built on one set of memories
        read and write the same rows)."""
        found = {id(getattr(self.memories[uid], STORAGE, {}).get(name)) for uid in uids}
        storage = getattr(self.memories[uids[0]], STORAGE, {}).get(name)
        if storage is None or len(found) != 1 or storage.shape != shape or storage.dtype != dtype:
            return None
        same_slices = all(self.memories[uid].tensors.get(name) is not None for uid in uids) and all(
            self.memories[uid].tensors[name].data_ptr() == storage[k].data_ptr() for k, uid in enumerate(uids)
        )
        return storage if same_slices else None

    def width(self, uid: str, name: str) -> int:
        return self.memories[uid].tensors[name].shape[-1]

    def check_num_envs(self, num_envs: int) -> None:
        """Refuse (once) an env whose ``num_envs`` is not the memories'."""
        if not self._checked_num_envs and num_envs != self.num_envs:
            raise ValueError(
                f"{self.owner}: the memories were created with num_envs={self.num_envs} but the env gives {num_envs} "
                "observations per step; create RandomMemory(memory_size=..., num_envs=env.num_envs)"
            )
        self._checked_num_envs = True

    def refuse_or_skip_non_finite(self, rows: dict[str, dict[str, torch.Tensor]], *, skip: bool) -> torch.Tensor:
        """NaN/inf in a step's rows: raise naming agent and tensor, or (``skip``) zero them and mask them out.

        One host read per step when raising, none when skipping. A zeroed row still enters the other agents' critics
        as part of the joint state and action, as a dead agent's zero row does; only its own losses leave it out.

        :param rows: ``{agent: {name: (num_envs, size)}}``, changed in place when skipping.
        :return: The number of (agent, env) rows masked out (a tensor).
        """
        count = torch.zeros((), dtype=torch.long, device=next(iter(next(iter(rows.values())).values())).device)
        if not skip:  # one check of every agent's rows at once; the details only when something is not finite
            checked = [r[k].reshape(r[k].shape[0], -1).float() for r in rows.values() for k in CHECKED if k in r]
            if bool(torch.isfinite(torch.cat(checked, dim=1)).all()):
                return count
        bad = {uid: {k: ~torch.isfinite(r[k]).all(dim=1) for k in CHECKED if k in r} for uid, r in rows.items()}
        if skip:
            for uid, samples in rows.items():
                flags = torch.stack(list(bad[uid].values())).any(dim=0)  # (num_envs,)
                for k in bad[uid]:
                    samples[k] = torch.where(torch.isfinite(samples[k]), samples[k], 0.0)
                samples["agent_mask"] = samples["agent_mask"] & ~flags.view(-1, 1)
                count = count + flags.sum()
            return count
        for uid, tensors in bad.items():
            for key, flags in tensors.items():
                if flags.any():
                    env = int(flags.nonzero()[0])
                    raise ValueError(
                        f"{self.owner}: non-finite {key} (NaN or inf) for agent '{uid}' in env {env}; refusing to "
                        "store it. Fix the env, shape the rewards with cfg.rewards_shaper, or set "
                        'cfg.non_finite="skip" to mask such samples out of learning'
                    )
        return count

    def add(self, rows: dict[str, dict[str, torch.Tensor]]) -> None:
        """Append one row per env to every agent's memory (the rows stay aligned), then advance every memory's
        indexes as skrl's ``add_samples`` does for ``num_envs`` rows (including its export when it fills up).

        :param rows: ``{agent: {name: (num_envs, width)}}`` in the tensors' dtypes.
        """
        first = self.memories[self.uids[0]]
        index = first.memory_index
        for name, parts in self.parts.items():
            for uids, storage in parts:
                storage[:, index].copy_(torch.stack([rows[uid][name] for uid in uids]))
        index += 1
        filled = index >= first.memory_size
        for uid in self.uids:
            memory = self.memories[uid]
            memory.env_index, memory.memory_index = 0, 0 if filled else index
            if filled:
                memory.filled = True
                if memory.export:
                    memory.save(directory=memory.export_directory, format=memory.export_format)

    def sample_indexes(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` row indexes drawn with replacement from the filled part of the memories."""
        return torch.randint(len(self), (batch_size,), device=self.memories[self.uids[0]].device)

    def sample(self, indexes: torch.Tensor, *, device: torch.device | str) -> dict[str, dict[str, torch.Tensor]]:
        """Rows ``indexes`` of every agent's memory: ``{agent: {name: (batch, width)}}``, the same rows for all (one
        read per storage tensor; row ``r`` is step ``r // num_envs`` of env ``r % num_envs``, skrl's flat order)."""
        batch: dict[str, dict[str, torch.Tensor]] = {uid: {} for uid in self.uids}
        for name, parts in self.parts.items():
            for uids, storage in parts:
                sampled = storage.flatten(1, 2)[:, indexes].to(device)  # (agents, batch, width)
                for k, uid in enumerate(uids):
                    batch[uid][name] = sampled[k]
        return batch


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
            "tensors": {name: memory.tensors[name][:count].clone() for name in self.replay.names[self.uid]},
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
            saved, target = tensors[name], memory.tensors[name]
            if saved.shape != (count, *target.shape[1:]) or count > memory.memory_size:
                raise ValueError(
                    f"the replay's '{name}' has shape {tuple(saved.shape)}, which does not fit this memory's "
                    f"{tuple(target.shape)} (memory_size, num_envs, width); build the memories with the memory_size "
                    "and num_envs of the run that wrote the checkpoint"
                )
        for name in names:
            target = memory.tensors[name]
            target[:count].copy_(tensors[name])
            target[count:].fill_(float("nan") if torch.is_floating_point(target) else 0)
        memory.memory_index, memory.env_index, memory.filled = index, 0, filled
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
