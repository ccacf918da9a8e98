"""Does ``skrl-marl train`` learn better with ``agent.time_limit_bootstrap`` on or off? Runs of the CLI itself, over
seeds (resumable).

Every run is one ``skrl-marl train`` process (``python -m skrl_marl_ext train``) with ``--seed``, ``--threads 1`` and
``--no-progress``, under ``nice -n 10``, on one of :data:`TASKS` with ``agent.time_limit_bootstrap`` set to
``false`` or ``true`` on its command line (so the result does not depend on the shipped YAML's default). From the
run's ``episodes.csv`` it appends one row to ``--csv``: the mean episode return per agent over the first and the last
10% of the finished episodes (as the CLI's summary line), the episodes, the wall time of the process, and a binned
learning curve (JSON, as ``learning_study.py`` stores it). A (task, setting, seed) already in the CSV is skipped; a
run holds the lock of its folder under ``--work-dir`` while it trains, so two studies side by side never train the
same run, and a killed run starts again from scratch. ``--report`` writes the results page's data file and plot.

The study (3 seeds x 2 settings x 2 tasks, two runs at a time on a 2-core machine), then the table and plot::

    python benchmarks/time_limit_bootstrap.py --seeds 0-2 --jobs 2
    python benchmarks/time_limit_bootstrap.py --report

A tiny end-to-end check: ``--tasks balance --seeds 0 --timesteps 200 --csv /tmp/tlb.csv``, then ``--report --csv
/tmp/tlb.csv --data /tmp/tlb_data.csv --plot /tmp/tlb.png``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from isaaclab_pendulum_learning import machine, parse_seeds, write_data  # noqa: E402
from learning_study import _frames, binned_curve, code_version, interval, mean_curve  # noqa: E402

TASKS = {
    "vmas:balance": [],
    "pettingzoo:mpe2.simple_spread_v3": [
        "--env",
        "pettingzoo:mpe2.simple_spread_v3",
        "--env-arg",
        "max_cycles=25",
        "--timesteps",
        "8000",
    ],
}
"""The tasks and their ``train`` options: ``skrl-marl train``'s default (VMAS balance, 128 envs x 4000 steps) and
README's MPE command (128 envs x 8000 steps)."""

SETTINGS = ("off", "on")
COLUMNS = (
    "task",
    "time_limit_bootstrap",
    "seed",
    "frames",
    "num_envs",
    "timesteps",
    "final_return",
    "first_return",
    "episodes",
    "wall_seconds",
    "code",
    "date",
    "command",
    "curve",
)
"""``final_return`` / ``first_return``: the mean episode return per agent over the last / first 10% of the run's
finished episodes; ``wall_seconds``: the whole ``train`` process; ``curve``: JSON ``{"frames": [...], "returns":
[...]}`` (bin ends; null for a bin without a finished episode)."""
BINS = 20
DEFAULT_CSV = os.path.join(HERE, "results", "time_limit_bootstrap.csv")
DATA = os.path.join(REPO, "docs", "results", "data", "time_limit_bootstrap.csv")
PLOT = os.path.join(REPO, "docs", "images", "time_limit_bootstrap.png")


def train_command(task: str, setting: str, seed: int, *, out: str, timesteps: int | None) -> list[str]:
    """The ``skrl-marl train`` command of one run (``timesteps`` replaces the task's, for a quick check)."""
    options = list(TASKS[task])
    if timesteps is not None:
        if "--timesteps" in options:
            options[options.index("--timesteps") + 1] = str(timesteps)
        else:
            options += ["--timesteps", str(timesteps)]
    return [
        *("--seed", str(seed), "--threads", "1", "--no-progress", "--out", out),
        *options,
        f"agent.time_limit_bootstrap={'true' if setting == 'on' else 'false'}",
    ]


def read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    if rows and tuple(rows[0]) != COLUMNS:
        raise SystemExit(f"{path} has columns {list(rows[0])}, this script writes {list(COLUMNS)}; use another --csv")
    return rows


def append_row(path: str, row: dict) -> None:
    """Append ``row`` (with the header when the file is new) in one write."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        writer.writeheader()
    writer.writerow(row)
    with open(path, "a", newline="") as file:
        file.write(text.getvalue())


def key(row: dict) -> tuple[str, str, int]:
    return row["task"], row["time_limit_bootstrap"], int(row["seed"])


def row_of(task: str, setting: str, seed: int, run_dir: str, *, seconds: float, command: list[str]) -> dict:
    """The CSV row of a finished run, from its ``run.json`` and ``episodes.csv``."""
    from learning_study import mean_return

    from skrl_marl_ext.cli.run_folder import read_episodes

    with open(os.path.join(run_dir, "run.json")) as file:
        run = json.load(file)
    num_envs, timesteps = int(run["num_envs"]), int(run["timesteps"])
    episodes = read_episodes(run_dir)
    tenth = max(1, len(episodes) // 10)
    return {
        "task": task,
        "time_limit_bootstrap": setting,
        "seed": seed,
        "frames": num_envs * timesteps,
        "num_envs": num_envs,
        "timesteps": timesteps,
        "final_return": f"{mean_return(episodes[-tenth:]):.4f}",
        "first_return": f"{mean_return(episodes[:tenth]):.4f}",
        "episodes": len(episodes),
        "wall_seconds": f"{seconds:.0f}",
        "code": code_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": "skrl-marl train " + " ".join(command),
        "curve": json.dumps(binned_curve(episodes, timesteps=timesteps, num_envs=num_envs, bins=BINS)),
    }


def study(args: argparse.Namespace) -> int:
    from skrl_marl_ext.cli.errors import UsageError
    from skrl_marl_ext.cli.run_folder import RunLock

    done = {key(row) for row in read_rows(args.csv)}
    todo = [
        (task, setting, seed)
        for task in args.tasks
        for seed in args.seeds
        for setting in SETTINGS
        if (task, setting, seed) not in done
    ]
    print(f"{len(todo)} runs to do, {len(done)} in {args.csv}; {args.jobs} at a time", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    running: list[tuple[tuple[str, str, int], subprocess.Popen, RunLock, str, list[str], float]] = []
    failures = 0
    while todo or running:
        while todo and len(running) < args.jobs:
            task, setting, seed = job = todo.pop(0)
            folder = os.path.join(args.work_dir, f"{task.replace(':', '-')}_{setting}_seed{seed}")
            os.makedirs(folder, exist_ok=True)
            lock = RunLock(folder, option=f"--work-dir {args.work_dir}")
            try:
                lock.__enter__()
            except UsageError as error:
                print(f"skip {job}: {error}", flush=True)
                continue
            if job in {key(row) for row in read_rows(args.csv)}:
                lock.__exit__(None, None, None)
                continue
            out = os.path.join(folder, "runs")
            shutil.rmtree(out, ignore_errors=True)  # a killed run starts again
            command = train_command(task, setting, seed, out=out, timesteps=args.timesteps)
            log = open(os.path.join(folder, "train.log"), "w")  # noqa: SIM115 (closed with the process)
            process = subprocess.Popen(
                ["nice", "-n", "10", sys.executable, "-m", "skrl_marl_ext", "train", *command],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            running.append((job, process, lock, folder, command, time.perf_counter()))
            print(f"start {task} time_limit_bootstrap={setting} seed {seed}", flush=True)
        time.sleep(2.0)
        for entry in [entry for entry in running if entry[1].poll() is not None]:
            running.remove(entry)
            (task, setting, seed), process, lock, folder, command, start = entry
            seconds = time.perf_counter() - start
            out = os.path.join(folder, "runs")
            runs = [os.path.join(out, name) for name in os.listdir(out)] if os.path.isdir(out) else []
            if process.returncode != 0 or len(runs) != 1:
                failures += 1
                with open(os.path.join(folder, "train.log")) as file:
                    tail = file.read()[-3000:]
                print(f"FAILED {task} {setting} seed {seed} (exit {process.returncode}):\n{tail}", flush=True)
                lock.__exit__(None, None, None)
                continue
            at = command.index("--out")
            command = command[:at] + command[at + 2 :]
            row = row_of(task, setting, seed, runs[0], seconds=seconds, command=command)
            append_row(args.csv, row)
            lock.__exit__(None, None, None)
            shutil.rmtree(folder)
            print(
                f"{task} time_limit_bootstrap={setting} seed {seed}: return {row['first_return']} -> "
                f"{row['final_return']} ({row['episodes']} episodes), {row['wall_seconds']} s",
                flush=True,
            )
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------------- report

SUMMARY = (
    "task",
    "time_limit_bootstrap",
    "runs",
    "final return",
    "95% CI",
    "per seed",
    "on - off (Welch 95% CI)",
    "first return",
    "return at half the frames",
    "train s/run",
)


def report(args: argparse.Namespace) -> int:
    from bench_common import welch_test
    from learning_study import t_quantile

    rows = read_rows(args.csv)
    if not rows:
        raise SystemExit(f"no runs in {args.csv}")
    table, curves = [], {}
    for task in TASKS:
        groups = {s: [r for r in rows if r["task"] == task and r["time_limit_bootstrap"] == s] for s in SETTINGS}
        if not any(groups.values()):
            continue
        finals = {s: [float(r["final_return"]) for r in sorted(g, key=key)] for s, g in groups.items()}
        for setting, runs in groups.items():
            if not runs:
                continue
            runs = sorted(runs, key=key)
            mean, low, high = interval(finals[setting])
            curve = mean_curve(runs)
            curves[(task, setting)] = (curve, len(runs))
            half = runs[0]["curve"] and json.loads(runs[0]["curve"])["frames"][BINS // 2 - 1]
            half_value = next((y for x, y in zip(curve[0], curve[1], strict=True) if x >= half), float("nan"))
            difference = "-"
            if setting == "on" and len(finals["on"]) >= 2 and len(finals["off"]) >= 2:
                a, b = finals["on"], finals["off"]
                diff = sum(a) / len(a) - sum(b) / len(b)
                t, df, p = welch_test(a, b)
                se = abs(diff / t) if t else 0.0
                spread = t_quantile(max(1, round(df))) * se
                difference = f"{diff:+.2f} [{diff - spread:+.2f}, {diff + spread:+.2f}], p = {p:.2f}"
            table.append(
                {
                    "task": task,
                    "time_limit_bootstrap": setting,
                    "runs": len(runs),
                    "final return": f"{mean:.2f}",
                    "95% CI": f"[{low:.2f}, {high:.2f}]",
                    "per seed": " ".join(f"{v:.2f}" for v in finals[setting]),
                    "on - off (Welch 95% CI)": difference,
                    "first return": f"{sum(float(r['first_return']) for r in runs) / len(runs):.2f}",
                    "return at half the frames": f"{half_value:.2f} ({_frames(half)})",
                    "train s/run": f"{sum(float(r['wall_seconds']) for r in runs) / len(runs):.0f}",
                }
            )
    dates = sorted(r["date"] for r in rows)
    codes = sorted({r["code"] for r in rows})
    meta = {
        "command": [
            f"python benchmarks/time_limit_bootstrap.py --seeds {args.seeds_text} --jobs {args.jobs}",
            "python benchmarks/time_limit_bootstrap.py --report",
            *sorted({r["command"] for r in rows if r["seed"] == "0"}),
        ],
        "machine": [args.machine or f"{machine()}, two runs at a time, one torch thread each, under nice -n 10"],
        "date": [f"{dates[0][:10]} to {dates[-1][:10]} (code {', '.join(codes)})"],
        "note": [
            "every run is skrl-marl train with --seed, --threads 1 and --no-progress; final/first return: mean "
            "episode return per agent over the last/first 10% of the run's finished episodes (episodes.csv), mean "
            "over seeds; 95% CI: Student's t over seeds; on - off: difference of the means, Welch's interval and "
            "two-sided p; return at half the frames: the mean learning curve's bin there; train s: the whole "
            "process; runs per row in benchmarks/results/time_limit_bootstrap.csv"
        ],
    }
    write_data(args.data, meta, SUMMARY, table)
    print(f"wrote {args.data}")
    plot(curves, args.plot)
    print(f"wrote {args.plot}")
    return 0


def plot(curves: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [task for task in TASKS if any((task, s) in curves for s in SETTINGS)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for setting, color in zip(SETTINGS, ("C0", "C1"), strict=True):
            if (task, setting) not in curves:
                continue
            (xs, mean, low, high), n = curves[(task, setting)]
            ax.plot(xs, mean, color=color, linewidth=1.8, label=f"time_limit_bootstrap {setting} ({n} seeds)")
            ax.fill_between(xs, low, high, color=color, alpha=0.15, linewidth=0)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("env frames (steps x envs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("episode return per agent")
    fig.suptitle("skrl-marl train: mean over seeds, band: min-max over seeds", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated of %(default)s")
    parser.add_argument("--seeds", default="0-2", help="e.g. 0-2 or 0,2 (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one process each (default: 2)")
    parser.add_argument("--timesteps", type=int, default=None, help="override the tasks' steps (for a quick check)")
    parser.add_argument("--csv", default=DEFAULT_CSV, help="the runs (default: %(default)s)")
    parser.add_argument(
        "--work-dir", default=None, help="the runs' folders while they train (default: runs/ beside --csv)"
    )
    parser.add_argument("--report", action="store_true", help="write --data and --plot from --csv")
    parser.add_argument("--data", default=DATA, help="the results page's data file (default: %(default)s)")
    parser.add_argument("--plot", default=PLOT, help="(default: %(default)s)")
    parser.add_argument("--machine", default=None, help="--report: the machine in words (default: this one's CPU)")
    args = parser.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown --tasks {unknown}; choose from {', '.join(TASKS)}")
    if not 1 <= args.jobs <= 2:
        parser.error("--jobs must be 1 or 2 (a 2-core machine)")
    args.seeds_text = args.seeds
    args.seeds = parse_seeds(args.seeds)
    args.work_dir = args.work_dir or os.path.join(os.path.dirname(os.path.abspath(args.csv)), "runs")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return report(args) if args.report else study(args)


if __name__ == "__main__":
    sys.exit(main())
