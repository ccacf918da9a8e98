"""Every GPU target of docs/results/not_measured.md in one command that fits one device loan: about 8 minutes on one
H100/H200, start-up included, each measurement's row written as it finishes, then the result pages regenerated.

On a GPU machine that reaches no package registry, with the wheels of ``scripts/gpu_wheels.sh`` beside the working
tree (skrl, vmas, gymnasium, ...; torch is the machine's, this package the working tree itself)::

    python benchmarks/gpu_suite.py --wheels .gpu-wheels --runs $OUT/gpu_suite_runs.csv

and later, where the repository lives, with that file in ``docs/results/data/``::

    python benchmarks/gpu_suite.py --report

The measurements (:data:`PLAN`), cheapest first so that a cut-off run keeps the ones the issue asks for first:

1. ``compiled`` (target 39.4), eager: frames/s and the peak of ``torch.cuda.max_memory_allocated`` of skrl's MAPPO
   and ours (``batch_agent_models=True``) at Isaac Lab's Shadow-Handover config and with 8 agents sharing one 512-wide
   state (``memory_peak.py``'s configs), 4096 envs (``compiled_speed.py``'s :func:`measure`, each in a fresh process
   with an empty inductor cache);
2. ``scaling`` (targets 2 and 13): ms per env step of skrl's MAPPO and ours with per-agent models at 4, 16 and 64
   agents, null env, 4096 envs, 2x256 models, rollouts 50, 4 epochs x 4 mini-batches, with the compute floor and the
   peak memory;
3. ``memory`` (target 5): peak memory at 16 agents, rollouts 100, against the bytes of the stored rollout tensors;
4. ``compiled`` (target 39.4), compiled and with CUDA graphs (``torch.compile``'s ``reduce-overhead``);
5. ``vmas`` (target 1): training frames/s of ours (per-agent and shared models) against the env alone, VMAS
   ``navigation``, 4 and 16 agents;
6. ``maddpg`` (targets 4 and 13): MADDPG frames/s and ms per gradient step at 4, 16 and 64 agents.

Each measurement runs in a child process with what is left of ``--budget`` as its limit (and at most
``--limit`` seconds); a row is appended to ``--runs`` as soon as the child prints it, so a run cut short keeps what it
measured, and the rows not reached say so. Target 6 (learning runs of 10M frames) does not fit a loan and is left out.
``--report`` (run at the end, or alone) turns the rows into the data files ``gpu_*.csv`` beside ``--runs``, the page
``docs/results/gpu.md``, the result column of ``data/gpu_targets.csv`` (``not_measured.md``), and runs
``docs/results/make_tables.py`` on that folder.

``--smoke`` runs every step at tiny sizes on the CPU (the compiled and CUDA-graph variants left out: compiling takes
minutes on a CPU) into a folder of its own; ``tests/test_gpu_suite.py`` runs it so that the suite cannot rot.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(REPO, "docs", "results")
MIB = 2**20
COLUMNS = (
    "step",
    "target",
    "config",
    "variant",
    "agents",
    "envs",
    "frames/s",
    "ms/step",
    "peak MiB",
    "first s",
    "stored MiB",
    "floor ms",
    "status",
)
"""The rows of ``--runs``: one measurement each (cells not measured are ``-``)."""
WHEELS = ("skrl", "vmas", "gymnasium", "farama-notifications", "gym", "gym-notices", "pettingzoo")
"""What ``--wheels`` installs (``scripts/gpu_wheels.sh`` downloads them)."""

FULL = {
    "device": "cuda",
    "envs": 4096,
    "compiled_timesteps": 64,
    "scaling": {"agents": (4, 16, 64), "hidden": (256, 256), "rollouts": 50, "timesteps": 100},
    "memory": {"agents": 16, "hidden": (256, 256), "rollouts": 100, "timesteps": 100},
    "vmas": {"agents": (4, 16), "hidden": (256, 256), "rollouts": 100, "timesteps": 100},
    "maddpg": {"agents": (4, 16, 64), "hidden": (256, 256), "batch_size": 256, "memory_size": 50, "timesteps": 50},
}
SMOKE = {
    "device": "cpu",
    "envs": 8,
    "compiled_timesteps": 16,
    "scaling": {"agents": (2, 4), "hidden": (16, 16), "rollouts": 4, "timesteps": 4},
    "memory": {"agents": 4, "hidden": (16, 16), "rollouts": 4, "timesteps": 4},
    "vmas": {"agents": (2,), "hidden": (16, 16), "rollouts": 4, "timesteps": 4},
    "maddpg": {"agents": (2,), "hidden": (16, 16), "batch_size": 16, "memory_size": 20, "timesteps": 4},
}
"""The sizes of a real run and of ``--smoke``."""
COMPILED_CONFIGS = ("handover", "8-agents")


def plan(sizes: dict, *, smoke: bool) -> list[dict]:
    """The children to run, in order: each ``{"step", "target", "measurements": [...]}`` (a child runs its
    measurements one after another and prints a row for each)."""
    envs, device = sizes["envs"], sizes["device"]
    children: list[dict] = []

    def compiled(variants):
        configs = COMPILED_CONFIGS[:1] if smoke else COMPILED_CONFIGS  # smoke: the code path, once
        runs = [
            {"config": config, "variant": variant, "envs": envs, "timesteps": sizes["compiled_timesteps"]}
            for config in configs
            for variant in variants
        ]
        # compiled code must not be found in another run's cache or dynamo state: one process per run (smoke: eager
        # only, one process)
        return [runs] if smoke else [[run] for run in runs]

    for runs in compiled(("skrl", "ours-eager")):
        children.append({"step": "compiled", "target": "39.4", "measurements": runs})

    def by_agents(step, target, section, variants):
        """One process per number of agents (smoke: one for all)."""
        runs = [
            [{"variant": variant, "agents": agents, "envs": envs, **_sizes(section)} for variant in variants]
            for agents in section["agents"]
        ]
        for measurements in [[m for ms in runs for m in ms]] if smoke else runs:
            children.append({"step": step, "target": target, "measurements": measurements})

    by_agents("scaling", "2", sizes["scaling"], ("skrl-per-agent", "ours-per-agent"))
    memory = sizes["memory"]
    children.append(
        {
            "step": "memory",
            "target": "5",
            "measurements": [
                {"variant": variant, "agents": memory["agents"], "envs": envs, **_sizes(memory)}
                for variant in ("ours-per-agent", "skrl-per-agent")
            ],
        }
    )
    if not smoke:
        for runs in compiled(("ours-compiled", "ours-cuda-graphs")):
            children.append({"step": "compiled", "target": "39.4", "measurements": runs})
    by_agents("vmas", "1", sizes["vmas"], ("env alone", "ours-per-agent", "ours-shared"))
    maddpg = sizes["maddpg"]
    children.append(
        {
            "step": "maddpg",
            "target": "4",
            "measurements": [
                {"variant": "ours-per-agent", "agents": agents, "envs": envs, **_sizes(maddpg)}
                for agents in maddpg["agents"]
            ],
        }
    )
    for child in children:
        for measurement in child["measurements"]:
            measurement["device"] = device
    return children


def _sizes(section: dict) -> dict:
    return {key: value for key, value in section.items() if key != "agents"}


# ---------------------------------------------------------------------------------------------------- measuring


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> str:
    import torch

    return f"{torch.cuda.max_memory_allocated() / MIB:.0f}" if device.startswith("cuda") else "-"


def _row(child: dict, m: dict, **values) -> dict:
    row = dict.fromkeys(COLUMNS, "-")
    row.update(step=child["step"], target=child["target"], variant=m["variant"], envs=m["envs"], status="ok")
    row.update({key: m[key] for key in ("config", "agents") if key in m})
    row.update(values)
    return row


def measure_compiled(child: dict, m: dict) -> dict:
    import compiled_speed

    result = compiled_speed.measure(
        m["config"], m["variant"], num_envs=m["envs"], timesteps=m["timesteps"], device=m["device"]
    )
    peak = f"{result['peak'] / MIB:.0f}" if result["peak"] is not None else "-"
    return _row(
        child,
        m,
        agents=compiled_speed_agents(m["config"]),
        **{"frames/s": f"{result['frames_per_second']:.0f}", "peak MiB": peak},
        **{"first s": f"{result['first_seconds']:.1f}"},
    )


def compiled_speed_agents(config: str) -> int:
    import memory_peak

    return memory_peak.CONFIGS[config].agents


def _null_agent(m: dict, *, seed: int = 0):
    from bench_common import TrainCfg, make_agent

    from skrl_marl_ext.envs.null import make_null_env

    env = make_null_env(num_envs=m["envs"], num_agents=m["agents"], obs_size=16, device=m["device"], seed=seed)
    cfg = TrainCfg(rollouts=m["rollouts"], epochs=4, minibatches=4, hidden=tuple(m["hidden"]))
    algo = "skrl-mappo" if m["variant"].startswith("skrl") else "ours-mappo"
    return make_agent(algo, env, shared=False, cfg=cfg, device=m["device"], seed=seed), env, cfg


def measure_scaling(child: dict, m: dict) -> dict:
    from bench_common import flops_per_env_step, matmul_flops_per_second, round_up, train_frames_per_second

    _reset_peak(m["device"])
    agent, env, cfg = _null_agent(m)
    timesteps = round_up(m["timesteps"], m["rollouts"])
    fps = train_frames_per_second(agent, env, timesteps=timesteps, warmup=m["rollouts"])
    ms = 1000 * m["envs"] / fps
    rate = matmul_flops_per_second(width=max(m["hidden"]), device=m["device"])
    floor = 1000 * flops_per_env_step(agent, num_envs=m["envs"], epochs=cfg.epochs) / rate
    values = {"frames/s": f"{fps:.0f}", "ms/step": f"{ms:.2f}", "floor ms": f"{floor:.2f}"}
    return _row(child, m, **values, **{"peak MiB": _peak_mib(m["device"])})


def _stored_bytes(agent) -> int:
    """Bytes of the rollout tensors an agent keeps: ours, its groups' rollout buffers; skrl's, its memories'."""
    if hasattr(agent, "groups"):
        tensors = [t for group in agent.groups for t in group.rollout.tensors.values()]
    else:
        tensors = [t for memory in agent.memories.values() for t in memory.tensors.values()]
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_memory(child: dict, m: dict) -> dict:
    from bench_common import round_up, train_frames_per_second

    _reset_peak(m["device"])
    agent, env, _ = _null_agent(m)
    fps = train_frames_per_second(agent, env, timesteps=round_up(m["timesteps"], m["rollouts"]), warmup=m["rollouts"])
    stored = f"{_stored_bytes(agent) / MIB:.4g}"
    return _row(child, m, **{"frames/s": f"{fps:.0f}", "peak MiB": _peak_mib(m["device"]), "stored MiB": stored})


def measure_vmas(child: dict, m: dict) -> dict:
    from bench_common import TrainCfg, env_frames_per_second, make_agent, make_env, round_up, train_frames_per_second

    try:
        import vmas  # noqa: F401
    except ImportError:
        return _row(child, m, status="skipped: vmas is not installed")
    env = make_env("vmas:navigation", num_envs=m["envs"], agents=m["agents"], device=m["device"])
    timesteps = round_up(m["timesteps"], m["rollouts"])
    _reset_peak(m["device"])
    if m["variant"] == "env alone":
        fps = env_frames_per_second(env, timesteps=timesteps)
    else:
        cfg = TrainCfg(rollouts=m["rollouts"], epochs=4, minibatches=4, hidden=tuple(m["hidden"]))
        shared = m["variant"] == "ours-shared"
        agent = make_agent("ours-mappo", env, shared=shared, cfg=cfg, device=m["device"])
        fps = train_frames_per_second(agent, env, timesteps=timesteps, warmup=m["rollouts"])
    return _row(child, m, config="navigation", **{"frames/s": f"{fps:.0f}", "peak MiB": _peak_mib(m["device"])})


def measure_maddpg(child: dict, m: dict) -> dict:
    import maddpg_scaling

    _reset_peak(m["device"])
    args = argparse.Namespace(
        num_envs=m["envs"],
        hidden=",".join(str(h) for h in m["hidden"]),
        batch_size=m["batch_size"],
        memory_size=m["memory_size"],
        shared=False,
        loop=False,
        twin=False,
        device=m["device"],
        warmup=max(4, m["timesteps"] // 2),
        timesteps=m["timesteps"],
    )
    fps, gradient_ms = maddpg_scaling.run(m["agents"], args)
    values = {"frames/s": f"{fps:.0f}", "ms/step": f"{gradient_ms:.2f}", "peak MiB": _peak_mib(m["device"])}
    return _row(child, m, config="spread", **values)


MEASURE = {
    "compiled": measure_compiled,
    "scaling": measure_scaling,
    "memory": measure_memory,
    "vmas": measure_vmas,
    "maddpg": measure_maddpg,
}


def child_main(spec: str) -> int:
    """``--child JSON``: run one child's measurements here, printing ``ROW <json>`` after each."""
    import torch

    child = json.loads(spec)
    torch.set_num_threads(1 if child["measurements"][0]["device"] == "cpu" else torch.get_num_threads())
    for m in child["measurements"]:
        try:
            row = MEASURE[child["step"]](child, m)
        except Exception as e:  # the next measurement may still run (an out-of-memory at 64 agents, say)
            message = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            row = _row(child, m, status=f"failed: {message}")
            if "cuda" in m["device"]:
                torch.cuda.empty_cache()
        print("ROW " + json.dumps(row), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------- the suite


def read_rows(path: str) -> tuple[dict[str, list[str]], list[dict[str, str]]]:
    """A data file's ``# key: value`` lines and rows (``docs/results/make_tables.py``'s format)."""
    if not os.path.isfile(path):
        return {}, []
    meta: dict[str, list[str]] = {}
    body = []
    with open(path) as file:
        for line in file:
            if line.startswith("#") and not body:
                key, _, value = line[1:].partition(":")
                meta.setdefault(key.strip(), []).append(value.strip())
            elif line.strip():
                body.append(line)
    return meta, list(csv.DictReader(body))


def write_rows(path: str, meta: dict[str, list[str]], columns, rows: list[dict]) -> None:
    """Write a data file whole (a temporary file renamed over it: a cut-off write leaves the last one)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", newline="") as file:
        for key, values in meta.items():
            for value in values:
                file.write(f"# {key}: {value}\n")
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[row.get(column, "-") for column in columns] for row in rows])
    os.replace(path + ".tmp", path)


def machine(device: str) -> str:
    import skrl
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        name = (
            f"one {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
        )
        name += f", CUDA {torch.version.cuda}"
    else:
        name = f"CPU only ({os.cpu_count()} cores)"
    versions = f"Python {platform.python_version()}, torch {torch.__version__}, skrl {skrl.__version__}"
    return f"{name}, {os.cpu_count()} CPU cores; {versions}"


def install_wheels(folder: str) -> str:
    """Install :data:`WHEELS` from ``folder`` offline into a folder of their own; return it (put first on the path
    of this process and of the children)."""
    target = os.path.join(tempfile.gettempdir(), "gpu_suite_site")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", folder, "--no-deps"]
    command += ["--no-compile", "--upgrade", "--target", target, *WHEELS]
    subprocess.run(command, check=True)
    return target


def run_child(child: dict, *, limit: float, env: dict, log) -> list[dict]:
    """Run one child with ``limit`` seconds; its rows as they come (a child cut off keeps the rows it printed)."""
    spec = {key: child[key] for key in ("step", "target", "measurements")}
    command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    cache = tempfile.mkdtemp(prefix="gpu_suite_inductor_")  # compiled code of no earlier run is found
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": cache}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)
    rows: list[dict] = []
    deadline = time.monotonic() + limit
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffered = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            process.kill()
            break
        if not selector.select(timeout=min(remaining, 5.0)):
            if process.poll() is not None:
                break
            continue
        chunk = os.read(process.stdout.fileno(), 65536).decode(errors="replace")
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split("\n")
        for line in lines:
            if line.startswith("ROW "):
                row = json.loads(line[4:])
                rows.append(row)
                _append(child["runs_path"], child["meta"], row)
                log(
                    f"{row['step']} {row['config']} {row['variant']}, {row['agents']} agents: {row['frames/s']} "
                    f"frames/s, {row['ms/step']} ms, peak {row['peak MiB']} MiB ({row['status']})"
                )
            elif line.strip():
                log("  " + line)
    process.wait()
    shutil.rmtree(cache, ignore_errors=True)
    status = f"not measured: its process was stopped after {limit:.0f} s" if time.monotonic() >= deadline else None
    if status is None and process.returncode:
        status = f"failed: the child exited with status {process.returncode}"
    for m in child["measurements"][len(rows) :]:
        row = _row(child, m, status=status or "not measured")
        if child["step"] == "compiled":
            row["agents"] = compiled_speed_agents(m["config"])
        rows.append(row)
        _append(child["runs_path"], child["meta"], row)
    return rows


def _append(path: str, meta: dict, row: dict) -> None:
    old_meta, rows = read_rows(path)
    write_rows(path, old_meta or meta, COLUMNS, [*rows, row])


def suite(args: argparse.Namespace) -> int:
    start = time.monotonic()
    log_file = open(args.log, "a") if args.log else None

    def log(text: str) -> None:
        line = f"[{time.monotonic() - start:6.1f} s] {text}"
        print(line, flush=True)
        if log_file:
            log_file.write(line + "\n")
            log_file.flush()

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.wheels:
        site = install_wheels(args.wheels)
        sys.path.insert(0, site)
        env["PYTHONPATH"] = os.pathsep.join([site, REPO, HERE])
        log(f"installed {', '.join(WHEELS)} from {args.wheels} into {site}")
    else:
        env["PYTHONPATH"] = os.pathsep.join([REPO, HERE, env.get("PYTHONPATH", "")])
    sizes = SMOKE if args.smoke else FULL
    device = "cpu" if args.smoke else args.device
    sizes = {**sizes, "device": device}
    mode = "--smoke" if args.smoke else f"--budget {args.budget:.0f}"
    meta = {
        "command": [f"python benchmarks/gpu_suite.py {mode}"],
        "machine": [machine(device)],
        "date": [datetime.date.today().isoformat()],
        "note": [
            "each measurement in a child process, rows written as they finish; frames/s and ms/step after one untimed "
            "rollout and update; peak: torch.cuda.max_memory_allocated over the measurement"
        ],
    }
    if os.path.exists(args.runs) and not args.keep:
        os.replace(args.runs, args.runs + ".previous")  # a new run starts a new file; the last one is kept beside
    children = plan(sizes, smoke=args.smoke)
    log(f"{sum(len(c['measurements']) for c in children)} measurements in {len(children)} processes on {device}")
    for child in children:
        child.update(runs_path=args.runs, meta=meta)
        left = args.budget - (time.monotonic() - start)
        if left <= 5:
            log(f"{child['step']}: no time left")
            for m in child["measurements"]:
                row = _row(child, m, status="not measured: the suite's time ran out")
                if child["step"] == "compiled":
                    row["agents"] = compiled_speed_agents(m["config"])
                _append(args.runs, meta, row)
            continue
        run_child(child, limit=min(left, args.limit), env=env, log=log)
    log(f"measurements done in {time.monotonic() - start:.0f} s")
    if not args.no_report:
        report(args.runs, results=args.results, log=log)
    if log_file:
        log_file.close()
    return 0


# ---------------------------------------------------------------------------------------------------- the report

PAGE = """# How fast is it on a GPU?

Generated by `benchmarks/gpu_suite.py --report` from `data/gpu_suite_runs.csv`, the rows of one run of
`benchmarks/gpu_suite.py` on a GPU machine (the sizes and settings of each step: the script's docstring). Each table
says its machine and date; a row whose status is not `ok` was not measured (the suite's time ran out, or it failed).
"""

SECTIONS = {
    "gpu_compiled": (
        "Compiled path (target 39.4): skrl's MAPPO and ours at Shadow-Handover's config and 8 agents sharing a state",
        "Frames/s once warm and peak `torch.cuda.max_memory_allocated`, 4096 envs; `first rollout + update` includes "
        "the compilation of the compiled variants.",
    ),
    "gpu_agent_scaling": (
        "Time per env step as agents grow (targets 2 and 13)",
        "Null env, 4096 envs, 2x256 tanh MLPs per agent, rollouts 50, 4 epochs x 4 mini-batches; the floor is the "
        "models' matrix products at the measured matmul rate.",
    ),
    "gpu_memory": (
        "Peak memory against the stored tensors (target 5)",
        "Null env, 16 agents, rollouts 100, 4096 envs: the peak of `torch.cuda.max_memory_allocated` over a rollout "
        "and its update, and the bytes of the rollout tensors the agent keeps (ours: its groups' rollout buffers; "
        "skrl: its memories).",
    ),
    "gpu_vmas": (
        "Training frames/s against the env alone, VMAS navigation (target 1)",
        "4096 envs, our MAPPO with per-agent and shared 2x256 models, rollouts 100.",
    ),
    "gpu_maddpg": (
        "MADDPG as agents grow (targets 4 and 13)",
        "Spread env, 4096 envs, per-agent 2x256 models batched, mini-batches of 256, one gradient step per env step.",
    ),
}


def _tables(rows: list[dict]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The data tables of :data:`SECTIONS` from the raw rows: ``name -> (header, rows)``."""
    tables: dict[str, tuple[list[str], list[list[str]]]] = {}

    def ok(row):
        return row["status"] == "ok"

    compiled = [row for row in rows if row["step"] == "compiled"]
    if compiled:
        header = ["config", "envs", "variant", "frames/s", "vs ours eager", "vs skrl", "first rollout + update (s)"]
        header += ["peak MiB", "status"]
        by = {(row["config"], row["variant"]): row for row in compiled}
        out = []
        for row in compiled:
            fps = float(row["frames/s"]) if ok(row) else None
            ratios = []
            for base in ("ours-eager", "skrl"):
                other = by.get((row["config"], base))
                ratio = "-"
                if fps and other and ok(other) and base != row["variant"]:
                    ratio = f"{fps / float(other['frames/s']):.2f}"
                ratios.append(ratio)
            out.append([row["config"], row["envs"], row["variant"], row["frames/s"], *ratios, row["first s"]])
            out[-1] += [row["peak MiB"], row["status"]]
        tables["gpu_compiled"] = (header, out)
    scaling = [row for row in rows if row["step"] == "scaling"]
    if scaling:
        header = ["agents", "variant", "ms/step", "skrl / ours", "floor ms/step", "vs floor", "peak MiB", "status"]
        out = []
        for row in scaling:
            skrl = next((r for r in scaling if r["agents"] == row["agents"] and r["variant"] == "skrl-per-agent"), None)
            ratio, versus = "-", "-"
            if ok(row) and row["variant"] != "skrl-per-agent" and skrl and ok(skrl):
                ratio = f"{float(skrl['ms/step']) / float(row['ms/step']):.2f}"
            if ok(row) and float(row["floor ms"]) > 0:  # a floor below the timer's resolution says nothing
                versus = f"{float(row['ms/step']) / float(row['floor ms']):.0f}x"
            out.append([row["agents"], row["variant"], row["ms/step"], ratio, row["floor ms"], versus])
            out[-1] += [row["peak MiB"], row["status"]]
        tables["gpu_agent_scaling"] = (header, out)
    memory = [row for row in rows if row["step"] == "memory"]
    if memory:
        header = ["agents", "envs", "variant", "peak MiB", "stored MiB", "peak / stored", "frames/s", "status"]
        out = []
        for row in memory:
            ratio = "-"
            if ok(row) and row["peak MiB"] != "-" and float(row["stored MiB"]) > 0:
                ratio = f"{float(row['peak MiB']) / float(row['stored MiB']):.2f}"
            out.append([row["agents"], row["envs"], row["variant"], row["peak MiB"], row["stored MiB"], ratio])
            out[-1] += [row["frames/s"], row["status"]]
        tables["gpu_memory"] = (header, out)
    vmas = [row for row in rows if row["step"] == "vmas"]
    if vmas:
        header = ["agents", "variant", "frames/s", "vs env alone", "peak MiB", "status"]
        out = []
        for row in vmas:
            alone = next((r for r in vmas if r["agents"] == row["agents"] and r["variant"] == "env alone"), None)
            ratio = "-"
            if ok(row) and row["variant"] != "env alone" and alone and ok(alone):
                ratio = f"{float(row['frames/s']) / float(alone['frames/s']):.2f}"
            out.append([row["agents"], row["variant"], row["frames/s"], ratio, row["peak MiB"], row["status"]])
        tables["gpu_vmas"] = (header, out)
    maddpg = [row for row in rows if row["step"] == "maddpg"]
    if maddpg:
        header = ["agents", "frames/s", "ms per gradient step", "peak MiB", "status"]
        out = [[r["agents"], r["frames/s"], r["ms/step"], r["peak MiB"], r["status"]] for r in maddpg]
        tables["gpu_maddpg"] = (header, out)
    return tables


TARGET_TABLES = {"1": "gpu_vmas", "2": "gpu_agent_scaling", "13 (GPU)": "gpu_agent_scaling", "4 (GPU)": "gpu_maddpg"}
TARGET_TABLES.update({"5": "gpu_memory", "39.4 (GPU)": "gpu_compiled", "2 (H100)": "gpu_agent_scaling"})


def report(runs: str, *, results: str, log=print) -> None:
    """The data files, the page and the targets' result column from the rows of ``runs`` (see the module docstring);
    then ``make_tables.py`` on ``results``."""
    meta, rows = read_rows(runs)
    if not rows:
        raise SystemExit(f"{runs}: no rows; run the suite first")
    data = os.path.join(results, "data")
    os.makedirs(data, exist_ok=True)
    kept = os.path.join(data, "gpu_suite_runs.csv")
    if os.path.abspath(runs) != os.path.abspath(kept):
        shutil.copyfile(runs, kept)
    tables = _tables(rows)
    measured_meta = {key: meta[key] for key in ("command", "machine", "date") if key in meta}
    page = [PAGE]
    if any("--smoke" in command for command in meta.get("command", [])):
        page.append("**A smoke run**: tiny sizes on the CPU, to check the suite; its figures measure nothing.\n")
    for name, (header, table_rows) in tables.items():
        note = {"note": [SECTIONS[name][1] + " Rows per measurement: data/gpu_suite_runs.csv"]}
        write_rows(
            os.path.join(data, f"{name}.csv"),
            {**measured_meta, **note},
            header,
            [dict(zip(header, row, strict=True)) for row in table_rows],
        )
        page += [f"## {SECTIONS[name][0]}\n", f"<!-- table: {name} -->\n<!-- end table -->\n"]
    with open(os.path.join(results, "gpu.md"), "w") as file:
        file.write("\n".join(page))
    targets = os.path.join(data, "gpu_targets.csv")
    targets_meta, target_rows = read_rows(targets)
    if target_rows:
        date = (meta.get("date") or ["?"])[0]
        for row in target_rows:
            name = TARGET_TABLES.get(row["target"])
            if name in tables and any(r[-1] == "ok" for r in tables[name][1]):
                row["result"] = f"measured {date}: gpu.md, {SECTIONS[name][0].split(' (')[0].lower()}"
        targets_meta["machine"] = [f"measured: {(meta.get('machine') or ['?'])[0]}"]
        targets_meta["date"] = [(meta.get("date") or ["?"])[0]]
        write_rows(targets, targets_meta, list(target_rows[0].keys()), target_rows)
    command = [sys.executable, os.path.join(RESULTS, "make_tables.py"), "--root", results]
    subprocess.run(command, check=True)
    log(f"wrote {', '.join(f'{name}.csv' for name in tables)} and gpu.md in {results}; tables regenerated")


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=None, help="the rows file (default: <results>/data/gpu_suite_runs.csv)")
    parser.add_argument("--results", default=RESULTS, help="the results folder the report writes (default: the repo's)")
    parser.add_argument("--wheels", default=None, help="install the suite's packages offline from this folder first")
    parser.add_argument("--device", default="cuda", help="(default: %(default)s)")
    parser.add_argument("--budget", type=float, default=420, help="seconds for the measurements (default: %(default)s)")
    parser.add_argument("--limit", type=float, default=240, help="seconds for one process at most (%(default)s)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, every step but the compiled ones")
    parser.add_argument("--keep", action="store_true", help="append to --runs instead of starting it anew")
    parser.add_argument("--log", default=None, help="also write the suite's log to this file")
    parser.add_argument("--no-report", action="store_true", help="measure only")
    parser.add_argument("--report", action="store_true", help="only regenerate the data files and pages from --runs")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = os.path.join(args.results, "data", "gpu_suite_runs.csv")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        sys.path.insert(0, HERE)
        return child_main(args.child)
    if args.report:
        report(args.runs, results=args.results)
        return 0
    return suite(args)


if __name__ == "__main__":
    sys.exit(main())
