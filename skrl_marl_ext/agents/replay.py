"""MADDPG's joint replay: one skrl memory per agent, written and sampled row-aligned.

Row ``i`` of every agent's memory is one joint transition (the same step of the same env), so a gradient step draws
*one* set of row indexes and reads it from every memory (:meth:`JointReplay.sample`). Independent draws per memory
would pair agent ``i``'s observation with other agents' actions from other moments, and the critics would learn
nonsense. Writes happen in ``record_transition`` only, one row per agent per step (:meth:`JointReplay.add`), after
:meth:`JointReplay.refuse_or_skip_non_finite` has looked at them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from skrl.memories.torch import Memory

FIX = "pass memories={uid: RandomMemory(memory_size=..., num_envs=env.num_envs) for uid in env.possible_agents}"

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
        self.owner, self.uids, self.memories = owner, list(possible_agents), memories
        self.names: dict[str, list[str]] = {uid: [] for uid in self.uids}
        """The tensor names of each agent's rows, in creation order."""
        self._checked_num_envs = False

    @property
    def num_envs(self) -> int:
        return self.memories[self.uids[0]].num_envs

    def __len__(self) -> int:
        """Rows written so far, over all envs (``memory_size * num_envs`` once full): the sampling range."""
        return len(self.memories[self.uids[0]])

    def create_tensor(self, uid: str, name: str, *, size: int, dtype: torch.dtype) -> None:
        """Create tensor ``name`` of ``size`` columns in agent ``uid``'s memory."""
        self.memories[uid].create_tensor(name=name, size=size, dtype=dtype)
        self.names[uid].append(name)

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
        """Append one row per env to every agent's memory (the rows stay aligned)."""
        for uid in self.uids:
            self.memories[uid].add_samples(**rows[uid])

    def sample_indexes(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` row indexes drawn with replacement from the filled part of the memories."""
        return torch.randint(len(self), (batch_size,), device=self.memories[self.uids[0]].device)

    def sample(self, indexes: torch.Tensor, *, device: torch.device | str) -> dict[str, dict[str, torch.Tensor]]:
        """Rows ``indexes`` of every agent's memory: ``{agent: {name: (batch, size)}}``, the same rows for all."""
        batch = {}
        for uid in self.uids:
            names = self.names[uid]
            tensors = self.memories[uid].sample_by_index(names, indexes=indexes)[0]
            batch[uid] = {k: v.to(device) for k, v in zip(names, tensors, strict=True)}
        return batch
