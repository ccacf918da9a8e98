"""Checks of single config values, each failing with one line that names the field and what it takes."""

from __future__ import annotations

from typing import Any


def check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise a ValueError naming ``name`` when ``value`` is not one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{owner}: cfg.{name} must be one of {list(choices)}, got {value!r}")


def check_range(owner: str, name: str, value: Any, *, low=None, high=None, low_open=False) -> None:
    """Raise a ValueError naming ``name`` when ``value`` is not a number within the given bounds."""
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        v_list = v if isinstance(v, (tuple, list)) else [v]
        for item in v_list:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ValueError(f"{owner}: cfg.{name} must be a number, got {item!r}")
            too_low = low is not None and (item <= low if low_open else item < low)
            too_high = high is not None and item > high
            if too_low or too_high:
                bound = f"{'>' if low_open else '>='} {low}" if low is not None else ""
                if high is not None:
                    bound += (" and " if bound else "") + f"<= {high}"
                raise ValueError(f"{owner}: cfg.{name} must be {bound}, got {item!r}")
