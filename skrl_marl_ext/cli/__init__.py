"""The ``skrl-marl`` command (also ``python -m skrl_marl_ext``): train and evaluate with skrl's trainer.

``skrl-marl train`` builds an env from a spec (``vmas:balance`` by default), the agent from a YAML config in skrl's
Runner format (the package's default for ``--algo``, or ``--config``), trains with skrl's ``SequentialTrainer``
(tqdm progress bar, TensorBoard logs and checkpoints in the run directory), then writes ``run.json`` (what ``eval``
needs to rebuild env and agent), ``episodes.csv`` (every finished episode's return per agent) and
``learning_curve.png``. ``skrl-marl train --resume RUN_DIR`` continues such a run from its newest checkpoint, with
the run's own config, into the same folder. ``skrl-marl eval --checkpoint PATH`` runs deterministic episodes and prints
the returns.

``SECTION.KEY=VALUE`` arguments after the options of ``train`` override the config, as BenchMARL and Hydra users
type them (``agent.learning_rate=1e-3 models.policy.hidden_sizes=[256,256]``, values read as YAML).

Under ``torchrun`` (``WORLD_SIZE > 1``) ``train`` creates the process group itself before skrl is imported (gloo on
CPU; NCCL on CUDA, each rank on ``cuda:LOCAL_RANK``), seeds rank ``r`` with ``seed + r``, lets rank 0 alone write the
run directory and print the summary, and checks at the end that every rank holds the same parameters. So this module
imports skrl only inside functions, after that setup (and ``import skrl_marl_ext`` imports it only on first use).

Bad input (unknown algo, env, scenario, a missing extra, a bad override) ends with one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import difflib
import importlib
import inspect
import json
import os
import re
import sys
import time
from importlib import resources
from typing import Any

import torch

from skrl_marl_ext import distributed

DEFAULT_ENV = "vmas:balance"
DEFAULT_NUM_ENVS = 128
DEFAULT_TIMESTEPS = 4000  # env steps of every env: 128 x 4000 = 512k frames, 2-3 min on 2 CPU cores
RUN_FILE = "run.json"
FINAL_CHECKPOINT = "final.pt"
MAX_EVAL_STEPS = 100_000
CONFIG_SECTIONS = ("agent", "models", "memory", "trainer")
"""Sections of a Runner config that ``SECTION.KEY=VALUE`` overrides reach."""

THREADS_HELP = (
    "CPU threads of torch; 0 keeps torch's own default (default: %(default)s, as batched envs and small MLPs gain "
    "little from more, and on a busy machine extra threads spin-wait on each other)"
)
OVERRIDES_HELP = (
    "config overrides after the options, applied on top of the default or --config YAML: a dotted key inside one of "
    "the sections agent, models, memory, trainer, and a value read as YAML, e.g. agent.learning_rate=1e-3 "
    "agent.mixed_precision=true models.policy.hidden_sizes=[256,256] (quote it for your shell) "
    "agent.experiment.write_interval=50; recorded in run.json (default: none, the config as it is)"
)


class UsageError(Exception):
    """Bad input from the command line: reported as one line, not a traceback."""


class RanksDisagree(Exception):
    """The ranks of a distributed run ended with different parameters (exit status 1)."""


def _did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def _check_algorithm(algo: str) -> None:
    """Raise :class:`UsageError` unless ``algo`` is one of ours and importable (MADDPG is imported only here)."""
    from skrl_marl_ext.runner import ALGORITHM_NAMES, load_algorithm

    if algo not in ALGORITHM_NAMES:
        raise UsageError(f"--algo {algo}: unknown algorithm; choose one of {', '.join(ALGORITHM_NAMES)}")
    try:
        load_algorithm(algo)
    except ValueError as e:
        raise UsageError(f"--algo {algo}: {e}") from None


# ---------------------------------------------------------------------------------------------------- config


def default_config(algo: str) -> dict[str, Any]:
    """The package's default Runner config for ``algo`` (``skrl_marl_ext/configs/<algo>.yaml``)."""
    import yaml

    text = resources.files("skrl_marl_ext").joinpath("configs", f"{algo}.yaml").read_text()
    return yaml.safe_load(text)


def load_config(path: str) -> dict[str, Any]:
    """Read a Runner YAML file; raise :class:`UsageError` naming the problem."""
    import yaml

    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: no such file")
    try:
        with open(path) as file:
            cfg = yaml.safe_load(file)
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "agent" not in cfg:
        raise UsageError(f"--config {path}: expected skrl Runner sections (models, memory, agent, trainer)")
    return cfg


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _floats(value: Any) -> Any:
    """``value`` with strings such as ``1e-3`` (which YAML 1.1 reads as strings) turned into floats, nested too."""
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value


def parse_value(text: str, *, item: str) -> Any:
    """A command-line value read as YAML (``true``, ``[256,256]``, ``{a: 1}``; ``1e-3`` is a float too).

    :param text: The text after ``=``.
    :param item: The whole argument, named in the error.

    :raises UsageError: When ``text`` is not YAML.
    """
    import yaml

    try:
        return _floats(yaml.safe_load(text))
    except yaml.YAMLError as e:
        raise UsageError(f"'{item}': the value is not valid YAML ({str(e).splitlines()[0]}); quote it") from None


def parse_env_args(items: list[str]) -> dict[str, Any]:
    """``["N=3", "continuous_actions=true"]`` -> ``{"N": 3, "continuous_actions": True}`` (values read as YAML)."""
    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg '{item}': write KEY=VALUE, e.g. --env-arg max_cycles=25")
        kwargs[key] = parse_value(value, item=item)
    return kwargs


def _override_hint(item: str) -> str:
    """Why ``item`` is not an override, with the override it may have meant."""
    head, sep, tail = item.partition(":") if "=" not in item else item.partition("=")
    section = head.split(".")[0]
    close = difflib.get_close_matches(section, CONFIG_SECTIONS, n=1)
    guess = f" Did you mean '{close[0]}{head[len(section) :]}={tail if sep else 'VALUE'}'?" if close else ""
    return f"'{item}': not a config override; write SECTION.KEY=VALUE, e.g. agent.learning_rate=1e-3.{guess}"


def parse_overrides(items: list[str]) -> list[tuple[str, tuple[str, ...], Any]]:
    """``["agent.learning_rate=1e-3"]`` -> ``[(item, ("agent", "learning_rate"), 0.001)]``.

    :param items: ``SECTION.KEY=VALUE`` arguments; ``KEY`` may be dotted (``models.policy.hidden_sizes``).

    :raises UsageError: On an item without ``=`` or without a key inside the section, or an unknown section (the
        message names the closest one).
    """
    overrides = []
    for item in items:
        key, sep, text = item.partition("=")
        path = tuple(part.strip() for part in key.split("."))
        if not sep or not all(path):
            raise UsageError(_override_hint(item))
        if path[0] not in CONFIG_SECTIONS:
            raise UsageError(
                f"'{item}': unknown config section '{path[0]}'.{_did_you_mean(path[0], CONFIG_SECTIONS)} "
                f"Sections: {', '.join(CONFIG_SECTIONS)}"
            )
        if len(path) < 2:
            raise UsageError(f"'{item}': name a key inside {path[0]}, e.g. {path[0]}.KEY=VALUE")
        overrides.append((item, path, parse_value(text, item=item)))
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
                    f"'{item}': the config has no model '{key}'.{_did_you_mean(key, roles)} "
                    f"Models: {', '.join(roles) or 'none'}"
                )
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise UsageError(f"'{item}': {where} is {child!r} in the config, not a section with keys")
            node = child
        node[path[-1]] = value
    return cfg


def _check_device(device: str) -> None:
    """Raise :class:`UsageError` unless ``device`` is a torch device that exists here."""
    try:
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available here; use --device cpu")
    except RuntimeError:
        raise UsageError(f"--device {device}: not a torch device (cpu, cuda, cuda:1, ...)") from None


def build_env(spec: str, *, num_envs: int, device: str, seed: int | None, env_kwargs: dict[str, Any]):
    """:func:`skrl_marl_ext.envs.make_env` behind an :class:`EpisodeRecorder`; bad specs become :class:`UsageError`."""
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    _check_device(device)
    try:
        env = make_env(spec, num_envs=num_envs, device=device, seed=seed, **env_kwargs)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--env {spec}: {e}") from None
    except TypeError as e:  # an env argument the env does not take
        raise UsageError(f"--env {spec}: {e}; check --env-arg") from None
    return EpisodeRecorder(env)


def build_runner(env, cfg: dict[str, Any]):
    """Our :class:`~skrl_marl_ext.runner.Runner`; config mistakes become :class:`UsageError`."""
    from skrl_marl_ext.runner import Runner

    algo = str(cfg["agent"].get("class", "")).lower()
    if algo == "mappo" and any(space is None for space in env.state_spaces.values()):
        raise UsageError("MAPPO needs a global state and this env has none: use --algo ippo")
    try:
        return Runner(env, cfg)
    except (ValueError, KeyError) as e:
        raise UsageError(f"config: {e}") from None
    except TypeError as e:
        raise UsageError(f"config: {_explain_type_error(e, cfg, algo)}") from None


_UNEXPECTED_ARGUMENT = re.compile(r"(?P<owner>[\w.]+)\(\) got an unexpected keyword argument '(?P<key>\w+)'")
_FILLED_BY_RUNNER = {"self", "observation_space", "state_space", "action_space", "device", "num_envs"}


def _explain_type_error(error: TypeError, cfg: dict[str, Any], algo: str) -> str:
    """A key that a class of the config does not take, said as the config says it, with the closest name.

    skrl's Runner passes each section to a class as keyword arguments, so a wrong key surfaces as ``X() got an
    unexpected keyword argument 'k'``: for the agent section it becomes the agents' own did-you-mean error, for a
    model, memory or trainer section ``models.policy.k: GaussianMLP takes no argument 'k'. Did you mean ...?``.
    """
    match = _UNEXPECTED_ARGUMENT.search(str(error))
    if match is None:
        return str(error)
    owner, key = match["owner"].removesuffix(".__init__"), match["key"]
    from skrl_marl_ext.runner import load_algorithm

    agent_class, cfg_class = load_algorithm(algo)  # build_runner's Runner has checked the name
    if owner == cfg_class.__name__:
        from skrl_marl_ext.agents.config import build_cfg

        try:
            build_cfg(cfg_class, {key: None}, owner=agent_class.__name__)
        except ValueError as e:
            return str(e)
    places = [f"models.{role}" for role, section in (cfg.get("models") or {}).items() if _has_key(section, key)]
    places += [name for name in ("memory", "trainer") if _has_key(cfg.get(name), key)]
    known = _arguments(owner)
    where = " / ".join(f"{place}.{key}" for place in places) or key
    hint = f"{_did_you_mean(key, known)} Its arguments: {', '.join(known)}" if known else ""
    return f"{where}: {owner} takes no argument '{key}'.{hint}"


def _has_key(section: Any, key: str) -> bool:
    return isinstance(section, dict) and key in section


_ARGUMENT_OWNERS = (
    "skrl_marl_ext.models",
    "skrl.utils.model_instantiators.torch",
    "skrl.memories.torch",
    "skrl.trainers.torch",
)
"""Where the classes (and skrl's model instantiator functions) that a Runner config's sections name are found."""


def _arguments(name: str) -> list[str]:
    """Keyword arguments of the model, memory or trainer config class ``name`` (empty when it is not found)."""
    modules = (importlib.import_module(module) for module in _ARGUMENT_OWNERS)
    owner = next((getattr(module, name) for module in modules if hasattr(module, name)), None)
    if owner is None:
        return []
    if dataclasses.is_dataclass(owner):
        return sorted(f.name for f in dataclasses.fields(owner))
    try:
        parameters = inspect.signature(owner).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a callable without a signature
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return sorted(p.name for p in parameters if p.kind in kinds and p.name not in _FILLED_BY_RUNNER)


# ---------------------------------------------------------------------------------------------------- outputs


def write_episodes(episodes: list[tuple[int, dict[str, float]]], num_envs: int, path: str) -> None:
    """Write ``step, frames, <agent>...`` rows, one per finished episode."""
    agents = list(episodes[0][1]) if episodes else []
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["step", "frames", *agents])
        for step, returns in episodes:
            writer.writerow([step, step * num_envs, *(f"{returns[uid]:.6g}" for uid in agents)])


def plot_learning_curve(
    episodes: list[tuple[int, dict[str, float]]], *, num_envs: int, path: str, title: str, bins: int = 50
) -> None:
    """Plot the mean episode return (mean over agents) against env frames, in ``bins`` equal step windows.

    :param episodes: ``(step, {agent: return})`` as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them.
    :param num_envs: Envs per step (frames = step * num_envs).
    :param path: PNG file to write.
    :param title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if episodes:
        steps = torch.tensor([step for step, _ in episodes], dtype=torch.float64)
        agents = list(episodes[0][1])
        returns = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
        edges = torch.linspace(0, float(steps.max()), bins + 1)
        which = torch.bucketize(steps, edges[1:-1], right=True)
        xs, means, per_agent = [], [], []
        for b in range(bins):
            rows = returns[which == b]
            if len(rows):
                xs.append(float(edges[b + 1]) * num_envs)
                per_agent.append(rows.mean(dim=0))
                means.append(float(rows.mean()))
        per_agent = torch.stack(per_agent)
        for i, uid in enumerate(agents):
            ax.plot(xs, per_agent[:, i].tolist(), linewidth=0.8, alpha=0.4, label=uid)
        ax.plot(xs, means, color="black", linewidth=2.0, label="mean over agents")
        ax.legend(fontsize=8)
    ax.set_xlabel("env frames (steps x envs)")
    ax.set_ylabel("episode return per agent")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _return_stats(episodes: list[tuple[int, dict[str, float]]]) -> dict[str, tuple[float, float]]:
    """``{agent or "team": (mean, std)}`` over episodes; the team return is the sum of the agents' returns."""
    agents = list(episodes[0][1])
    table = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
    columns = {uid: table[:, i] for i, uid in enumerate(agents)}
    columns["team"] = table.sum(dim=1)
    return {key: (float(c.mean()), float(c.std(unbiased=False))) for key, c in columns.items()}


def _mean_return(episodes: list[tuple[int, dict[str, float]]]) -> float:
    """Mean over episodes of the mean over agents of the episode return (nan without episodes)."""
    if not episodes:
        return float("nan")
    return sum(sum(r.values()) / len(r) for _, r in episodes) / len(episodes)


# ---------------------------------------------------------------------------------------------------- train


def _run_name(algo: str, env_spec: str) -> str:
    return f"{time.strftime('%y-%m-%d_%H-%M-%S')}_{algo}_{re.sub(r'[^A-Za-z0-9]+', '-', env_spec).strip('-')}"


def _train_config(args: argparse.Namespace) -> tuple[str, dict[str, Any], int]:
    """``(algo, config with the overrides applied, timesteps)`` from ``--algo``, ``--config``, the overrides."""
    overrides = parse_overrides(args.overrides)
    cfg = load_config(args.config) if args.config else None
    algo = str(args.algo or (cfg["agent"].get("class") if cfg else "mappo")).lower()
    _check_algorithm(algo)
    if cfg is None:
        cfg = default_config(algo)
    elif str(cfg["agent"].get("class", "")).lower() != algo:
        raise UsageError(f"--algo {algo} but --config has agent.class {cfg['agent'].get('class')}; drop one of them")
    cfg = apply_overrides(cfg, overrides)
    timesteps = args.timesteps or (cfg.get("trainer") or {}).get("timesteps") or DEFAULT_TIMESTEPS
    if args.num_envs < 1 or timesteps < 1:
        raise UsageError("--num-envs and --timesteps must be positive")
    return algo, cfg, timesteps


def _runner_config(cfg: dict[str, Any], args: argparse.Namespace, *, run_name: str, timesteps: int) -> dict:
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
    if algo not in ("mappo", "ippo"):
        raise UsageError(f"--rnn works with mappo and ippo, not {algo}")
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


RESUME_CONFLICTS = {
    "algo": "--algo",
    "env": "--env",
    "env_arg": "--env-arg",
    "num_envs": "--num-envs",
    "timesteps": "--timesteps",
    "seed": "--seed",
    "config": "--config",
    "shared_policy": "--shared-policy",
    "rnn": "--rnn",
    "sequence_length": "--sequence-length",
    "out": "--out",
    "overrides": "SECTION.KEY=VALUE overrides",
}
"""``train`` options that the run's ``run.json`` fixes (argparse name -> as typed): given with ``--resume`` they must
agree with the run's."""


def train(args: argparse.Namespace) -> dict[str, Any]:
    """``skrl-marl train``: returns the paths written (also printed as one summary line, by rank 0).

    With ``--resume RUN_DIR`` the run in ``RUN_DIR`` goes on from its newest checkpoint (see :func:`_resume_point`).

    :raises RanksDisagree: When the ranks of a distributed run end with different parameters.
    """
    rank, world = distributed.rank(), distributed.world_size()
    if args.resume:
        run, run_dir, checkpoint, done = _resume_point(args)
        steps = run["timesteps"] - done
        cfg = _resumed_config(run["config"], args, run_dir=run_dir, steps=steps, seed=run["seed"])
        device = args.device if "device" in _given(args) else run["device"]
    else:
        algo, cfg, timesteps = _train_config(args)
        run = {"algo": algo, "env": args.env, "env_kwargs": parse_env_args(args.env_arg), "num_envs": args.num_envs}
        run_name = distributed.broadcast_object(_run_name(algo, args.env))
        run_dir = os.path.abspath(os.path.join(args.out, run_name))
        checkpoint, done, steps, device = None, 0, timesteps, args.device
        cfg = _runner_config(cfg, args, run_name=run_name, timesteps=timesteps)
    env_device = distributed.torchrun_device(device)
    env = build_env(
        run["env"], num_envs=run["num_envs"], device=env_device, seed=cfg["seed"], env_kwargs=run["env_kwargs"]
    )
    runner = build_runner(env, cfg)
    if checkpoint is not None:
        try:
            runner.agent.load(checkpoint)
        except ValueError as e:
            raise UsageError(f"--resume {args.resume}: {e}") from None

    start = time.perf_counter()
    runner.run("train")
    seconds = time.perf_counter() - start

    checksums = distributed.gather_checksums(_unique_models(runner.agent))  # every rank takes part
    agree = bool((checksums == checksums[0]).all())
    result = {"run_dir": run_dir, "ranks": world, "ranks_agree": agree}
    if rank == 0:
        if checkpoint is None:
            run.update(
                device=args.device,
                seed=args.seed,
                timesteps=steps,
                ranks=world,
                overrides=list(args.overrides),
                train_seconds=round(seconds, 2),
                config=cfg,
            )
            episodes = env.episodes
        else:  # the episodes up to the checkpoint, then this part's (its steps counted from the checkpoint's)
            run["train_seconds"] = round(run.get("train_seconds", 0.0) + seconds, 2)
            run.setdefault("resumed", []).append({"from_step": done, "checkpoint": checkpoint, "device": device})
            episodes = [(step, r) for step, r in _read_episodes(run_dir) if step <= done]
            episodes += [(done + step, r) for step, r in env.episodes]
        result.update(_write_run(runner.agent, run, run_dir, episodes))
        ranks = "" if world == 1 else f"; {world} ranks, parameters identical"
        if not agree:
            ranks = f"; {world} ranks, error: parameters differ across ranks (checksums {checksums.tolist()})"
        frames = steps * run["num_envs"] * world
        print(_train_summary(run, result, episodes, frames=frames, seconds=seconds, resumed_from=done) + ranks)
    if not agree:
        raise RanksDisagree(f"the {world} ranks ended with different parameters")
    return result


def _given(args: argparse.Namespace) -> set[str]:
    """The ``train`` options typed on the command line (argparse names), as :func:`main` found them."""
    return set(getattr(args, "given", ()))


def _resume_point(args: argparse.Namespace) -> tuple[dict[str, Any], str, str, int]:
    """``(run.json, run_dir, checkpoint, steps it completed)`` of ``--resume RUN_DIR``: the newest checkpoint is
    ``checkpoints/agent_<T>.pt`` with the largest ``T``, or ``final.pt`` when it holds more steps.

    :raises UsageError: When ``RUN_DIR`` is not a run of ``train``, has no checkpoint, has run all its steps, or an
        option given with ``--resume`` disagrees with the run's own (naming the option).
    """
    run_dir = os.path.abspath(args.resume)
    run_file = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(run_file):
        raise UsageError(f"--resume {args.resume}: expected a run directory of 'skrl-marl train' (with {RUN_FILE})")
    with open(run_file) as file:
        run = json.load(file)
    own = {
        "algo": run["algo"],
        "env": run["env"],
        "env_arg": run["env_kwargs"],
        "num_envs": run["num_envs"],
        "timesteps": run["timesteps"],
        "seed": run["seed"],
        "overrides": run["overrides"],
    }
    for name in sorted(_given(args) & set(RESUME_CONFLICTS)):
        value = getattr(args, name)
        if name == "env_arg":
            value = parse_env_args(value)
        if name == "algo" and isinstance(value, str):
            value = value.lower()
        if name not in own or value != own[name]:
            theirs = f" (the run's: {own[name]!r})" if name in own else ""
            raise UsageError(
                f"{RESUME_CONFLICTS[name]} {value!r} disagrees with the run being resumed{theirs}: --resume continues "
                f"the run with its own configuration from {RUN_FILE}; leave {RESUME_CONFLICTS[name]} out"
            )
    checkpoints = os.path.join(run_dir, "checkpoints")
    found = []
    for name in os.listdir(checkpoints) if os.path.isdir(checkpoints) else []:
        match = re.fullmatch(r"agent_(\d+)\.pt", name)
        if match:
            found.append((int(match[1]), os.path.join(checkpoints, name)))
    final = os.path.join(checkpoints, FINAL_CHECKPOINT)
    if os.path.isfile(final):
        found.append((_steps_completed(final), final))
    if not found:
        raise UsageError(f"--resume {args.resume}: no checkpoint in {checkpoints} to resume from")
    done, checkpoint = max(found)
    if done >= run["timesteps"]:
        raise UsageError(
            f"--resume {args.resume}: the run has completed its {run['timesteps']} steps ({checkpoint}); nothing to "
            "resume (start a new run to train longer)"
        )
    return run, run_dir, checkpoint, done


def _steps_completed(path: str) -> int:
    """The steps a checkpoint of ours had completed (its ``progress``; 0 for a file without it)."""
    from skrl_marl_ext.agents.checkpoint import read_checkpoint

    try:
        modules = read_checkpoint(path, map_location="cpu", owner="--resume")
    except ValueError as e:
        raise UsageError(str(e)) from None
    progress = [m.get("progress") for m in modules.values() if isinstance(m, dict)] if isinstance(modules, dict) else []
    return max((int(p.get("timestep", 0)) for p in progress if isinstance(p, dict)), default=0)


def _resumed_config(
    cfg: dict[str, Any], args: argparse.Namespace, *, run_dir: str, steps: int, seed: int
) -> dict[str, Any]:
    """The run's Runner config writing into ``run_dir`` (checkpoints and TensorBoard), for ``steps`` more steps, with
    the run's ``seed`` (``seed + rank``)."""
    cfg = copy.deepcopy(cfg)
    cfg["seed"] = seed + distributed.rank()
    experiment = cfg["agent"].get("experiment") or {}
    experiment.update({"directory": os.path.dirname(run_dir), "experiment_name": os.path.basename(run_dir)})
    cfg["agent"]["experiment"] = experiment
    cfg["trainer"] = {**(cfg.get("trainer") or {}), "timesteps": steps}
    cfg["trainer"]["disable_progressbar"] = bool(args.no_progress) or distributed.rank() > 0
    return cfg


def _read_episodes(run_dir: str) -> list[tuple[int, dict[str, float]]]:
    """The episodes of ``run_dir/episodes.csv`` as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them."""
    path = os.path.join(run_dir, "episodes.csv")
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    agents = lambda row: [k for k in row if k not in ("step", "frames")]  # noqa: E731
    return [(int(row["step"]), {uid: float(row[uid]) for uid in agents(row)}) for row in rows]


def _unique_models(agent) -> list[torch.nn.Module]:
    """The agent's models, each once (shared models stand in several agents' dicts), in agent and role order."""
    models = {id(m): m for uid in agent.possible_agents for m in agent.models[uid].values() if m is not None}
    return list(models.values())


def _write_run(agent, run: dict[str, Any], run_dir: str, episodes: list) -> dict[str, str]:
    """Write the final checkpoint, ``run.json``, ``episodes.csv`` and the learning curve of ``episodes``; return their
    paths."""
    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    agent.save(checkpoint)
    with open(os.path.join(run_dir, RUN_FILE), "w") as file:
        json.dump(run, file, indent=2, default=str)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    write_episodes(episodes, run["num_envs"], episodes_csv)
    plot = os.path.join(run_dir, "learning_curve.png")
    title = f"{run['algo'].upper()} on {run['env']} ({run['num_envs']} envs)"
    plot_learning_curve(episodes, num_envs=run["num_envs"], path=plot, title=title)
    return {"checkpoint": checkpoint, "plot": plot, "episodes": episodes_csv}


def _train_summary(
    run: dict[str, Any], paths: dict[str, Any], episodes: list, *, frames: int, seconds: float, resumed_from: int = 0
) -> str:
    """The summary line of ``train``; also puts ``first`` and ``final`` (mean returns) into ``paths``."""
    tenth = max(1, len(episodes) // 10)
    paths["first"], paths["final"] = _mean_return(episodes[:tenth]), _mean_return(episodes[-tenth:])
    returns = (
        f"mean episode return per agent, first 10% of episodes {paths['first']:.2f} -> last 10% {paths['final']:.2f}"
        if episodes
        else "no episode finished"
    )
    run_dir = paths["run_dir"]
    resumed = f", resumed from step {resumed_from} of {run['timesteps']}," if resumed_from else ""
    return (
        f"skrl-marl: trained {run['algo']} on {run['env']} for {frames} frames{resumed} in {seconds:.0f} s "
        f"({returns}); run: {run_dir} | checkpoint: {paths['checkpoint']} | plot: {paths['plot']} | "
        f"tensorboard --logdir {run_dir}"
    )


# ---------------------------------------------------------------------------------------------------- eval


def _load_run(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """``(run_dir, checkpoint, run.json)`` of ``eval --checkpoint`` (a run directory or a checkpoint in one)."""
    path = os.path.abspath(args.checkpoint)
    if os.path.isdir(path):
        run_dir, checkpoint = path, os.path.join(path, "checkpoints", FINAL_CHECKPOINT)
    else:
        run_dir, checkpoint = os.path.dirname(os.path.dirname(path)), path
    run_file = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(checkpoint) or not os.path.isfile(run_file):
        raise UsageError(
            f"--checkpoint {args.checkpoint}: expected a run directory of 'skrl-marl train' or a checkpoint in its "
            f"checkpoints/ folder (with {RUN_FILE} in the run directory)"
        )
    with open(run_file) as file:
        return run_dir, checkpoint, json.load(file)


def run_episodes(agent, env, episodes: int, *, max_steps: int = MAX_EVAL_STEPS) -> list[tuple[int, dict]]:
    """Step ``env`` (an :class:`~skrl_marl_ext.envs.EpisodeRecorder`) with the agent's deterministic actions until
    ``episodes`` episodes ended; return them (fewer only if ``max_steps`` ran out).

    Each step is :func:`skrl_marl_ext.trainers.interact` without learning; ``record_transition`` still runs, so the
    agent reads the next observations' action masks from the infos.

    :param agent: The agent, in evaluation mode.
    :param env: The env behind an ``EpisodeRecorder``.
    :param episodes: Episodes to run.
    :param max_steps: Steps at the most.
    """
    from skrl_marl_ext.trainers import interact

    observations, _ = env.reset()
    states = env.state()
    for step in range(max_steps):
        result = interact(
            agent, env, observations, states, timestep=step, timesteps=max_steps, learn=False, deterministic=True
        )
        observations, states = result.next_observations, result.next_states
        if len(env.episodes) >= episodes:
            break
    return env.episodes[:episodes]


def evaluate(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """``skrl-marl eval``: deterministic episodes; returns (and prints) ``{agent or "team": (mean, std)}``."""
    run_dir, checkpoint, run = _load_run(args)
    if args.episodes < 1:
        raise UsageError("--episodes must be positive")
    num_envs = args.num_envs or min(run["num_envs"], args.episodes)
    device = args.device or run["device"]
    env = build_env(run["env"], num_envs=num_envs, device=device, seed=args.seed, env_kwargs=run["env_kwargs"])
    cfg = copy.deepcopy(run["config"])
    cfg["seed"] = args.seed
    cfg["agent"]["experiment"] = {"directory": run_dir, "experiment_name": "eval", "write_interval": 0}
    cfg["agent"]["experiment"]["checkpoint_interval"] = 0
    cfg["trainer"].update({"timesteps": 1, "disable_progressbar": True})
    agent = build_runner(env, cfg).agent
    try:
        agent.load(checkpoint)
    except ValueError as e:  # a checkpoint of another run, or one holding more than tensors (refused unread)
        raise UsageError(f"--checkpoint {args.checkpoint}: {e}") from None
    agent.enable_training_mode(False)

    episodes = run_episodes(agent, env, args.episodes)
    if not episodes:
        raise UsageError(f"no episode ended within {MAX_EVAL_STEPS} steps")
    stats = _return_stats(episodes)
    print(f"skrl-marl: {len(episodes)} deterministic episodes of {run['algo']} on {run['env']} ({checkpoint})")
    for key, (mean, std) in stats.items():
        print(f"  {key:>16}: {mean:10.3f} +- {std:.3f}")
    return stats


# ---------------------------------------------------------------------------------------------------- entry


def _add_train_parser(commands) -> None:
    t = commands.add_parser(
        "train",
        help="train an agent (defaults: MAPPO on VMAS balance)",
        usage="skrl-marl train [options] [SECTION.KEY=VALUE ...]",
        epilog="example: skrl-marl train --env builtin:spread agent.learning_rate=1e-3 "
        "'models.policy.hidden_sizes=[256,256]'; under torchrun: torchrun --nproc_per_node=2 -m skrl_marl_ext train",
    )
    t.add_argument(
        "--algo", default=None, help="mappo, ippo or maddpg (default: the --config's agent.class, else mappo)"
    )
    t.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help="vmas:<scenario> | pettingzoo:<module> | builtin:spread | builtin:memory (default: %(default)s)",
    )
    t.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env argument, repeatable (default: none, the env's own defaults)",
    )
    t.add_argument(
        "--num-envs", type=int, default=DEFAULT_NUM_ENVS, help="envs stepped as one batch (default: %(default)s)"
    )
    t.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help=f"env steps, each stepping every env (default: the config's trainer.timesteps, else {DEFAULT_TIMESTEPS})",
    )
    t.add_argument(
        "--device",
        default="cpu",
        help="device of env and agent: cpu, cuda, cuda:1, ...; under torchrun cuda means cuda:LOCAL_RANK "
        "(default: %(default)s)",
    )
    t.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    t.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of torch, numpy and the env; rank r takes seed + r (default: %(default)s)",
    )
    t.add_argument(
        "--config",
        default=None,
        help="skrl Runner YAML with models, memory, agent and trainer sections "
        "(default: the package's skrl_marl_ext/configs/<algo>.yaml)",
    )
    t.add_argument(
        "--shared-policy",
        action="store_true",
        help="agents with equal spaces share their models (default: off, one model per agent)",
    )
    t.add_argument(
        "--rnn",
        choices=("gru", "lstm"),
        default=None,
        help="recurrent policy and value models (MAPPO/IPPO): a GRU or LSTM then one head layer; the run's sequences "
        "are --sequence-length steps (default: off, MLP models)",
    )
    t.add_argument(
        "--sequence-length",
        type=int,
        default=10,
        help="steps per training sequence of --rnn models; must divide agent.rollouts (default: %(default)s)",
    )
    t.add_argument(
        "--out", default="runs", help="directory of the runs (default: %(default)s, in the working directory)"
    )
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: off, the bar is shown)")
    t.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (a run directory of train) from its newest checkpoint, with the run's own "
        "config from its run.json, for its remaining steps, writing into RUN_DIR; the envs start new episodes "
        "(default: none, a new run)",
    )
    t.add_argument("overrides", nargs="*", metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP)


def _add_eval_parser(commands) -> None:
    e = commands.add_parser("eval", help="run deterministic episodes of a trained agent")
    e.add_argument(
        "--checkpoint",
        required=True,
        help="run directory of 'skrl-marl train', or a .pt file in its checkpoints/ (required, no default)",
    )
    e.add_argument(
        "--episodes", type=int, default=10, help="deterministic episodes to run and report (default: %(default)s)"
    )
    e.add_argument(
        "--num-envs", type=int, default=None, help="envs stepped as one batch (default: min(training envs, --episodes))"
    )
    e.add_argument("--device", default=None, help="device of env and agent (default: the training device)")
    e.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    e.add_argument(
        "--seed", type=int, default=12345, help="seed of torch, numpy and the env's episodes (default: %(default)s)"
    )


def export(args: argparse.Namespace) -> str:
    """``skrl-marl export``: write the models and preprocessors of a checkpoint for skrl's MAPPO/IPPO to play
    (:func:`skrl_marl_ext.export.export_for_skrl`); prints one line saying what it leaves out."""
    from skrl_marl_ext.export import export_for_skrl

    try:
        left_out = export_for_skrl(args.checkpoint, args.out)
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    line = f"skrl-marl: wrote {args.out} for skrl's MAPPO/IPPO load(); {left_out}"
    print(line)
    return line


def _add_export_parser(commands) -> None:
    x = commands.add_parser(
        "export", help="write a checkpoint's models and preprocessors as a file skrl's MAPPO/IPPO load() reads"
    )
    x.add_argument("checkpoint", help="checkpoint written by MAPPO, IPPO or MADDPG (a .pt file; required)")
    x.add_argument("--out", required=True, help="the file to write (required, no default)")
    x.set_defaults(threads=0)


def _typed_options(argv: list[str]) -> set[str]:
    """The ``train`` options present in ``argv`` (argparse names; ``overrides`` when any was given): ``argv`` parsed
    again with every default suppressed (an option typed with its default value is still one the user chose)."""
    parser = make_parser()
    for action in parser._subparsers._group_actions[0].choices["train"]._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}


def make_parser() -> argparse.ArgumentParser:
    """The ``skrl-marl`` parser; every option's help states its default."""
    parser = argparse.ArgumentParser(prog="skrl-marl", description="Train and evaluate skrl_marl_ext's agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(commands)
    _add_eval_parser(commands)
    _add_export_parser(commands)
    return parser


def _setup_torchrun(args: argparse.Namespace) -> bool:
    """Under torchrun (``WORLD_SIZE > 1``), create the process group before skrl is imported; return whether it was
    created here (then :func:`main` destroys it)."""
    if distributed.torchrun_world_size() <= 1:
        return False
    if args.command != "train":
        raise UsageError(f"{args.command} runs in one process: run it without torchrun")
    _check_device(args.device)
    index, local_rank = torch.device(args.device).index, distributed.torchrun_local_rank()
    if torch.device(args.device).type == "cuda" and index not in (None, local_rank):
        raise UsageError(
            f"--device {args.device}: under torchrun each process takes cuda:LOCAL_RANK; use --device cuda"
        )
    return distributed.init_torchrun_group(args.device)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``skrl-marl``; returns the exit status (2 on bad input, 1 when distributed ranks disagree)."""
    args = make_parser().parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    created, finished = False, False
    try:
        created = _setup_torchrun(args)
        if args.command == "train":
            args.given = _typed_options(argv if argv is not None else sys.argv[1:])
            train(args)
        elif args.command == "export":
            export(args)
        else:
            evaluate(args)
        finished = True
    except UsageError as e:
        print(f"skrl-marl {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RanksDisagree as e:
        finished = True
        print(f"skrl-marl {args.command}: error: {e}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the tests)
        if created:  # a rank that failed leaves at once: waiting for the others could hang
            distributed.shutdown_torchrun_group(wait=finished)
    return 0


if __name__ == "__main__":
    sys.exit(main())
