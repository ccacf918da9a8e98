"""skrl's tracking containers with a bound: what an agent tracks between two TensorBoard writes takes a fixed amount of
memory, however long the write interval.

skrl's agents append each tracked value to a list per tag (``agent.tracking_data``) and reduce each list to one scalar
at each write: ``min`` for a tag ending ``(min)``, ``max`` for ``(max)``, the mean otherwise. Between writes they hold
every value, about ten per env step, and skrl's ``write_interval: auto`` is the run's timesteps / 100: a run ten
times longer holds ten times more, a week-long run hundreds of MB. :class:`TrackingData` keeps skrl's lists, and a
list that reaches ``limit`` values is folded:

- a ``(min)`` or ``(max)`` tag to its one extreme value (exact: the extreme of all values is kept);
- another tag pairwise into means, each element then standing for twice as many values, and later values enter as
  means of groups of that size: the write's mean is that of every value but those of the last group, not yet complete
  (fewer than one value in ``limit / 2``).

Below ``limit`` values nothing changes (a test reading ``tracking_data[tag][-1]`` reads the last value).
"""

from __future__ import annotations

from typing import Any

TRACKING_LIMIT = 1024
"""Values a tag holds before it is folded."""


class TrackedValues(list):
    """The values of one tag: a list that folds itself at ``limit`` values (see the module docstring)."""

    def __init__(self, tag: str, limit: int = TRACKING_LIMIT) -> None:
        super().__init__()
        self.tag, self.limit = tag, max(2, limit - limit % 2)
        self._group, self._group_size = [], 1  # a mean tag's values not yet one element; values per element

    def append(self, value: Any) -> None:
        if self._group_size > 1:
            self._group.append(value)
            if len(self._group) < self._group_size:
                return
            value, self._group = sum(self._group) / self._group_size, []
        super().append(value)
        if len(self) >= self.limit:
            self._fold()

    def _fold(self) -> None:
        if self.tag.endswith("(min)"):
            self[:] = [min(self)]
        elif self.tag.endswith("(max)"):
            self[:] = [max(self)]
        else:  # pairwise means: each element then stands for twice as many values
            self[:] = [(self[i] + self[i + 1]) / 2 for i in range(0, len(self), 2)]
            self._group_size *= 2


class TrackingData(dict):
    """``agent.tracking_data`` as skrl's ``defaultdict(list)``, with :class:`TrackedValues` lists."""

    def __init__(self, limit: int = TRACKING_LIMIT) -> None:
        super().__init__()
        self.limit = limit

    def __missing__(self, tag: str) -> TrackedValues:
        return self.setdefault(tag, TrackedValues(tag, self.limit))
