"""Peak memory of one rollout and its update: skrl 2.1.1's MAPPO against this package's, counted exactly.

What is counted: the bytes of every tensor storage alive, at every aten op, from the start of a rollout to the end of
its update, except the models' parameters and buffers (the running statistics of preprocessors included) and the
optimisers' state. Gradients, the rollout storage, the env's tensors and everything an update allocates count. The
peak is the largest such sum, and where it occurs is the op, the innermost frame of skrl or this package, and the
section of the update method (its nearest preceding comment at the method's own indentation) then running.

How: a ``torch.utils._python_dispatch.TorchDispatchMode`` (:class:`LiveStorages`) sees every tensor an op returns and
adds its untyped storage's ``nbytes()`` the first time it sees that storage; a ``weakref.finalize`` on the storage's
Python object (torch keeps one per storage for as long as the storage lives, also when only C++ holds it, e.g. a
tensor autograd saved for the backward) subtracts it when the storage is freed. Views share their base's storage and
so add nothing; a storage resized in place is recounted. The storages alive when the window starts are found through
the garbage collector's list of Python objects. The counts do not depend on the device (the same ops allocate the same
storages on a GPU); scratch memory inside one kernel, invisible to the dispatcher, is not counted.
``tests/test_memory_peak.py`` checks the counting on known allocations.

Procedure, per config, number of envs and agent: the env is ``skrl_marl_ext.envs.null`` (one state tensor shared by
all agents, as skrl's Isaac Lab wrapper gives it) with the config's sizes; the models are ``bench_common``'s MLPs; both
libraries get the same config. One rollout and its update run first, uncounted (the optimisers' state and lazily
allocated buffers then exist), the gradients are dropped (every update sets them to None before its first backward),
then one rollout and its update are counted. Each measurement runs in a fresh process.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import gc
import json
import linecache
import os
import platform
import re
import sys
import time
import warnings
import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MIB = 2**20
PHASE_AFTER = {
    "pre_interaction": "act",
    "act": "env",
    "env": "record",
    "record": "post_interaction",
    "post_interaction": "pre_interaction",
}
"""The phase of :func:`skrl_marl_ext.trainers.interact` that follows each (its ``on_phase`` hook reports the end)."""
UPDATE_METHODS = frozenset({"update", "_update_group"})
"""Methods of an algorithm's file (``.../mappo.py``) whose sections name where an update's peak occurs."""


def _library_dirs() -> tuple[str, ...]:
    import skrl

    import skrl_marl_ext

    return tuple(os.path.dirname(module.__file__) + os.sep for module in (skrl, skrl_marl_ext))


class LiveStorages(TorchDispatchMode):
    """Bytes of the tensor storages alive while active (see the module docstring), and their peak.

    :param locate: Record where each new peak occurs (the op, the innermost frame of ``library_dirs`` and the section
        of an update method); off, the mode only counts.
    :param library_dirs: Folders whose frames :attr:`where` names (skrl's and this package's when None).
    """

    def __init__(
        self, *, locate: bool = True, explain: bool = False, library_dirs: Iterable[str] | None = None
    ) -> None:
        super().__init__()
        self.live = 0
        """Bytes alive now."""
        self.peak = 0
        """The most bytes alive at once since the mode was made (or :meth:`reset_peak`)."""
        self.phase = ""
        """A label the caller sets; :attr:`where` starts with the label at the peak."""
        self.locate = locate
        self._dirs = tuple(library_dirs) if library_dirs is not None else _library_dirs()
        self._sizes: dict[int, int] = {}  # id of a storage's Python object -> its bytes as counted
        self._ignored: set[int] = set()
        self._at: tuple | None = None
        self.explain = explain
        self._sites: dict[int, str] = {}  # explain: where each counted storage was allocated
        self.breakdown: dict[str, int] = {}
        """With ``explain``: the bytes alive at the peak by where they were allocated."""

    # -- counting

    def track(self, tensor: torch.Tensor, site: str = "alive at the start") -> None:
        """Count ``tensor``'s storage if it is not counted yet (recount it if it was resized); ``site`` names where
        it was allocated (kept with ``explain``)."""
        if not _counts(tensor):
            return
        storage = tensor.untyped_storage()
        key = id(storage)  # the object lives as long as the storage: the id is not reused while it is counted
        if key in self._ignored:
            return
        size = storage.nbytes()
        counted = self._sizes.get(key)
        if counted is None:
            self._sizes[key] = size
            self.live += size
            weakref.finalize(storage, self._free, key)
            if self.explain:
                self._sites[key] = site
        elif counted != size:
            self._sizes[key] = size
            self.live += size - counted

    def ignore(self, tensor: torch.Tensor) -> None:
        """Leave ``tensor``'s storage out of the count for as long as it lives (parameters, optimiser state)."""
        if not _counts(tensor):
            return
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self._ignored:
            return
        if key in self._sizes:
            self.live -= self._sizes.pop(key)
        self._ignored.add(key)
        weakref.finalize(storage, self._ignored.discard, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)
        self._sites.pop(key, None)

    def reset_peak(self) -> None:
        """Start a new peak from the bytes alive now."""
        self.peak, self._at = self.live, None
        if self.locate:
            self._at = (self.phase, "start of the window", None, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if _counts(t)}
        out = func(*args, **kwargs)
        site = ""
        if self.explain:
            at = self._frames(_op_name(func))
            site = self._describe(at) + (f" line {at[2][1]}" if at[2] is not None else "")
        for leaf in tree_leaves(out):
            # an output on an input's storage (a view, an in-place or out= op) is new memory only if the input was
            if _counts(leaf) and (
                id(leaf.untyped_storage()) not in inputs or id(leaf.untyped_storage()) in self._sizes
            ):
                self.track(leaf, site)
        if self.live > self.peak:
            self.peak = self.live
            if self.locate:
                self._at = self._frames(_op_name(func))
            if self.explain:
                self.breakdown = {}
                for key, size in self._sizes.items():
                    where = self._sites.get(key, "?")
                    self.breakdown[where] = self.breakdown.get(where, 0) + size
        return out

    # -- where the peak occurs

    def _frames(self, op: str) -> tuple:
        """``(phase, op, innermost library frame, update frame)`` (frames as ``(code, line)``), read off the stack."""
        inner = update = None
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(self._dirs):
                if inner is None:
                    inner = (code, frame.f_lineno)
                if code.co_name in UPDATE_METHODS and os.path.basename(code.co_filename) == "mappo.py":
                    update = (code, frame.f_lineno)
                    break
            frame = frame.f_back
        return (self.phase, op, inner, update)

    @property
    def where(self) -> str:
        """Where the peak occurred: ``phase: update section; function (file), op``."""
        return "" if self._at is None else self._describe(self._at)

    @staticmethod
    def _describe(at: tuple) -> str:
        phase, op, inner, update = at
        if inner is None:
            return f"{phase}: {op}"
        section = f"{_section(*update)}; " if update is not None else ""
        code = inner[0]
        return f"{phase}: {section}{code.co_name} ({os.path.basename(code.co_filename)}), {op}"


def _op_name(func) -> str:
    """``aten.name``, with `` in the backward`` for an op the autograd engine runs (whose Python frames are those of
    the ``backward()`` call)."""
    node = getattr(torch._C, "_current_autograd_node", lambda: None)()
    return str(func.overloadpacket) + (" in the backward" if node is not None else "")


def _counts(value) -> bool:
    """Whether ``value`` is a tensor with a storage of memory (not meta, not sparse)."""
    return isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type != "meta"


def _section(code, line: int) -> str:
    """The section of function ``code`` that ``line`` is in: its nearest preceding comment at the function body's
    indentation, up to the first ``:``, ``,``, ``;`` or ``(``."""
    lines = [linecache.getline(code.co_filename, n) for n in range(code.co_firstlineno, line + 1)]
    definition = next((text for text in lines if text.lstrip().startswith("def ")), lines[0])
    indent = " " * (len(definition) - len(definition.lstrip()) + 4)
    comment = None
    for text in reversed(lines):
        if text.startswith(indent + "# "):
            comment = text  # the first line of the block of comment lines
        elif comment is not None:
            break
    if comment is None:
        return code.co_name
    return re.split(r"[:,;(]", comment.strip()[2:])[0].strip()


def _holds_memory(tensor: torch.Tensor) -> bool:
    """Whether a tensor the collector lists holds memory: not one of the example values that ``torch.compile`` keeps
    with its graphs (fake tensors, some wrapped by vmap, which has no storage to read)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(tensor, FakeTensor):
        return False
    try:
        tensor.untyped_storage()
    except NotImplementedError:  # a tensor batched by vmap
        return False
    return True


def start_window(mode: LiveStorages) -> None:
    """Begin counting with the storages alive now: every tensor the garbage collector lists, except the parameters and
    buffers of every ``nn.Module`` and the state of every optimiser it lists; then start a new peak."""
    with warnings.catch_warnings():  # isinstance on some of torch's deprecated objects warns
        warnings.simplefilter("ignore", FutureWarning)
        objects = [
            obj for obj in gc.get_objects() if isinstance(obj, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer))
        ]
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in (*obj.parameters(recurse=False), *obj.buffers(recurse=False)):
                mode.ignore(tensor)
        elif isinstance(obj, torch.optim.Optimizer) and isinstance(getattr(obj, "state", None), dict):
            for state in obj.state.values():
                for value in state.values():
                    mode.ignore(value)
    for obj in objects:
        if isinstance(obj, torch.Tensor) and _holds_memory(obj):
            if not isinstance(obj, torch.nn.Parameter):
                mode.track(obj)
            if obj.is_leaf and obj.grad is not None:  # held by C++: not in the collector's list
                mode.track(obj.grad)
    del objects
    mode.reset_peak()


# ---------------------------------------------------------------------------------------------------- the configs


@dataclasses.dataclass(frozen=True)
class Config:
    """One measured setting (both libraries get it)."""

    name: str
    agents: int
    obs_size: int
    state_size: int
    action_size: int
    hidden: tuple[int, ...]
    activation: str
    rollouts: int
    epochs: int
    mini_batches: int
    kl_adaptive: bool
    """``KLAdaptiveLR`` as the learning rate scheduler (this package then runs the agents one by one unless it can
    batch KL-adaptive groups)."""

    def describe(self) -> str:
        hidden = ", ".join(str(h) for h in self.hidden)
        scheduler = ", KL-adaptive learning rate" if self.kl_adaptive else ""
        return (
            f"{self.agents} agents, obs {self.obs_size}, one shared state {self.state_size}, actions {self.action_size}, "
            f"[{hidden}] {self.activation.upper()}, rollouts {self.rollouts}, {self.epochs} epochs x {self.mini_batches} "
            f"mini-batches, RunningStandardScaler on observations, states and values{scheduler}"
        )


CONFIGS = {
    "handover": Config("handover", 2, 157, 290, 20, (512, 512, 256, 128), "elu", 16, 5, 4, True),
    "8-agents": Config("8-agents", 8, 64, 512, 4, (256, 256), "elu", 24, 5, 4, False),
}
"""Isaac Lab's Shadow-Handover MAPPO config (its sizes, models and schedule), and 8 agents sharing one large state."""
AGENTS = ("skrl", "ours-batched", "ours-batched-one-pass", "ours-one-by-one")
"""skrl's MAPPO; ours with ``batch_agent_models=True`` (batched where the config allows it; the update in passes of
as many agents as ``update_agents_at_once="auto"`` gives), the same with every agent in one pass, ours with False."""
LEARNING_RATE = 5e-4
KL_THRESHOLD = 0.016


def make_env(config: Config, *, num_envs: int, device: str):
    """The null env with ``config``'s sizes behind skrl's Isaac Lab wrapper: the state is the first ``state_size``
    entries of all observations, one tensor for all agents."""
    import gymnasium
    import numpy as np
    from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabMultiAgentWrapper

    from skrl_marl_ext.envs.null import NullEnv

    class SizedStateNullEnv(NullEnv):
        def __init__(self, *, state_size: int, **kwargs) -> None:
            super().__init__(**kwargs)
            if state_size > self.num_agents * self.obs_size:
                raise ValueError("state_size must be at most num_agents * obs_size")
            self.state_size = state_size
            self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, (state_size,), dtype=np.float32)

        def state(self) -> torch.Tensor:
            return self.x.reshape(self.num_envs, -1)[:, : self.state_size]

    env = SizedStateNullEnv(
        state_size=config.state_size,
        num_envs=num_envs,
        num_agents=config.agents,
        obs_size=config.obs_size,
        action_size=config.action_size,
        device=device,
        seed=0,
    )
    return IsaacLabMultiAgentWrapper(env)


def make_agent(config: Config, which: str, env, *, device: str, ours_cfg: dict | None = None):
    """skrl's MAPPO or ours (:data:`AGENTS`) on ``env`` with ``config``, models seeded alike; ``ours_cfg`` adds config
    fields of ours (e.g. ``compile``)."""
    from bench_common import TrainCfg, make_models
    from skrl.memories.torch import RandomMemory
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.resources.schedulers.torch import KLAdaptiveLR

    torch.manual_seed(0)
    train_cfg = TrainCfg(hidden=config.hidden, activation=config.activation)
    models = make_models(env, algo=f"{which.split('-')[0]}-mappo", shared=False, cfg=train_cfg, device=device)
    uids = env.possible_agents
    spaces = {
        "possible_agents": uids,
        "models": models,
        "observation_spaces": env.observation_spaces,
        "state_spaces": env.state_spaces,
        "action_spaces": env.action_spaces,
        "device": device,
    }
    cfg = {
        "rollouts": config.rollouts,
        "learning_epochs": config.epochs,
        "mini_batches": config.mini_batches,
        "learning_rate": LEARNING_RATE,
        "observation_preprocessor": RunningStandardScaler,
        "state_preprocessor": RunningStandardScaler,
        "value_preprocessor": RunningStandardScaler,
    }
    scheduler_kwargs = {"kl_threshold": KL_THRESHOLD} if config.kl_adaptive else {}
    if config.kl_adaptive:
        cfg["learning_rate_scheduler"] = KLAdaptiveLR
    if which.startswith("ours"):
        from skrl_marl_ext import MAPPO

        quiet = {"experiment": {"write_interval": 0, "checkpoint_interval": 0}}
        ours = {"batch_agent_models": which != "ours-one-by-one", "learning_rate_scheduler_kwargs": scheduler_kwargs}
        if which == "ours-batched-one-pass":
            ours["update_agents_at_once"] = config.agents
        return MAPPO(cfg={**cfg, **ours, **quiet, **(ours_cfg or {})}, **spaces)
    from skrl.multi_agents.torch import ExperimentCfg
    from skrl.multi_agents.torch.mappo import MAPPO, MAPPO_CFG

    sizes = {"observation": env.observation_spaces, "state": env.state_spaces, "value": dict.fromkeys(uids, 1)}
    for kind, size in sizes.items():  # skrl fills neither size nor device; its expand() refuses a shared `{}`
        cfg[f"{kind}_preprocessor_kwargs"] = {uid: {"size": size[uid], "device": device} for uid in uids}
    cfg["learning_rate_scheduler_kwargs"] = {uid: dict(scheduler_kwargs) for uid in uids}
    experiment = ExperimentCfg(write_interval=0, checkpoint_interval=0, directory="/tmp")
    memories = {uid: RandomMemory(memory_size=config.rollouts, num_envs=env.num_envs, device=device) for uid in uids}
    return MAPPO(cfg=MAPPO_CFG(**cfg, experiment=experiment), memories=memories, **spaces)


def measure(config: Config, which: str, *, num_envs: int, device: str = "cpu", explain: bool = False) -> dict:
    """One uncounted rollout and update, then the peak of one counted rollout and update (see the module docstring)."""
    from op_count import init_agent

    from skrl_marl_ext.trainers import interact

    env = make_env(config, num_envs=num_envs, device=device)
    agent = make_agent(config, which, env, device=device)
    T = config.rollouts
    init_agent(agent, env, timesteps=2 * T)
    agent.enable_training_mode(True)
    observations, _ = env.reset()
    states = env.state()
    for timestep in range(T):
        step = interact(agent, env, observations, states, timestep=timestep, timesteps=2 * T)
        observations, states = step.next_observations, step.next_states
    with warnings.catch_warnings():  # every update sets the gradients to None before its first backward
        warnings.simplefilter("ignore", FutureWarning)
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.is_leaf and obj.grad is not None:
                obj.grad = None
    gc.collect()

    mode = LiveStorages(explain=explain)
    before_update = 0

    def on_phase(phase: str, _milliseconds: float) -> None:
        nonlocal before_update
        mode.phase = PHASE_AFTER[phase]
        if phase == "record" and timestep == 2 * T - 1:
            mode.phase, before_update = "update", mode.live

    mode.phase = "act"
    start_window(mode)
    at_start = mode.live
    start = time.perf_counter()
    with mode:
        for timestep in range(T, 2 * T):
            step = interact(agent, env, observations, states, timestep=timestep, timesteps=2 * T, on_phase=on_phase)
            observations, states = step.next_observations, step.next_states
    batched = [group.batched for group in getattr(agent, "groups", ())]
    return {
        "config": config.name,
        "envs": num_envs,
        "agent": which,
        "batched": "-" if which == "skrl" else ("yes" if all(batched) else "no" if not any(batched) else "partly"),
        "at_start": at_start,
        "before_update": before_update,
        "peak": mode.peak,
        "where": mode.where,
        "seconds": time.perf_counter() - start,
        "breakdown": sorted(mode.breakdown.items(), key=lambda item: -item[1])[:15],
    }


# ---------------------------------------------------------------------------------------------------- the table


def run_one(config: str, which: str, num_envs: int, device: str, threads: int) -> dict:
    """:func:`measure` in a fresh Python process (nothing of an earlier agent is alive)."""
    from bench_common import run_json

    return run_json([__file__, "--one", config, which, str(num_envs), "--device", device, "--threads", str(threads)])


HEADER = [
    "config",
    "envs",
    "agent",
    "batched",
    "live before the update (MiB)",
    "peak (MiB)",
    "peak / skrl's",
    "peak at",
]
NAMES = {
    "skrl": "skrl MAPPO",
    "ours-batched": "ours, batched",
    "ours-batched-one-pass": "ours, batched, all agents in one pass",
    "ours-one-by-one": "ours, agents one by one",
}


def table_rows(results: list[dict]) -> list[list[str]]:
    skrl = {(r["config"], r["envs"]): r["peak"] for r in results if r["agent"] == "skrl"}
    rows = []
    for r in results:
        base = skrl.get((r["config"], r["envs"]))
        ratio = f"{r['peak'] / base:.2f}" if base else "-"
        rows.append(
            [
                r["config"],
                str(r["envs"]),
                NAMES[r["agent"]],
                r["batched"],
                f"{r['before_update'] / MIB:.0f}",
                f"{r['peak'] / MIB:.0f}",
                ratio,
                r["where"],
            ]
        )
    return rows


def write_csv(path: str, results: list[dict], argv: list[str]) -> None:
    import skrl

    with open(path, "w", newline="") as f:
        f.write(f"# command: {' '.join(['python benchmarks/memory_peak.py', *argv])}\n")
        f.write(
            f"# machine: exact counts, the same on any machine (torch {torch.__version__.split('+')[0]}, "
            f"skrl {skrl.__version__}; run on {platform.machine()} CPU)\n"
        )
        f.write(f"# date: {datetime.date.today().isoformat()}\n")
        notes = "; ".join(f"{name}: {config.describe()}" for name, config in CONFIGS.items())
        f.write(f"# note: {notes}\n")
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(table_rows(results))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {list(CONFIGS)}")
    parser.add_argument("--envs", default="512,1024,2048,4096", help="comma-separated numbers of envs")
    parser.add_argument("--agents", default=",".join(AGENTS), help=f"comma-separated subset of {AGENTS}")
    parser.add_argument("--device", default="cpu", help="torch device (the counts do not depend on it)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the counts do not depend on them)")
    parser.add_argument(
        "--csv", default=None, metavar="PATH", help="also write the table to PATH (make_tables.py form)"
    )
    parser.add_argument(
        "--one", nargs=3, metavar=("CONFIG", "AGENT", "ENVS"), help="measure one agent in this process, print JSON"
    )
    parser.add_argument("--explain", action="store_true", help="with --one: the bytes alive at the peak by site")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.one:
        torch.set_num_threads(args.threads)
        config, which, num_envs = args.one
        result = measure(CONFIGS[config], which, num_envs=int(num_envs), device=args.device, explain=args.explain)
        for site, size in result["breakdown"]:
            print(f"{size / MIB:9.1f} MiB  {site}", file=sys.stderr)
        print(json.dumps(result))
        return 0
    results = []
    for name in args.configs.split(","):
        for num_envs in (int(n) for n in args.envs.split(",")):
            for which in args.agents.split(","):
                result = run_one(name, which, num_envs, args.device, args.threads)
                results.append(result)
                print(
                    f"# {name}, {num_envs} envs, {which}: peak {result['peak'] / MIB:.0f} MiB "
                    f"({result['seconds']:.0f} s) at {result['where']}",
                    file=sys.stderr,
                )
    from bench_common import markdown_table

    print(markdown_table(HEADER, table_rows(results)))
    if args.csv:
        csv_argv = [a for i, a in enumerate(argv) if a != "--csv" and (i == 0 or argv[i - 1] != "--csv")]
        write_csv(args.csv, results, csv_argv)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
