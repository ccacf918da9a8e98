"""Learning on Isaac Lab 3.0's ``Isaac-Pendulum-MARL-Direct`` (kit-less, CPU): skrl's MAPPO and IPPO against our
MAPPO and IPPO at the task's shipped config and our HAPPO and MADDPG at the package's configs, over seeds (resumable).

Every run builds the env (``scripts/isaaclab_smoke.py``'s ``make_env``, as ``isaaclab train`` builds it, seeded with
the run's seed), wraps it with skrl's ``wrap_env(env, "isaaclab")`` and :class:`skrl_marl_ext.envs.EpisodeRecorder`,
builds the agent from its YAML file with its ``seed`` set to the run's seed, and trains it with the file's
``SequentialTrainer`` for the file's timesteps (4800). Variants (:data:`VARIANTS`):

- ``skrl-mappo``, ``skrl-ippo``: skrl's Runner (``skrl.utils.runner.torch.Runner``) on the task's
  ``skrl_marl_mappo_cfg.yaml`` / ``skrl_marl_ippo_cfg.yaml`` in the installed ``isaaclab_tasks``, as ``isaaclab train``
  builds them;
- ``mappo``, ``ippo``: our Runner on the same files, built as ``skrl-marl isaaclab train`` builds it
  (:func:`skrl_marl_ext.isaaclab.import_runner`);
- ``happo``, ``maddpg``: the same, on the configs ``skrl-marl isaaclab`` registers for the task
  (``skrl_marl_ext/configs/isaaclab/pendulum_happo.yaml``: the MAPPO file with ``agent: class: HAPPO``;
  ``pendulum_maddpg.yaml``).

The env gives both agents the same team reward, so an episode's return per agent (the mean over the two agents) is
the team's return. Each run appends one row to ``--runs`` (a data file of ``docs/results/make_tables.py``): the mean
episode return over the episodes that ended in the second half of the run's steps and in its last tenth, the
episodes, the training and setup seconds, and the mean return in each tenth of the run's steps (``--report`` adds
training frames/s: envs x steps / training seconds). A (variant, seed)
already there is skipped. Each run is a fresh process, two at a time with ``--jobs 2``, one torch thread each.
``--report`` writes the summary table ``--summary`` and the plot ``--plot`` from the rows.

The robot is the stand-in of ``scripts/make_isaaclab_assets.py`` (masses and sizes of our choosing, not NVIDIA's
asset's), so every return here is a return of the stand-in. Run it with the Isaac Lab interpreter::

    . .isaaclab-cache/env.sh
    .isaaclab-venv/bin/python benchmarks/isaaclab_pendulum_learning.py --seeds 0-4 --jobs 2
    .isaaclab-venv/bin/python benchmarks/isaaclab_pendulum_learning.py --report

A tiny end-to-end check: ``--num-envs 8 --timesteps 64 --seeds 0 --runs /tmp/p.csv``, then ``--report --runs /tmp/p.csv
--summary /tmp/s.csv --plot /tmp/p.png``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(REPO, "docs", "results", "data")
TASK = "Isaac-Pendulum-MARL-Direct"
BINS = 10
COLUMNS = (
    "variant",
    "seed",
    "second-half return",
    "last-tenth return",
    "episodes",
    "train s",
    "setup s",
    "return by tenth of the run",
)


@dataclasses.dataclass(frozen=True)
class Variant:
    runner: str
    """``skrl`` (skrl's Runner) or ``ours`` (:class:`skrl_marl_ext.runner.Runner`)."""
    yaml: str
    """The task's YAML file in the installed ``isaaclab_tasks`` (``mappo`` or ``ippo``), or ``package:<name>``, the
    package's ``configs/isaaclab/<name>.yaml``."""
    agent_class: str
    """``agent: class`` in the config."""
    compare_with: str | None = None
    """The skrl variant this one is held against (ours only)."""
    overrides: tuple[tuple[str, object], ...] = ()
    """Config values set on top of the YAML file's, by dotted key (``agent.batch_size``): an ablation or a tuning
    candidate; none for the shipped configs."""


MADDPG_DEFAULTS = (("agent.gradient_steps", 2), ("models.team_critic", False))
"""The package's MADDPG defaults where ``pendulum_maddpg.yaml`` differs from them (2 gradient steps per env step, a
critic per agent)."""

VARIANTS = {
    "skrl-mappo": Variant("skrl", "mappo", "MAPPO"),
    "skrl-ippo": Variant("skrl", "ippo", "IPPO"),
    "mappo": Variant("ours", "mappo", "MAPPO", "skrl-mappo"),
    "ippo": Variant("ours", "ippo", "IPPO", "skrl-ippo"),
    "happo": Variant("ours", "package:pendulum_happo", "HAPPO", "skrl-mappo"),
    "maddpg": Variant("ours", "package:pendulum_maddpg", "MADDPG", "skrl-mappo"),
    # an ablation, not the shipped config: time-outs bootstrapped from V(s_t), as rsl_rl does on Isaac Lab
    "mappo-tlb": Variant("ours", "mappo", "MAPPO", "skrl-mappo", (("agent.time_limit_bootstrap", True),)),
    # MADDPG tuning: the shipped file holds the values chosen (4 gradient steps per env step, one team critic); each
    # candidate sets what it changes from them, the package defaults the file held before included
    "maddpg-untuned": Variant("ours", "package:pendulum_maddpg", "MADDPG", "skrl-mappo", (*MADDPG_DEFAULTS,)),
    "maddpg-lr": Variant(
        "ours",
        "package:pendulum_maddpg",
        "MADDPG",
        "skrl-mappo",
        (*MADDPG_DEFAULTS, ("agent.actor_learning_rate", 1.0e-3), ("agent.critic_learning_rate", 2.0e-3)),
    ),
    "maddpg-g4": Variant("ours", "package:pendulum_maddpg", "MADDPG", "skrl-mappo", (("models.team_critic", False),)),
    "maddpg-team": Variant("ours", "package:pendulum_maddpg", "MADDPG", "skrl-mappo", (("agent.gradient_steps", 2),)),
}


def installed_yaml(name: str) -> str:
    """Path of the task's ``skrl_marl_<name>_cfg.yaml`` in the installed ``isaaclab_tasks``, or of the package's
    ``configs/isaaclab/<name>.yaml`` for ``package:<name>``."""
    import importlib

    if name.startswith("package:"):
        return os.path.join(REPO, "skrl_marl_ext", "configs", "isaaclab", name.split(":", 1)[1] + ".yaml")

    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers the tasks)

    module, file = gym.spec(TASK).kwargs[f"skrl_{name}_cfg_entry_point"].split(":")
    return os.path.join(os.path.dirname(importlib.import_module(module).__file__), file)


def run_config(variant: Variant, *, seed: int, timesteps: int | None, directory: str) -> dict:
    """The YAML file as skrl's Runner reads it; set: the seed and the agent class; off: TensorBoard, checkpoints and
    the progress bar (they do not change training)."""
    from skrl.utils.runner.torch import Runner

    cfg = Runner.load_cfg_from_yaml(installed_yaml(variant.yaml))
    cfg["seed"] = seed
    cfg["agent"]["class"] = variant.agent_class
    for key, value in variant.overrides:
        *path, last = key.split(".")
        section = cfg
        for name in path:
            section = section[name]
        section[last] = value
    cfg["agent"]["experiment"].update(directory=directory, write_interval=0, checkpoint_interval=0)
    cfg["trainer"].update(disable_progressbar=True, headless=True, close_environment_at_exit=False)
    if timesteps is not None:
        cfg["trainer"]["timesteps"] = timesteps
    return cfg


def window_mean(episodes: list[tuple[int, dict[str, float]]], start: float, end: float) -> float:
    """Mean over the episodes that ended at a step in ``(start, end]`` of their return per agent (nan if none)."""
    returns = [sum(r.values()) / len(r) for step, r in episodes if start < step <= end]
    return sum(returns) / len(returns) if returns else float("nan")


def run_one(name: str, seed: int, num_envs: int, timesteps: int | None) -> dict:
    """Train one (variant, seed) in this process; return its row."""
    import logging
    import tempfile

    import torch

    torch.set_num_threads(1)
    import skrl
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.utils.runner.torch import Runner as SkrlRunner

    from skrl_marl_ext.envs import EpisodeRecorder
    from skrl_marl_ext.isaaclab import import_runner

    skrl.logger.setLevel(logging.WARNING)
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from isaaclab_smoke import make_env

    variant = VARIANTS[name]
    start = time.perf_counter()
    env, launch = make_env(num_envs, seed=seed)
    recorder = EpisodeRecorder(wrap_env(env, "isaaclab"))
    with tempfile.TemporaryDirectory(prefix="isaaclab_pendulum_") as directory:
        cfg = run_config(variant, seed=seed, timesteps=timesteps, directory=directory)
        runner = (SkrlRunner if variant.runner == "skrl" else import_runner("torch"))(recorder, cfg)
        expected = "skrl.multi_agents" if variant.runner == "skrl" else "skrl_marl_ext"
        agent = type(runner.agent)
        if not agent.__module__.startswith(expected) or agent.__name__ != variant.agent_class:
            raise RuntimeError(f"{name}: built {agent.__module__}.{agent.__name__}")
        setup = time.perf_counter() - start
        start = time.perf_counter()
        runner.run("train")
        train = time.perf_counter() - start
    steps = cfg["trainer"]["timesteps"]
    env.close()
    launch.__exit__(None, None, None)
    episodes = recorder.episodes
    curve = [window_mean(episodes, steps * b / BINS, steps * (b + 1) / BINS) for b in range(BINS)]
    return {
        "variant": name,
        "seed": seed,
        "second-half return": f"{window_mean(episodes, steps / 2, steps):.2f}",
        "last-tenth return": f"{curve[-1]:.2f}",
        "episodes": len(episodes),
        "train s": f"{train:.0f}",
        "setup s": f"{setup:.0f}",
        "return by tenth of the run": " ".join(f"{value:.2f}" for value in curve),
    }


def _child(argv: list[str]) -> int:
    """``--child VARIANT SEED NUM_ENVS TIMESTEPS``: one run; its row as one CSV line on the last line of stdout."""
    name, seed, num_envs, timesteps = argv
    row = run_one(name, int(seed), int(num_envs), int(timesteps) if timesteps != "-" else None)
    out = io.StringIO()
    csv.writer(out).writerow([row[column] for column in COLUMNS])
    print("ROW " + out.getvalue().strip(), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------- data files


def read_data(path: str) -> tuple[dict[str, list[str]], list[dict[str, str]]]:
    """A data file's ``# key: value`` lines and its rows (``docs/results/make_tables.py``'s format)."""
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


def write_data(path: str, meta: dict[str, list[str]], columns, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", newline="") as file:
        for key, values in meta.items():
            for value in values:
                file.write(f"# {key}: {value}\n")
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[row[column] for column in columns] for row in rows])
    os.replace(path + ".tmp", path)


def machine() -> str:
    """The CPU in words, e.g. ``a 2-core Intel(R) Xeon(R) Processor virtual machine``."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
        virtual = " virtual machine" if "Hypervisor vendor" in lscpu else ""
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model, virtual = "unknown CPU", ""
    return f"a {os.cpu_count()}-core {model}{virtual}"


def versions() -> str:
    import importlib.metadata as metadata

    names = ("torch", "skrl", "isaaclab", "newton", "warp-lang", "mujoco-warp")
    found = ", ".join(f"{name} {metadata.version(name)}" for name in names)
    return f"Python {sys.version.split()[0]}, {found}"


def runs_meta(old: dict[str, list[str]], args: argparse.Namespace, *, jobs: int) -> dict[str, list[str]]:
    """The runs file's ``#`` lines: the commands, machine and versions, the dates from the first run to today."""
    today = time.strftime("%Y-%m-%d")
    first = old.get("date", [today])[0].split(" to ")[0]
    command = (
        f".isaaclab-venv/bin/python benchmarks/isaaclab_pendulum_learning.py --seeds {args.seeds_text} --jobs {jobs}"
    )
    if args.variants != list(VARIANTS):
        command += f" --variants {','.join(args.variants)}"
    if args.num_envs != 64 or args.timesteps:
        command += f" --num-envs {args.num_envs}" + (f" --timesteps {args.timesteps}" if args.timesteps else "")
    commands = old.get("command", []) or [". .isaaclab-cache/env.sh"]
    return {
        "command": commands if command in commands else [*commands, command],
        "machine": old.get("machine", [f"{machine()}, {jobs} runs at a time, one torch thread each; {versions()}"]),
        "date": [first if first == today else f"{first} to {today}"],
        "note": [
            f"{TASK}, kit-less on the CPU, with the stand-in robot of scripts/make_isaaclab_assets.py (masses and "
            f"sizes ours, not NVIDIA's asset's); {args.num_envs} envs x {args.timesteps or 4800} steps per run; returns: mean episode "
            "return per agent (the team reward) over the episodes that ended in the run's second half / last tenth "
            "/ each tenth of its steps; train s: skrl's SequentialTrainer.train()"
        ],
    }


# ---------------------------------------------------------------------------------------------------- the study


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


def study(args: argparse.Namespace) -> int:
    meta, rows = read_data(args.runs)
    if rows and tuple(rows[0].keys()) != COLUMNS:
        raise SystemExit(f"{args.runs} has columns {list(rows[0])}, this script writes {list(COLUMNS)}")
    done = {(row["variant"], int(row["seed"])) for row in rows}
    todo = [(name, seed) for seed in parse_seeds(args.seeds) for name in args.variants if (name, seed) not in done]
    print(f"{len(todo)} runs to do, {len(done)} in {args.runs}; {args.jobs} at a time", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    timesteps = str(args.timesteps) if args.timesteps else "-"
    running: list[tuple[tuple[str, int], subprocess.Popen]] = []
    failures = 0
    while todo or running:
        while todo and len(running) < args.jobs:
            name, seed = todo.pop(0)
            command = [sys.executable, os.path.abspath(__file__), "--child", name, str(seed), str(args.num_envs)]
            process = subprocess.Popen(
                [*command, timesteps], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            running.append(((name, seed), process))
        time.sleep(1.0)
        for job in [job for job in running if job[1].poll() is not None]:
            running.remove(job)
            (name, seed), process = job
            output = process.stdout.read()
            lines = [line[4:] for line in output.splitlines() if line.startswith("ROW ")]
            if process.returncode != 0 or not lines:
                failures += 1
                print(f"FAILED {name} seed {seed} (exit {process.returncode}):\n{output[-4000:]}", flush=True)
                continue
            row = dict(zip(COLUMNS, next(csv.reader([lines[-1]])), strict=True))
            meta, rows = read_data(args.runs)  # re-read: rows stay in variant, seed order
            rows.append(row)
            rows.sort(key=lambda r: (list(VARIANTS).index(r["variant"]), int(r["seed"])))
            write_data(args.runs, runs_meta(meta, args, jobs=args.jobs), COLUMNS, rows)
            print(
                f"{name} seed {seed}: second half {row['second-half return']}, last tenth {row['last-tenth return']}, "
                f"{row['episodes']} episodes, {row['train s']} s training + {row['setup s']} s setup",
                flush=True,
            )
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------------- report


def _t975(df: int) -> float:
    """Student's t 97.5% quantile (tabulated; 1.96 beyond 30)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    return table.get(df, 2.2 if df < 15 else 2.1 if df < 30 else 1.96)


def _mean_var(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else float("nan")
    return mean, var


def difference(ours: list[float], theirs: list[float]) -> str:
    """``ours - theirs`` of the means, with Welch's 95% interval."""
    (m1, v1), (m2, v2) = _mean_var(ours), _mean_var(theirs)
    diff = m1 - m2
    if len(ours) < 2 or len(theirs) < 2:
        return f"{diff:+.2f}"
    s1, s2 = v1 / len(ours), v2 / len(theirs)
    se = math.sqrt(s1 + s2)
    if se == 0:
        return f"{diff:+.2f}"
    df = (s1 + s2) ** 2 / (s1**2 / (len(ours) - 1) + s2**2 / (len(theirs) - 1))
    half = _t975(max(1, int(df))) * se
    return f"{diff:+.2f} [{diff - half:+.2f}, {diff + half:+.2f}]"


SUMMARY = (
    "variant",
    "runs",
    "second-half return: mean (min-max)",
    "per seed",
    "ours - skrl (95% CI)",
    "last-tenth return: mean (min-max)",
    "episodes per run",
    "train s per run: mean (min-max)",
    "training frames/s per run: median (min-max)",
)


def frames_per_second(seconds: list[float], *, frames: int) -> str:
    """Median (min-max) over runs of ``frames / seconds``."""
    rates = sorted(frames / s for s in seconds if s > 0)
    if not rates:
        return "-"
    return f"{statistics.median(rates):.0f} ({rates[0]:.0f}-{rates[-1]:.0f})"


def report(args: argparse.Namespace) -> int:
    meta, rows = read_data(args.runs)
    if not rows:
        raise SystemExit(f"no runs in {args.runs}")
    by_variant = {name: [row for row in rows if row["variant"] == name] for name in VARIANTS}
    by_variant = {name: runs for name, runs in by_variant.items() if runs}

    def values(name: str, column: str) -> list[float]:
        return [float(row[column]) for row in by_variant.get(name, [])]

    def spread(xs: list[float], digits: int = 2) -> str:
        return f"{sum(xs) / len(xs):.{digits}f} ({min(xs):.{digits}f} to {max(xs):.{digits}f})"

    summary = []
    for name, runs in by_variant.items():
        half = values(name, "second-half return")
        reference = VARIANTS[name].compare_with
        summary.append(
            {
                "variant": name,
                "runs": len(runs),
                SUMMARY[2]: spread(half),
                "per seed": " ".join(f"{x:.2f}" for x in half),
                SUMMARY[4]: (
                    f"{difference(half, values(reference, 'second-half return'))} vs {reference}"
                    if reference in by_variant
                    else "-"
                ),
                SUMMARY[5]: spread(values(name, "last-tenth return")),
                "episodes per run": f"{sum(values(name, 'episodes')) / len(runs):.0f}",
                SUMMARY[7]: spread(values(name, "train s"), 0),
                SUMMARY[8]: frames_per_second(values(name, "train s"), frames=args.num_envs * (args.timesteps or 4800)),
            }
        )
    summary_meta = {
        "command": [
            *meta.get("command", []),
            ".isaaclab-venv/bin/python benchmarks/isaaclab_pendulum_learning.py --report",
        ],
        "machine": meta.get("machine", ["unknown"]),
        "date": meta.get("date", ["unknown"]),
        "note": [
            (meta.get("note", [""])[0] + "; " if meta.get("note") else "")
            + "ours - skrl: difference of the means over seeds of the second-half return, Welch's 95% interval; "
            "rows per run in data/isaaclab_pendulum_runs.csv"
        ],
    }
    write_data(args.summary, summary_meta, SUMMARY, summary)
    print(f"wrote {args.summary}")
    plot(by_variant, args.plot, num_envs=args.num_envs)
    print(f"wrote {args.plot}")
    return 0


def plot(by_variant: dict[str, list[dict[str, str]]], path: str, *, num_envs: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"skrl-mappo": ("C0", "--"), "skrl-ippo": ("C1", "--"), "mappo": ("C0", "-"), "ippo": ("C1", "-")}
    styles.update(happo=("C2", "-"), maddpg=("C3", "-"))
    panels = (
        ("MAPPO file; HAPPO and MADDPG: the package's", ("skrl-mappo", "mappo", "happo", "maddpg")),
        ("IPPO file", ("skrl-ippo", "ippo")),
    )
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.4), sharey=True)
    for ax, (title, names) in zip(axes, panels, strict=True):
        for name in [name for name in names if name in by_variant]:
            runs = by_variant[name]
            curves = [[float(x) for x in row["return by tenth of the run"].split()] for row in runs]
            columns = list(zip(*curves, strict=True))
            xs = [(b + 0.5) / len(columns) for b in range(len(columns))]
            mean = [sum(c) / len(c) for c in columns]
            color, style = styles.get(name, (None, "-"))
            (line,) = ax.plot(xs, mean, style, color=color, linewidth=1.8, label=f"{name} ({len(runs)} seeds)")
            low, high = [min(c) for c in columns], [max(c) for c in columns]
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
        ax.axvspan(0.5, 1.0, color="gray", alpha=0.06, linewidth=0)
        ax.set_xlim(0, 1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("fraction of the run's 4800 steps (points: episodes ending in each tenth)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("episode return per agent (team reward)")
    fig.suptitle(
        f"{TASK}, {num_envs} envs, shipped skrl config; STAND-IN robot (not NVIDIA's asset)\n"
        "mean over seeds, band: min-max over seeds; shaded: the second half",
        fontsize=9,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variants",
        default=",".join(v for v in VARIANTS if not VARIANTS[v].overrides),
        help="comma-separated (default: %(default)s)",
    )
    parser.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2 (default: %(default)s)")
    parser.add_argument("--num-envs", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--timesteps", type=int, default=None, help="override the YAML's (for a quick check)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, one process each (default: 1)")
    parser.add_argument("--runs", default=os.path.join(DATA, "isaaclab_pendulum_runs.csv"))
    parser.add_argument("--report", action="store_true", help="write --summary and --plot from --runs")
    parser.add_argument("--summary", default=os.path.join(DATA, "isaaclab_pendulum.csv"))
    parser.add_argument("--plot", default=os.path.join(REPO, "docs", "images", "isaaclab_pendulum_learning.png"))
    args = parser.parse_args(argv)
    args.variants = args.variants.split(",")
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    args.seeds_text = args.seeds
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        try:
            return _child(argv[1:])
        except Exception:
            traceback.print_exc()
            return 1
    args = parse_args(argv)
    return report(args) if args.report else study(args)


if __name__ == "__main__":
    sys.exit(main())
