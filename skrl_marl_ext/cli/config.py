"""The Runner config of a ``train`` run: the default or ``--config`` YAML, ``SECTION.KEY=VALUE`` overrides, env
arguments, and what the options set on top (seed, shared models, ``--rnn``, experiment folder, trainer)."""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
from importlib import resources
from typing import Any

from skrl_marl_ext import distributed
from skrl_marl_ext.checks.configs import brief, check_size, check_value, closest, did_you_mean, shown, yaml_float
from skrl_marl_ext.cli.errors import UsageError
from skrl_marl_ext.cli.parser import DEFAULT_TIMESTEPS

CONFIG_SECTIONS = ("agent", "models", "memory", "trainer")
"""Sections of a Runner config that ``SECTION.KEY=VALUE`` overrides reach."""


def check_algorithm(algo: str) -> None:
    """Raise :class:`UsageError` unless ``algo`` is one of ours and importable (MADDPG is imported only here)."""
    from skrl_marl_ext.runner import ALGORITHM_NAMES, load_algorithm

    if algo not in ALGORITHM_NAMES:
        raise UsageError(
            f"--algo {algo}: unknown algorithm.{did_you_mean(algo, ALGORITHM_NAMES)} Choose one of "
            f"{', '.join(ALGORITHM_NAMES)}"
        )
    try:
        load_algorithm(algo)
    except ValueError as e:
        raise UsageError(f"--algo {algo}: {e}") from None


def default_config(algo: str) -> dict[str, Any]:
    """The package's default Runner config for ``algo`` (``skrl_marl_ext/configs/<algo>.yaml``)."""
    import yaml

    text = resources.files("skrl_marl_ext").joinpath("configs", f"{algo}.yaml").read_text()
    return yaml.safe_load(text)


def shipped_configs() -> list[str]:
    """Names of the Runner configs in ``skrl_marl_ext/configs`` (``happo_mamujoco``, ...), as ``--config`` takes them."""
    folder = resources.files("skrl_marl_ext").joinpath("configs")
    return sorted(item.name.removesuffix(".yaml") for item in folder.iterdir() if item.name.endswith(".yaml"))


def load_config(path: str) -> dict[str, Any]:
    """Read a Runner YAML file, or the package's config of that name (``happo_mamujoco``) where no such file exists;
    raise :class:`UsageError` naming the file and the problem (unreadable, not UTF-8, not YAML, too big once its
    aliases are expanded, not a Runner config)."""
    import yaml

    if not os.path.isfile(path):
        name = path.removesuffix(".yaml")
        if name not in shipped_configs():
            raise UsageError(
                f"--config {path}: no such file, nor a config of the package.{did_you_mean(name, shipped_configs())} "
                f"The package's: {', '.join(shipped_configs())}"
            )
        text = resources.files("skrl_marl_ext").joinpath("configs", f"{name}.yaml").read_text()
        return yaml.safe_load(text)
    try:
        with open(path, "rb") as file:
            cfg = yaml.safe_load(file)  # bytes: YAML's own encodings (UTF-8, or UTF-16 with its mark)
    except OSError as e:
        raise UsageError(f"--config {path}: cannot be read ({e.strerror or e})") from None
    except yaml.reader.ReaderError as e:  # a byte that is not UTF-8, or a control character
        if e.encoding == "unicode":  # PyYAML's mark of a character YAML does not allow
            what = f"the control character U+{e.character:04X} at character {e.position} is not allowed in YAML"
            raise UsageError(f"--config {path}: {what}; remove it (is it a text file?)") from None
        what = f"not UTF-8 text (byte 0x{e.character:02x} at offset {e.position})"
        raise UsageError(f"--config {path}: {what}; save it as UTF-8") from None
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise UsageError(f"--config {path}: nested too deeply to read; a config nests a few levels") from None
    try:
        check_size("", cfg)
    except ValueError as e:
        raise UsageError(f"--config {path}: {e}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("agent"), dict):
        raise UsageError(f"--config {path}: expected skrl Runner sections (models, memory, agent, trainer)")
    return cfg


# ---------------------------------------------------------------------------------------------------- values


def _floats(value: Any) -> Any:
    """``value`` with strings such as ``1e-3`` (which YAML 1.1 reads as strings) turned into floats, nested too."""
    if isinstance(value, str):
        return yaml_float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value


def parse_value(text: str, *, item: str, name: str) -> Any:
    """A command-line value read as YAML (``true``, ``[256,256]``, ``{a: 1}``; ``1e-3`` is a float too).

    :param text: The text after ``=``.
    :param item: The argument as an error names it (``'agent.rollouts=64'``).
    :param name: The key it sets (``agent.rollouts``).

    :raises UsageError: When ``text`` is not YAML, or holds too much once its aliases are expanded.
    """
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"{item}: the value is not valid YAML ({str(e).splitlines()[0]}); quote it") from None
    except RecursionError:
        raise UsageError(f"{item}: the value is nested too deeply to read; a config nests a few levels") from None
    try:
        check_size(name, value)  # before anything expands its aliases
    except ValueError as e:
        raise UsageError(f"{item}: {e}") from None
    return _floats(value)


def parse_env_args(items: list[str]) -> dict[str, Any]:
    """``["N=3", "continuous_actions=true"]`` -> ``{"N": 3, "continuous_actions": True}`` (values read as YAML)."""
    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg {brief(item)}: write KEY=VALUE, e.g. --env-arg max_cycles=25")
        kwargs[key] = parse_value(value, item=f"--env-arg {brief(item)}", name=key)
    return kwargs


# ---------------------------------------------------------------------------------------------------- overrides


def _places(key: str, *, close: bool) -> list[str]:
    """Where a Runner config takes ``key`` (``agent.learning_rate``, ``trainer.timesteps``...); with ``close``, where
    it takes the closest key when none is ``key``."""
    from skrl_marl_ext.checks.configs import places_of
    from skrl_marl_ext.runner import ALGORITHM_NAMES, MODELS, load_algorithm

    cfg_classes = []
    for name in ALGORITHM_NAMES:
        with contextlib.suppress(ValueError):  # MADDPG may be missing from the installation
            cfg_classes.append(load_algorithm(name)[1])
    models = {name: owner for name, (_, owner) in MODELS.items()}
    return places_of(key, cfg_classes=cfg_classes, models=models, close=close)


def _corrected(head: str) -> list[str]:
    """``head`` (``SECTION.KEY`` as typed) with its section put right: the sections that take its first part as a key
    (``learning_rate`` -> ``agent.learning_rate``), else the closest section, else the sections of the closest key;
    empty when there is no guess."""
    first, dot, rest = head.partition(".")
    exact = [] if first in CONFIG_SECTIONS else _places(first, close=False)
    close = closest(first, CONFIG_SECTIONS)
    if close and not exact:
        return [f"{close}{dot}{rest}"]
    return [f"{place}{dot}{rest}" for place in exact or _places(first, close=True)]


def _guess(heads: list[str], value: str) -> str:
    """`` Did you mean 'a=VALUE' or 'b=VALUE'?`` (empty without a guess)."""
    return f" Did you mean {' or '.join(repr(f'{head}={value}') for head in heads)}?" if heads else ""


def _override_hint(item: str) -> str:
    """Why ``item`` is not an override, with the override it may have meant."""
    head, sep, tail = item.partition(":") if "=" not in item else item.partition("=")
    guess = _guess(_corrected(head.strip()), tail if sep else "VALUE")
    return f"'{item}': not a config override; write SECTION.KEY=VALUE, e.g. agent.learning_rate=1e-3.{guess}"


def _section_hint(item: str, path: tuple[str, ...], text: str) -> str:
    """Why ``item`` names no section: a key without its section (``learning_rate=1e-3``, which is
    ``agent.learning_rate=1e-3``) or a misspelt section (``agnet.``)."""
    sections = f"Sections: {', '.join(CONFIG_SECTIONS)}"
    if not _places(path[0], close=False) and closest(path[0], CONFIG_SECTIONS):
        return f"'{item}': unknown config section '{path[0]}'.{did_you_mean(path[0], CONFIG_SECTIONS)} {sections}"
    guess = _guess(_corrected(".".join(path)), text)
    return f"'{item}': '{path[0]}' is not a config section; an override names the section of its key.{guess} {sections}"


def parse_overrides(items: list[str]) -> list[tuple[str, tuple[str, ...], Any]]:
    """``["agent.learning_rate=1e-3"]`` -> ``[(item, ("agent", "learning_rate"), 0.001)]``.

    :param items: ``SECTION.KEY=VALUE`` arguments; ``KEY`` may be dotted (``models.policy.hidden_sizes``).

    :raises UsageError: On an item without ``=`` or without a key inside the section, or an unknown section (the
        message names the closest one, or the section that has the key: ``learning_rate=1e-3`` suggests
        ``agent.learning_rate=1e-3``).
    """
    overrides = []
    for item in items:
        key, sep, text = item.partition("=")
        path = tuple(part.strip() for part in key.split("."))
        if not sep or not all(path):
            raise UsageError(_override_hint(item))
        if path[0] not in CONFIG_SECTIONS:
            raise UsageError(_section_hint(item, path, text))
        if len(path) < 2:
            raise UsageError(f"'{item}': name a key inside {path[0]}, e.g. {path[0]}.KEY=VALUE")
        overrides.append((item, path, parse_value(text, item=brief(item), name=".".join(path))))
    return overrides


def apply_overrides(cfg: dict[str, Any], overrides: list[tuple[str, tuple[str, ...], Any]]) -> dict[str, Any]:
    """A copy of ``cfg`` with each override's value set at its dotted path (missing sections are created).

    :param cfg: A Runner config.
    :param overrides: As :func:`parse_overrides` returns them.

    :raises UsageError: On a path through a value that is not a section (``agent.learning_rate.x``), into a model
        the config does not have (``models.polcy.hidden_sizes``: the message names the closest), or on
        ``agent.class`` (``--algo`` chooses the algorithm).
    """
    cfg = copy.deepcopy(cfg)
    for item, path, value in overrides:
        if path == ("agent", "class"):
            raise UsageError(f"'{item}': choose the algorithm with --algo (or --config), not with agent.class")
        node = cfg
        for depth, key in enumerate(path[:-1]):
            child = node.get(key)
            if path[0] == "models" and depth == 1 and not isinstance(child, dict):
                roles = [role for role, section in node.items() if isinstance(section, dict)]
                raise UsageError(
                    f"'{item}': the config has no model '{key}'.{did_you_mean(key, roles)} "
                    f"Models: {', '.join(roles) or 'none'}"
                )
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise UsageError(f"'{item}': {where} is {shown(child)} in the config, not a section with keys")
            node = child
        node[path[-1]] = value
    return cfg


# ---------------------------------------------------------------------------------------------------- a new run


def train_config(args: argparse.Namespace) -> tuple[str, dict[str, Any], int]:
    """``(algo, config with the overrides applied, timesteps)`` from ``--algo``, ``--config``, the overrides."""
    overrides = parse_overrides(args.overrides)
    cfg = load_config(args.config) if args.config else None
    algo = str(args.algo or (cfg["agent"].get("class") if cfg else "mappo")).lower()
    check_algorithm(algo)
    if cfg is None:
        cfg = default_config(algo)
    elif str(cfg["agent"].get("class", "")).lower() != algo:
        raise UsageError(f"--algo {algo} but --config has agent.class {cfg['agent'].get('class')}; drop one of them")
    cfg = apply_overrides(cfg, overrides)
    trainer = cfg.get("trainer") if isinstance(cfg.get("trainer"), dict) else {}
    timesteps = args.timesteps or trainer.get("timesteps") or DEFAULT_TIMESTEPS
    try:
        check_value("trainer.timesteps", timesteps, int)
    except ValueError as e:
        raise UsageError(f"config: {e}") from None
    if args.num_envs < 1 or timesteps < 1:
        raise UsageError("--num-envs and --timesteps must be positive")
    return algo, cfg, timesteps


def runner_config(cfg: dict[str, Any], args: argparse.Namespace, *, run_name: str, timesteps: int) -> dict:
    """``cfg`` with what the options set: seed (``seed + rank``), shared models, experiment directory, trainer."""
    cfg = copy.deepcopy(cfg)
    cfg["seed"] = args.seed + distributed.rank()
    cfg["models"] = cfg.get("models") or {}
    if args.shared_policy:
        cfg["models"]["share_across_agents"] = True
    if getattr(args, "rnn", None):
        _recurrent_models(cfg, args.rnn, args.sequence_length)
    experiment = cfg["agent"].get("experiment") or {}
    experiment.update({"directory": os.path.abspath(args.out), "experiment_name": run_name})
    cfg["agent"]["experiment"] = experiment
    cfg["trainer"] = {**(cfg.get("trainer") or {}), "timesteps": timesteps, "headless": True}
    cfg["trainer"]["disable_progressbar"] = bool(args.no_progress) or distributed.rank() > 0
    return cfg


def _recurrent_models(cfg: dict[str, Any], cell: str, sequence_length: int) -> None:
    """``--rnn``: the policy and value models become :class:`~skrl_marl_ext.models.GaussianRNN` /
    ``CategoricalRNN`` and ``ValueRNN`` with ``cell``, keeping their sections' other keys (head sizes, activation)."""
    algo = str(cfg["agent"].get("class", "")).lower()
    if algo not in ("mappo", "ippo", "happo"):
        raise UsageError(f"--rnn works with mappo, ippo and happo, not {algo}")
    rollouts = int(cfg["agent"].get("rollouts", 16))
    if sequence_length < 1 or rollouts % sequence_length:
        raise UsageError(
            f"--sequence-length {sequence_length} must divide agent.rollouts ({rollouts}); pass another length or "
            f"agent.rollouts=<a multiple of {sequence_length}>"
        )
    for role, name in (("policy", "PolicyRNN"), ("value", "ValueRNN")):
        section = dict(cfg["models"].get(role) or {})
        section.update({"class": name, "cell": cell, "sequence_length": sequence_length})
        section["hidden_sizes"] = list(section.get("hidden_sizes") or [64])[-1:]  # the head after the RNN
        section.setdefault("hidden_size", 64 if not section["hidden_sizes"] else int(section["hidden_sizes"][0]))
        cfg["models"][role] = section
