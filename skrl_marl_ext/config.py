"""Config handling shared by every agent of the package.

skrl 2.1.1's ``MultiAgentCfg.expand`` takes the empty-dict defaults of ``*_kwargs`` fields for partial per-agent
dicts and raises, so ``MAPPO(cfg={})`` (and even ``MAPPO_CFG()``) cannot be used. :class:`MarlCfg` replaces that
``expand`` with one whose rule has no such hole, and :func:`build_cfg` turns a dict into the config dataclass,
refusing unknown keys by name.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar

from skrl.multi_agents.torch import ExperimentCfg, MultiAgentCfg

from skrl_marl_ext.checks.configs import unknown_key_error


def _dataclass_from_dict(cls: type, values: dict[str, Any], owner: str):
    known = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in known:
            raise unknown_key_error(owner, key, known)
    return cls(**values)


def build_cfg(cfg_class: type, cfg: Any, *, owner: str):
    """Return a fresh ``cfg_class`` instance from ``cfg`` (a dict, an instance, or None).

    The user's object is never modified (it is copied), so one config can build several agents.

    :param cfg_class: The agent's config dataclass.
    :param cfg: A dict of field values, an instance of ``cfg_class`` (or of a parent config class with a subset of
        its fields, such as skrl's own ``MAPPO_CFG``), or None for the defaults.
    :param owner: Name used in error messages (the agent class).

    :raises ValueError: On a key that is not a field of ``cfg_class`` (the message names it and the closest field).
    :raises TypeError: When ``cfg`` is neither a dict nor a dataclass instance.
    """
    if cfg is None:
        cfg = {}
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        if isinstance(cfg, cfg_class):
            return copy.deepcopy(cfg)
        # e.g. skrl's MAPPO_CFG: take its fields over by name (shallow, then copied)
        cfg = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    if not isinstance(cfg, dict):
        raise TypeError(f"{owner}: cfg must be a dict or a {cfg_class.__name__} instance, got {type(cfg).__name__}")
    values = copy.deepcopy(cfg)
    experiment = values.get("experiment")
    if isinstance(experiment, dict):
        values["experiment"] = _dataclass_from_dict(ExperimentCfg, experiment, f"{owner} cfg.experiment")
    elif experiment is None and "experiment" in values:
        del values["experiment"]
    return _dataclass_from_dict(cfg_class, values, owner)


@dataclasses.dataclass(kw_only=True)
class MarlCfg(MultiAgentCfg):
    """Base of the package's configs: skrl's ``MultiAgentCfg`` with a per-agent ``expand`` that has no holes.

    A field may be given one value for all agents, or a dict ``{agent_name: value}`` naming *every* agent.
    A dict whose keys are not agent names (an empty ``*_kwargs`` dict, say) is one value shared by all agents.
    """

    shared_fields: ClassVar[tuple[str, ...]] = ("experiment", "non_finite")
    """Fields that always hold one value for all agents (never expanded per agent)."""

    non_finite: str = "raise"
    """What to do with NaN or inf in rewards, observations or states (one value for all agents).

    ``"raise"`` (default): stop with an error naming the agent, the tensor and the step; nothing is learned from it.
    ``"skip"``: the affected (step, env, agent) samples are masked out of every loss and statistic, their values are
    zeroed in storage, and their number is tracked as ``Stats / Non-finite samples skipped``. On-policy agents check
    once per update; MADDPG checks each stored step.
    """

    def expand(self, *, possible_agents: list[str], immutable: list[str] | None = None) -> None:
        """Turn every per-agent field into a ``{agent_name: value}`` dict (in place).

        :param possible_agents: Agent names.
        :param immutable: Extra fields to leave as they are (skrl's signature).

        :raises ValueError: When a dict names some agents but not all, names unknown agents,
            or mixes agent names with other keys.
        """
        agents = set(possible_agents)
        skip = set(self.shared_fields) | set(immutable or [])
        for field in dataclasses.fields(self):
            if field.name in skip:
                continue
            value = getattr(self, field.name)
            if isinstance(value, dict) and value and set(value) & agents:
                keys = set(value)
                if keys == agents:
                    continue
                missing, unknown = sorted(agents - keys), sorted(keys - agents)
                if unknown:
                    raise ValueError(
                        f"cfg.{field.name}: keys {unknown} are not agents (possible agents: {sorted(agents)}). "
                        "Give a per-agent dict with exactly one entry per agent, or one value for all agents"
                    )
                raise ValueError(
                    f"cfg.{field.name}: the per-agent dict misses agents {missing}. "
                    "Give every agent a value, or one value for all agents"
                )
            setattr(self, field.name, {uid: copy.deepcopy(value) for uid in possible_agents})
        self._normalize_expanded(possible_agents)

    def _normalize_expanded(self, possible_agents: list[str]) -> None:
        """Hook for subclasses: normalise per-agent values after expansion (e.g. scalars into pairs)."""

    @classmethod
    def per_agent_fields(cls) -> list[str]:
        """The fields that may take a value per agent: all but :attr:`shared_fields`. Agents that form one group (one
        loss, one optimiser step) must agree on every one of them."""
        return [field.name for field in dataclasses.fields(cls) if field.name not in cls.shared_fields]

    def for_agent(self, uid: str) -> MarlCfg:
        """This config (after :meth:`expand`) with every per-agent field holding agent ``uid``'s value: the typed
        config of the group ``uid`` belongs to."""
        return dataclasses.replace(self, **{name: self.value_for(name, uid) for name in self.per_agent_fields()})

    def value_for(self, name: str, uid: str) -> Any:
        """The value of field ``name`` for agent ``uid`` (after :meth:`expand`)."""
        value = getattr(self, name)
        return value if name in self.shared_fields else value[uid]
