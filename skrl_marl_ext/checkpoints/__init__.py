"""Checkpoints: written whole or not at all, read safely, checked strictly, and exchanged with skrl 2.1.1's MAPPO and
IPPO.

skrl 2.1.1's ``MultiAgent.load`` unpickles with ``weights_only=False``, so a crafted checkpoint runs arbitrary code
when loaded; here the file is read with ``weights_only=True``. Everything ``save()`` writes for our agents (model,
Adam, LR scheduler, preprocessor, ValueNorm and GradScaler state dicts) is made of tensors, numbers, strings, lists
and dicts, which torch's weights-only unpickler accepts without any allow-listing.

skrl 2.1.1's ``MultiAgent.load`` also skips, with a log warning, every agent and module it does not find, so a
checkpoint of a 3-agent run loads "successfully" into a 4-agent one and trains the fourth agent from scratch. Here a
checkpoint of other agents, model shapes or modules is refused. The one exception is a checkpoint in skrl's format
(no agent holds our ``scaler`` module): the modules skrl's MAPPO/IPPO never write (grad scaler, LR scheduler, ...)
start fresh.

The optimiser's checkpoint entry (:class:`OptimizerCheckpoint`, and the per-agent
:class:`~skrl_marl_ext.groups.optim.AgentOptimizerView`) is written in skrl's layout, one parameter group over the
policy's then the value model's parameters, whenever the groups' hyperparameters agree, so skrl's agents load it;
both layouts load here.
"""

from __future__ import annotations

import copy
import datetime
import os
import pickle
import re
import sys
import warnings
from typing import Any

import torch

from skrl_marl_ext.checkpoints.files import save_torch

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

SKRL_MODULES = frozenset(
    {"policy", "value", "optimizer", "observation_preprocessor", "state_preprocessor", "value_preprocessor"}
)
"""The modules skrl 2.1.1's MAPPO and IPPO write (the preprocessors when configured)."""

OUR_MARKER = "scaler"
"""A module every agent of ours writes and skrl's never do: a file without it is in skrl's format."""

OPTIONAL_MODULES = frozenset({"progress"})
"""Modules any file may lack (they start fresh): the steps completed, which older checkpoints do not hold."""

IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable", "differentiable")
"""Optimiser options that say how the update runs, not what it computes: always the live optimiser's own."""

_MODULE_NAME = re.compile(r"^(policy|value|critic(_2)?|target_\w+|\w*optimizer|\w*scheduler|\w*preprocessor|scaler)$")
"""Names of the modules a single-agent skrl checkpoint holds at its top level."""

SCALER_STATISTICS = ("running_mean", "running_variance", "current_count")
"""The state of skrl's ``RunningStandardScaler``."""


# ---------------------------------------------------------------------------------------------------- reading


def _unpickling_reason(error: Exception) -> str:
    """One line of torch's weights-only refusal: what it refused (e.g. ``Unsupported global: GLOBAL exec ...``).

    :param error: The ``pickle.UnpicklingError`` raised by ``torch.load(..., weights_only=True)``.
    """
    text = _ANSI.sub("", str(error))
    _, marker, rest = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (rest if marker else text).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # keep what was refused, not torch's advice on how to allow-list it
    return lines[0].split(" Please use ")[0].split(" Please file ")[0]


def _file_format(path: str | os.PathLike) -> str:
    """``"zip"`` (torch.save's format), ``"pickle"`` (its legacy format), ``"empty"`` or ``"other"``."""
    with open(path, "rb") as file:
        head = file.read(4)
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    return "pickle" if head.startswith(b"\x80") else "other"


def read_checkpoint(path: str | os.PathLike, *, map_location: Any = None, owner: str = "load") -> Any:
    """Unpickle a checkpoint with ``torch.load(..., weights_only=True)``: tensors and plain containers only.

    A file holding anything else (an object whose unpickling would run code) is refused before anything runs.

    :param path: Checkpoint file.
    :param map_location: Device the tensors are loaded to (as for ``torch.load``).
    :param owner: Prefix of the error message (e.g. ``"MAPPO.load"``).

    :raises ValueError: In one line naming the file: when it is empty, not written by ``torch.save``, damaged or
        truncated, or when torch refuses to unpickle it (with torch's reason).
    """
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as error:  # what torch raises for a file it cannot read varies with the damage
        kind = _file_format(path)
        if kind == "empty":
            raise ValueError(
                f"{owner}: {path} is empty (0 bytes), not a checkpoint; was it written completely?"
            ) from None
        if kind == "other":
            raise ValueError(
                f"{owner}: {path} is not a file written by torch.save (a checkpoint is torch.save's zip archive of "
                "{agent: {module: state_dict}}); check the path"
            ) from None
        if isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in str(error):
            raise ValueError(
                f"{owner}: {path} holds objects other than tensors and state dicts and was refused without running "
                f"them (torch: {_unpickling_reason(error)}); only checkpoints written by save() and from trusted "
                "sources load"
            ) from None
        reason = " ".join(_ANSI.sub("", str(error)).split()).split(". ")[0] or type(error).__name__
        raise ValueError(
            f"{owner}: {path} is damaged or truncated (torch: {reason}); write it again or use another checkpoint"
        ) from None


def check_layout(modules: Any, path: str | os.PathLike, *, owner: str) -> dict[str, dict[str, dict]]:
    """Check that an unpickled checkpoint is a multi-agent one, ``{agent: {module: state_dict}}``.

    :param modules: What :func:`read_checkpoint` returned.
    :param path: The file (for the message).
    :param owner: Prefix of the error message.
    :return: ``modules``.
    :raises ValueError: In one line naming the file and what it holds instead (e.g. a single-agent checkpoint, one
        model's state dict, a list).
    """
    layout = "a multi-agent checkpoint {agent: {module: state_dict}} as save() writes it"
    if not isinstance(modules, dict):
        raise ValueError(f"{owner}: {path} holds a {type(modules).__name__}, not {layout}")
    if not modules:
        raise ValueError(f"{owner}: {path} holds an empty dict, not {layout}")
    if all(torch.is_tensor(v) for v in modules.values()):
        names = list(modules)
        shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
        raise ValueError(
            f"{owner}: {path} holds one state dict of {len(names)} tensors ({shown}), not {layout}; a model's "
            "weights load with model.load_state_dict"
        )
    bad = [k for k, v in modules.items() if not (isinstance(v, dict) and all(isinstance(s, dict) for s in v.values()))]
    if bad:
        names = sorted(str(k) for k in modules)
        if all(_MODULE_NAME.match(str(k)) for k in modules):
            raise ValueError(
                f"{owner}: {path} is a single-agent checkpoint (modules {names}), not {layout}; load it into a "
                "single-agent skrl agent, or its models into the multi-agent's with model.load_state_dict"
            )
        key, entry = bad[0], modules[bad[0]]
        if isinstance(entry, dict):
            inner = next(k for k, v in entry.items() if not isinstance(v, dict))
            what = f"a value of type {type(entry[inner]).__name__} under {inner!r}"
        else:
            what = f"a value of type {type(entry).__name__}"
        raise ValueError(
            f"{owner}: {path}: entry {key!r} holds {what} where {layout} has a dict of state dicts (one per module)"
        )
    return modules


def _first_non_finite(state: Any, key: str = "") -> tuple[str, str] | None:
    """``(key, "NaN" or "inf")`` of the first floating-point tensor of a nested state dict holding a value that is not
    finite (keys joined with dots), None when every one is finite."""
    if torch.is_tensor(state):
        if not (state.is_floating_point() or state.is_complex()) or bool(torch.isfinite(state).all()):
            return None
        return key, "NaN" if bool(torch.isnan(state).any()) else "inf"
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    for name, value in items:
        found = _first_non_finite(value, f"{key}.{name}" if key else str(name))
        if found is not None:
            return found
    return None


def check_finite(state: Any, path: str | os.PathLike, *, owner: str, uid: str, name: str) -> None:
    """Refuse the state of a model, preprocessor or optimiser (its ``state``: Adam's moments) holding NaN or inf, as a
    run that diverged writes it.

    :param state: The module's state dict as the checkpoint holds it.
    :param path: The file (for the message).
    :param owner: Prefix of the message; ``uid`` and ``name``: the agent and module it is of.
    :raises ValueError: In one line naming the file, the agent, the module and the tensor.
    """
    found = _first_non_finite(state["state"] if _is_optimizer_state(state) else state)
    if found is not None:
        raise ValueError(
            f"{owner}: {path}: agent '{uid}' module '{name}' holds {found[1]} in '{found[0]}' (the run had diverged "
            "when it was written); load a checkpoint written before that"
        )


# ---------------------------------------------------------------------------------------------------- optimisers


def _same(a: Any, b: Any) -> bool:
    """Nested equality of state dicts: tensors element for element (and of one shape and dtype), the rest ``==``."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return (
            torch.is_tensor(a)
            and torch.is_tensor(b)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b.to(a.device)))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _is_optimizer_state(state: Any) -> bool:
    return isinstance(state, dict) and set(state) >= {"state", "param_groups"}


def optimizer_file_state(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A ``torch.optim`` state dict in the layout a checkpoint holds: skrl's one parameter group (its parameters the
    groups' in order; the state's integer keys are global already) when every group's hyperparameters agree, the
    groups as they are otherwise (e.g. two learning rates).

    :param state_dict: ``optimizer.state_dict()`` (or a per-agent view of it).
    """
    groups = state_dict["param_groups"]
    settings = [{k: v for k, v in group.items() if k != "params"} for group in groups]
    if len(groups) < 2 or not all(_same(s, settings[0]) for s in settings[1:]):
        return state_dict
    merged = dict(settings[0], params=[i for group in groups for i in group["params"]])
    return {"state": state_dict["state"], "param_groups": [merged]}


def fit_optimizer_state(state_dict: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A checkpoint's optimiser state dict in ``optimizer``'s layout, ready for ``load_state_dict``.

    One saved group over all parameters (skrl's layout) is split into the optimiser's groups by their parameter
    counts, each taking its hyperparameters. The saved hyperparameters (``lr``, ``betas``, ...) are kept, settings only
    the live groups have (e.g. a scheduler's ``initial_lr``) stay, and the implementation flags (``fused``,
    ``foreach``, ``capturable``, ``differentiable``) are always the live optimiser's: torch's ``load_state_dict`` would
    otherwise take the file's, and it places the ``step`` counts by them.

    :raises ValueError: When the saved parameter groups do not correspond to the optimiser's.
    """
    live = optimizer.param_groups
    sizes = [len(group["params"]) for group in live]
    saved = list(state_dict["param_groups"])
    saved_sizes = [len(group["params"]) for group in saved]
    if len(saved) == 1 and len(live) > 1 and saved_sizes[0] == sum(sizes):
        settings = {k: v for k, v in saved[0].items() if k != "params"}
        ids, saved, start = list(saved[0]["params"]), [], 0
        for size in sizes:
            saved.append(dict(settings, params=ids[start : start + size]))
            start += size
    elif saved_sizes != sizes:
        raise ValueError(
            f"the checkpoint's optimizer has other parameter groups than this agent's ({saved_sizes} parameters "
            f"against {sizes}: a checkpoint of other models?)"
        )
    groups = []
    for own, group in zip(live, saved, strict=True):
        merged = {**{k: v for k, v in own.items() if k != "params"}, **group}
        merged.update({flag: own[flag] for flag in IMPLEMENTATION_FLAGS if flag in own})
        groups.append(merged)
    return {"state": state_dict["state"], "param_groups": groups}


class OptimizerCheckpoint:
    """An optimiser's checkpoint entry: its state dict in skrl's layout where it can be (see
    :func:`optimizer_file_state`), loaded from either layout (:func:`fit_optimizer_state`)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        return optimizer_file_state(self.optimizer.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(fit_optimizer_state(state_dict, self.optimizer))


# ---------------------------------------------------------------------------------------------------- loading


def is_scaler_state(state: Any) -> bool:
    """Whether ``state`` is the state dict of skrl's ``RunningStandardScaler``."""
    return isinstance(state, dict) and set(state) == set(SCALER_STATISTICS)


def merge_scaler_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One ``RunningStandardScaler`` state holding the statistics of all of ``states`` (Chan et al.'s parallel
    combination: counts add, means are count-weighted, variances add the spread of the means), in float64."""
    counts = torch.stack([s["current_count"].double() for s in states])  # (K,)
    means = torch.stack([s["running_mean"].double() for s in states])  # (K, size)
    variances = torch.stack([s["running_variance"].double() for s in states])
    total = counts.sum()
    weights = (counts / total).unsqueeze(-1)
    mean = (weights * means).sum(0)
    variance = (weights * (variances + (means - mean) ** 2)).sum(0)
    first = states[0]
    return {
        "running_mean": mean.to(first["running_mean"].dtype),
        "running_variance": variance.to(first["running_variance"].dtype),
        "current_count": total.to(first["current_count"].dtype),
    }


def _check_modules(agent: Any, modules: dict, path: Any, *, owner: str) -> bool:
    """Refuse a file of other agents, or whose modules are not the agent's (see :func:`load_checkpoint`).

    :return: Whether the file is in skrl's format (no agent holds our ``scaler``).
    """
    expected, saved = list(agent.possible_agents), list(modules)
    if set(saved) != set(expected):
        missing = [uid for uid in expected if uid not in modules]
        extra = [uid for uid in saved if uid not in expected]
        raise ValueError(
            f"{owner}: {path} holds agents {saved} but this agent has {expected} "
            f"(missing: {missing}, not in this agent: {extra}); load a checkpoint of a run with the same agents"
        )
    skrl_format = not any(OUR_MARKER in modules[uid] for uid in expected)
    for uid in expected:
        wanted = {name for name, module in agent.checkpoint_modules[uid].items() if module is not None}
        have = set(modules[uid])
        fresh = {name for name in wanted - have if name not in SKRL_MODULES} if skrl_format else set()
        fresh |= wanted & OPTIONAL_MODULES - have  # files written before they existed: start from step 0
        if have - wanted or wanted - have - fresh:
            raise ValueError(
                f"{owner}: {path} has modules {sorted(have)} for agent '{uid}' but this agent expects "
                f"{sorted(wanted - fresh)}; load a checkpoint of the same algorithm and configuration "
                "(preprocessors, schedulers and mixed precision included)"
            )
    return skrl_format


def _load_optimizers(optimizers: list, skrl_format: bool, *, owner: str, path: Any) -> None:
    """Load the optimisers' states, after the models; in a skrl file, one that does not map restarts (a warning)."""
    restarted = []
    for name, module, uids, state in optimizers:
        try:
            module.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as error:
            if not skrl_format:
                raise ValueError(
                    f"{owner}: {path}: '{uids[0]}' module '{name}' does not fit this agent's: {_one_line(error)}. "
                    "Build the models with the sizes of the run that wrote the checkpoint"
                ) from None
            restarted += uids
            reason = error
    if restarted:
        _warn(
            f"{owner}: {path}: the optimiser state of agents {restarted} does not map onto this agent's "
            f"({_one_line(reason)}): their optimiser restarts from fresh moments"
        )


def load_checkpoint(agent: Any, path: str | os.PathLike) -> None:
    """Load a checkpoint written by ``save()`` (``{agent: {module name: state_dict}}``) into ``agent``: ours, or
    skrl 2.1.1's MAPPO/IPPO's.

    Every agent of ``agent.possible_agents`` must be in the file and no other, the file's modules must be ones the
    agent has, and each state dict must fit its module. A module the agent has and the file lacks is refused, unless
    the file is in skrl's format (no agent holds ``scaler``) and the module is one skrl never writes (the grad
    scaler, the LR scheduler, ...): it starts fresh. Where the file holds a different state for each agent of a
    module the agents share here (skrl keeps one optimiser and one preprocessor per agent over a shared model), the
    preprocessors' statistics are merged and the optimiser restarts, each said in one warning. Models are left in
    eval mode, as skrl leaves them.

    :param agent: A skrl ``MultiAgent`` (its ``possible_agents``, ``checkpoint_modules`` and ``device`` are used).
    :param path: File written by ``agent.save()`` or by the trainer's checkpoints (``agent_<step>.pt``).

    :raises ValueError: Naming the agents, modules or tensors that do not match, or when the file is not a
        multi-agent checkpoint or holds objects other than tensors and state dicts (refused without unpickling them,
        see :func:`read_checkpoint`), or when a model, preprocessor or optimiser state holds NaN or inf (a run that
        had diverged, :func:`check_finite`): nothing is loaded then.
    """
    owner = f"{type(agent).__name__}.load"
    modules = check_layout(read_checkpoint(path, map_location=agent.device, owner=owner), path, owner=owner)
    skrl_format = _check_modules(agent, modules, path, owner=owner)
    for uid in agent.possible_agents:  # weights, statistics and Adam's moments; not replay data, not counters
        for name, state in modules[uid].items():
            if isinstance(agent.checkpoint_modules[uid][name], torch.nn.Module) or _is_optimizer_state(state):
                check_finite(state, path, owner=owner, uid=uid, name=name)
    # one entry per module object: a module several agents share here is loaded once
    entries: dict[tuple[str, int], tuple[Any, list[str]]] = {}
    for uid in agent.possible_agents:
        for name in modules[uid]:
            module = agent.checkpoint_modules[uid][name]
            entries.setdefault((name, id(module)), (module, []))[1].append(uid)
    merged: dict[tuple[str, ...], list[str]] = {}
    optimizers = []
    for (name, _), (module, uids) in entries.items():
        states = [modules[uid][name] for uid in uids]
        state = states[0]
        if not all(_same(state, other) for other in states[1:]):
            if is_scaler_state(state) and all(is_scaler_state(s) for s in states):
                state = merge_scaler_states(states)
                merged.setdefault(tuple(uids), []).append(name)
            elif _is_optimizer_state(state):
                _warn(
                    f"{owner}: {path} holds a different '{name}' state for each of agents {uids}, which share one "
                    "optimiser here (skrl keeps one per agent over a shared model): their optimiser restarts from "
                    "fresh moments"
                )
                continue
            else:
                raise ValueError(
                    f"{owner}: {path} holds a different '{name}' for each of agents {uids}, which share one here; "
                    "load a checkpoint of a run with the same model sharing"
                )
        if _is_optimizer_state(state):  # after the models: their mismatch is the one to report
            optimizers.append((name, module, uids, state))
            continue
        _load_module(module, state, owner=owner, path=path, uid=uids[0], name=name)
    _load_optimizers(optimizers, skrl_format, owner=owner, path=path)
    for uids, names in merged.items():
        _warn(
            f"{owner}: {path} holds different {', '.join(names)} statistics for each of agents {list(uids)}, which "
            "share one here (skrl keeps one per agent over a shared model): merged into one (counts added, means and "
            "variances combined exactly)"
        )


def _warn(message: str) -> None:
    """``warnings.warn`` attributed to the caller's line outside this package (e.g. its ``agent.load(path)``)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


def _one_line(error: Exception) -> str:
    """``error``'s message in one line (torch lists each tensor of a ``load_state_dict`` mismatch on a line)."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _load_module(module: Any, state: Any, *, owner: str, path: Any, uid: str, name: str) -> None:
    try:
        module.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as error:
        raise ValueError(
            f"{owner}: {path}: '{uid}' module '{name}' does not fit this agent's: {_one_line(error)}. "
            "Build the models with the sizes of the run that wrote the checkpoint"
        ) from None
    if isinstance(module, torch.nn.Module):
        module.eval()


# ---------------------------------------------------------------------------------------------------- writing


def state_of(module: Any) -> Any:
    """What a checkpoint holds of a module: its state dict (a plain value as it is)."""
    return module.state_dict() if hasattr(module, "state_dict") else module


def agent_states(agent: Any, state: Any = None) -> dict[str, dict[str, Any]]:
    """``{agent name: {module name: state(agent name, module name, module)}}`` over ``agent.checkpoint_modules``
    (``state``: :func:`state_of` the module when None)."""
    return {
        uid: {
            name: state_of(module) if state is None else state(uid, name, module)
            for name, module in agent.checkpoint_modules[uid].items()
        }
        for uid in agent.possible_agents
    }


def best_state(module: Any) -> Any:
    """What ``best_agent.pt`` keeps of a module at a better checkpoint: a copy of its state (a module's own
    ``best_state_dict()`` where it has one, e.g. MADDPG's replay, which keeps its position, not its rows)."""
    if callable(getattr(module, "best_state_dict", None)):
        return module.best_state_dict()
    return copy.deepcopy(state_of(module))


def write_checkpoint(agent: Any, *, timestep: int | None) -> str:
    """skrl's ``write_checkpoint`` of ``agent`` at the run's step ``timestep``: ``checkpoints/agent_<timestep>.pt``
    (a time stamp without a step) and ``best_agent.pt`` when a better one was kept; one file per agent and module with
    ``store_separately``. Each file is written whole or not at all (:func:`~skrl_marl_ext.checkpoints.files.save_torch`).

    :return: The path written (the folder with ``store_separately``).
    :raises ~skrl_marl_ext.checkpoints.files.WriteError: When a file cannot be written (naming it and the cause).
    """
    folder = os.path.join(agent.experiment_dir, "checkpoints")
    tag = str(timestep if timestep is not None else datetime.datetime.now().strftime("%y-%m-%d_%H-%M-%S-%f"))
    best = agent.checkpoint_best_modules
    write_best = bool(best["modules"]) and not best["saved"]
    if agent.cfg.experiment.store_separately:
        for uid in agent.possible_agents:
            for name, module in agent.checkpoint_modules[uid].items():
                save_torch(state_of(module), os.path.join(folder, f"{uid}_{name}_{tag}.pt"))
                if write_best:
                    save_torch(best["modules"][uid][name], os.path.join(folder, f"best_{uid}_{name}.pt"))
        path = folder
    else:
        path = os.path.join(folder, f"agent_{tag}.pt")
        save_torch(agent_states(agent), path)
        if write_best:
            save_torch(
                agent_states(agent, lambda uid, name, module: best["modules"][uid][name]),
                os.path.join(folder, "best_agent.pt"),
            )
    best["saved"] = best["saved"] or write_best
    return path
