"""``skrl-marl isaaclab train|play ARGS`` (also ``python -m skrl_marl_ext.isaaclab``): Isaac Lab 3.0's own skrl train
and play backends, with every option ``isaaclab train/play --rl_library skrl`` takes, building this package's agents.

Isaac Lab's backends (``isaaclab_rl/entrypoints/backends/{train,play}_skrl.py``) build their Runner with
``import_skrl_runner(ml_framework)(env, agent_cfg)``, find a task's config through
``resolve_skrl_agent_cfg_entry_point(agent, algorithm)`` (``--algorithm HAPPO`` is the task's gym kwarg
``skrl_happo_cfg_entry_point``) and take ``--algorithm`` from a fixed list. In this process only, with nothing on disk
changed, this command

- puts :func:`import_runner` in place of ``import_skrl_runner`` in each backend module's namespace: a config whose
  ``agent: class`` is MAPPO, IPPO, HAPPO, MADDPG, MASAC or HASAC builds :class:`skrl_marl_ext.runner.Runner`, any other class
  (skrl's PPO, AMP, ...) skrl's own Runner, as ``isaaclab train`` does;
- adds HAPPO, MADDPG, MASAC and HASAC to the backends' ``--algorithm`` choices;
- registers the package's configs (``skrl_marl_ext/configs/isaaclab/``) as the ``skrl_<algorithm>_cfg_entry_point``
  of the tasks of :data:`TASK_CONFIGS` (``skrl_happo_cfg_entry_point``, ...; an entry of that name the task already
  has is kept);

then runs Isaac Lab's dispatcher (``isaaclab_rl.entrypoints.dispatch.run_cli``) with ``--rl_library skrl``.
``isaaclab train`` and ``isaaclab play`` themselves are left as they are. An Isaac Lab whose modules lack what this
replaces ends with one line naming the version supported (:data:`SUPPORTED`), not a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

SUPPORTED = "Isaac Lab 3.0 (isaaclab 3.0.x)"
"""The Isaac Lab release whose module layout this command patches."""

BACKENDS = {
    "train": "isaaclab_rl.entrypoints.backends.train_skrl",
    "play": "isaaclab_rl.entrypoints.backends.play_skrl",
}
"""Isaac Lab's skrl backend module of each action."""

DISPATCH = "isaaclab_rl.entrypoints.dispatch"
"""Isaac Lab's dispatcher of ``isaaclab train/play`` (``run_cli(action, argv)``)."""

ADDED_ALGORITHMS = ("HAPPO", "MADDPG", "MASAC", "HASAC")
"""``--algorithm`` values this command adds to Isaac Lab's."""

OUR_ALGORITHMS = ("mappo", "ippo", "happo", "maddpg", "masac", "hasac")
"""``agent: class`` values (lower case) this package's Runner builds; others go to skrl's."""

OFF_POLICY = ("maddpg", "masac", "hasac")
"""Our agents without rollouts: they learn every env step."""

TASK_CONFIGS = {
    task: {algorithm: f"{prefix}_{algorithm}.yaml" for algorithm in ("happo", "maddpg", "masac", "hasac")}
    for task, prefix in (("Isaac-Pendulum-MARL-Direct", "pendulum"), ("Isaac-Shadow-Handover-Direct", "handover"))
}
"""Isaac Lab's multi-agent tasks and the package's config file of each added algorithm (``configs/isaaclab/``)."""

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "isaaclab")

USAGE = """\
usage: skrl-marl isaaclab {train,play} [options of isaaclab train/play --rl_library skrl]
       python -m skrl_marl_ext.isaaclab {train,play} [...]

Isaac Lab's own skrl train and play backends, building skrl_marl_ext's MAPPO, IPPO, HAPPO, MADDPG, MASAC and HASAC
(skrl's Runner for any other agent class). --algorithm takes HAPPO, MADDPG, MASAC and HASAC too;
Isaac-Pendulum-MARL-Direct and Isaac-Shadow-Handover-Direct find the package's configs for them. Options: `skrl-marl isaaclab train --help`.
example: skrl-marl isaaclab train --task Isaac-Pendulum-MARL-Direct --algorithm HAPPO --num_envs 64"""


class IsaacLabError(Exception):
    """What stops the command, in one line (printed as ``skrl-marl isaaclab: error: ...``, exit status 2)."""


def config_path(task: str, algorithm: str) -> str:
    """Path of the package's config of ``algorithm`` (``happo``, ``maddpg``, ``masac``, ``hasac``) for ``task`` (:data:`TASK_CONFIGS`)."""
    return os.path.join(CONFIGS, TASK_CONFIGS[task][algorithm])


def import_runner(ml_framework: str, *, skrl_runner: Any = None):
    """What the backends' ``import_skrl_runner(ml_framework)`` returns: a callable ``(env, agent_cfg) -> runner``.

    A config of one of this package's agents (:data:`OUR_ALGORITHMS`) builds :class:`skrl_marl_ext.runner.Runner`;
    an off-policy agent's ``agent: rollouts`` (the env steps Isaac Lab counts as one of ``--max_iterations``; MADDPG,
    MASAC and HASAC have no rollouts) is left out of it. Any other config builds ``skrl_runner(ml_framework)``'s Runner (Isaac Lab's own
    ``import_skrl_runner``: skrl's ``Runner`` of that framework), or skrl's PyTorch ``Runner`` when ``skrl_runner`` is
    None.

    :raises IsaacLabError: For one of our agents with ``ml_framework`` other than ``torch``, or a config our Runner
        refuses (its one-line message).
    """

    def build(env, agent_cfg: dict[str, Any]):
        agent = agent_cfg.get("agent") if isinstance(agent_cfg, dict) else None
        name = str((agent or {}).get("class", "")).lower()
        if name not in OUR_ALGORITHMS:
            if skrl_runner is None:
                from skrl.utils.runner.torch import Runner as SkrlRunner

                return SkrlRunner(env, agent_cfg)
            return skrl_runner(ml_framework)(env, agent_cfg)
        if ml_framework != "torch":
            raise IsaacLabError(
                f"--ml_framework {ml_framework}: skrl_marl_ext's {name.upper()} runs on PyTorch only; "
                "use --ml_framework torch"
            )
        from skrl_marl_ext.runner import Runner

        if name in OFF_POLICY:
            agent_cfg = {**agent_cfg, "agent": {key: value for key, value in agent.items() if key != "rollouts"}}
        try:
            return Runner(env, agent_cfg)
        except ValueError as e:
            raise IsaacLabError(str(e)) from None

    return build


class _SkrlArgs:
    """Isaac Lab's ``cli_args_skrl`` module, whose ``add_skrl_args`` also adds :data:`ADDED_ALGORITHMS` to
    ``--algorithm``'s choices."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def add_skrl_args(self, parser) -> None:
        self._module.add_skrl_args(parser)
        # argparse has no public lookup of an option by name; its list of actions is stable across Python versions
        action = next((a for a in parser._actions if a.dest == "algorithm"), None)
        if action is None or not action.choices:
            raise IsaacLabError(_moved(f"{self._module.__name__}.add_skrl_args' --algorithm option"))
        action.choices = [*action.choices, *(a for a in ADDED_ALGORITHMS if a not in action.choices)]


def _installed() -> str:
    import importlib.metadata

    try:
        return f"Isaac Lab {importlib.metadata.version('isaaclab')}"
    except importlib.metadata.PackageNotFoundError:
        return "the installed Isaac Lab"


def _moved(what: str) -> str:
    return (
        f"{_installed()} has no {what}, which skrl-marl isaaclab replaces; this command supports {SUPPORTED}: "
        "pip install 'isaaclab==3.0.*', or train skrl's own agents with `isaaclab train`"
    )


def _import(module: str) -> Any:
    """``module`` imported; a missing Isaac Lab or a module Isaac Lab moved as :class:`IsaacLabError`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == "isaaclab_rl":
            raise IsaacLabError(
                f"Isaac Lab is not installed in this Python ({sys.executable}): run this command with the Python "
                f"that runs `isaaclab`, where {SUPPORTED} and this package are installed"
            ) from None
        if e.name and module.startswith(e.name):  # the module itself, or a package above it, is gone
            raise IsaacLabError(_moved(f"module {module}")) from None
        raise IsaacLabError(f"importing {module} failed: {e}") from None


def _attribute(module: Any, name: str) -> Any:
    if not hasattr(module, name):
        raise IsaacLabError(_moved(f"{module.__name__}.{name}"))
    return getattr(module, name)


def prepare(action: str) -> Any:
    """Check Isaac Lab's layout, patch ``action``'s backend module in this process and register the package's
    configs; return Isaac Lab's dispatcher module.

    :raises IsaacLabError: When Isaac Lab is missing or lacks a name this command replaces or calls.
    """
    skrl_module = _import("isaaclab_rl.skrl")
    resolve = _attribute(skrl_module, "resolve_skrl_agent_cfg_entry_point")
    if resolve(None, "HAPPO") != "skrl_happo_cfg_entry_point":  # the gym kwarg the configs are registered under
        raise IsaacLabError(_moved("skrl_<algorithm>_cfg_entry_point naming of resolve_skrl_agent_cfg_entry_point"))
    dispatch = _import(DISPATCH)
    _attribute(dispatch, "run_cli")
    backend = _import(BACKENDS[action])
    original = _attribute(backend, "import_skrl_runner")
    _attribute(backend, "run")
    cli_args = _attribute(backend, "cli_args")
    if not isinstance(cli_args, _SkrlArgs):  # patched once per process
        _attribute(cli_args, "add_skrl_args")
        backend.cli_args = _SkrlArgs(cli_args)
        backend.import_skrl_runner = lambda ml_framework: import_runner(ml_framework, skrl_runner=original)
    register_configs()
    return dispatch


def register_configs() -> dict[str, list[str]]:
    """Add the package's configs to the gym registration of the tasks of :data:`TASK_CONFIGS` that are registered
    (after ``import isaaclab_tasks``); a task's entry of the same name is kept. Returns the entries added by task."""
    import gymnasium as gym

    added: dict[str, list[str]] = {}
    for task in TASK_CONFIGS:
        try:
            spec = gym.spec(task)
        except gym.error.Error:
            continue
        for algorithm in TASK_CONFIGS[task]:
            key = f"skrl_{algorithm}_cfg_entry_point"
            if key not in spec.kwargs:
                spec.kwargs[key] = config_path(task, algorithm)
                added.setdefault(task, []).append(key)
    return added


def _rl_library(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--rl_library``'s value in ``argv`` (None when absent) and ``argv`` without it."""
    rest, library, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--rl_library" and i + 1 < len(argv):
            library, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--rl_library="):
            library = argv[i].split("=", 1)[1]
        else:
            rest.append(argv[i])
        i += 1
    return library, rest


def main(argv: list[str] | None = None) -> int:
    """``skrl-marl isaaclab ACTION ARGS``; returns the exit status (2 with one line on stderr when the command cannot
    start). Isaac Lab's own errors and option parsing (``--help``) are its own."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    action, rest = argv[0], argv[1:]
    try:
        if action not in BACKENDS:
            raise IsaacLabError(f"unknown command '{action}'; use train or play (skrl-marl isaaclab --help)")
        library, rest = _rl_library(rest)
        if library not in (None, "skrl"):
            raise IsaacLabError(f"--rl_library {library}: this command runs the skrl backend; use `isaaclab {action}`")
        dispatch = prepare(action)
        return dispatch.run_cli(action, ["--rl_library", "skrl", *rest])
    except IsaacLabError as e:
        print(f"skrl-marl isaaclab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
