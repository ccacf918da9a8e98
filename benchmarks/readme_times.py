"""How long README's own commands take: each one run as a user runs it, timed, with the machine's load beside it.

The commands are read from README.md itself: ``skrl-marl train`` (the first of "The two commands"), the fast test
suite (``python -m pytest -q -m "not slow"``), every ``skrl-marl ...`` command of the table of other algorithms and
envs, and with ``--slow`` the Isaac Lab setup (``bash scripts/setup_isaaclab.sh``) and the slow suite (``python -m
pytest -q -m slow``). The venv and ``pip install`` steps before them are not timed (they depend on the network).
``skrl-marl`` runs as ``python -m skrl_marl_ext`` (the same command) in a fresh temporary folder, so its ``runs/``
go there; the tests run in the repository. Each run appends one row to ``--csv``: the command, its wall time and exit
status, the 1-minute load average sampled every 5 s while it ran (mean and max; on a 2-core machine a load above 2
means the command shared the cores), the machine and the date. ``--record`` appends a figure measured elsewhere, with
its source. ``--report`` writes the results page's data file (``docs/results/readme_times.md``)::

    python benchmarks/readme_times.py                     # the commands of README, one after another
    python benchmarks/readme_times.py --only maddpg,gru   # those whose command holds one of these words
    python benchmarks/readme_times.py --slow --only slow,setup_isaaclab
    python benchmarks/readme_times.py --record 'python -m pytest -q -m slow' 262 --source '...'
    python benchmarks/readme_times.py --report
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from isaaclab_pendulum_learning import machine, write_data  # noqa: E402
from learning_study import code_version  # noqa: E402

DEFAULT_CSV = os.path.join(HERE, "results", "readme_times.csv")
DATA = os.path.join(REPO, "docs", "results", "data", "readme_times.csv")
COLUMNS = ("command", "seconds", "exit", "load_mean", "load_max", "cpus", "machine", "date", "code", "source")
"""``load_mean`` / ``load_max``: the 1-minute load average while the command ran; ``source``: ``measured`` (this
script) or where a recorded figure comes from."""
FAST_TESTS = 'python -m pytest -q -m "not slow"'
SLOW_TESTS = "python -m pytest -q -m slow"
SETUP_ISAACLAB = "bash scripts/setup_isaaclab.sh"


def readme_commands(readme: str, *, slow: bool) -> list[str]:
    """README's commands to time, in README's order (see the module's docstring)."""
    commands = []
    first = re.search(r"&& (skrl-marl train)\n", readme)
    if first:
        commands.append(first.group(1))
    if FAST_TESTS in readme:
        commands.append(FAST_TESTS)
    if slow and SETUP_ISAACLAB in readme:
        commands.append(SETUP_ISAACLAB)
    if slow and SLOW_TESTS in readme:
        commands.append(SLOW_TESTS)
    commands += re.findall(r"^\| `(skrl-marl [^`]+)` \|", readme, flags=re.MULTILINE)
    return commands


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while the ``with`` block runs."""

    def __init__(self, every: float = 5.0) -> None:
        self.every, self.samples = every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_command(command: str) -> dict:
    """Run one README command as a user would and time it; return its CSV row."""
    argv = shlex.split(command)
    env = dict(os.environ)
    if argv[0] == "skrl-marl":
        argv = [sys.executable, "-m", "skrl_marl_ext", *argv[1:]]
        cwd = tempfile.mkdtemp(prefix="readme_times_")
    elif argv[0] == "python":
        argv, cwd = [sys.executable, *argv[1:]], REPO
    else:
        cwd = REPO
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    print(f"run: {command}", flush=True)
    with LoadSampler() as load:
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stdout[-3000:], flush=True)
    return {
        "command": command,
        "seconds": f"{seconds:.0f}",
        "exit": done.returncode,
        "load_mean": f"{sum(load.samples) / len(load.samples):.1f}",
        "load_max": f"{max(load.samples):.1f}",
        "cpus": os.cpu_count(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "code": code_version(),
        "source": "measured",
    }


def read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    if rows and tuple(rows[0]) != COLUMNS:
        raise SystemExit(f"{path} has columns {list(rows[0])}, this script writes {list(COLUMNS)}; use another --csv")
    return rows


def append_row(path: str, row: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        writer.writeheader()
    writer.writerow(row)
    with open(path, "a", newline="") as file:
        file.write(text.getvalue())


def _kind(row: dict[str, str]) -> str:
    """Where a row's figure comes from, for grouping: measured here, or a recorded source up to its details."""
    return "measured here" if row["source"] == "measured" else row["source"].split(" (")[0]


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def report(args: argparse.Namespace) -> int:
    rows = [row for row in read_rows(args.csv) if row["exit"] in ("0", "")]
    if not rows:
        raise SystemExit(f"no runs in {args.csv}")
    order = readme_commands(open(os.path.join(REPO, "README.md")).read(), slow=True)
    commands = sorted({row["command"] for row in rows}, key=lambda c: order.index(c) if c in order else len(order))
    table = []
    for command in commands:
        of_command = [row for row in rows if row["command"] == command]
        for kind in sorted({_kind(row) for row in of_command}, key=lambda k: (k != "measured here", k)):
            runs = [row for row in of_command if _kind(row) == kind]
            seconds = sorted(float(row["seconds"]) for row in runs)
            loads = [float(row["load_mean"]) for row in runs if row["load_mean"]]
            table.append(
                {
                    "command": command,
                    "in README": "yes" if command in order else "no (since changed)",
                    "runs": len(runs),
                    "time": _minutes(seconds[0]) + ("" if len(seconds) == 1 else f" to {_minutes(seconds[-1])}"),
                    "per run (s)": " ".join(row["seconds"] for row in runs),
                    "load average while it ran": (" ".join(f"{load:.1f}" for load in loads) if loads else "-"),
                    "source": kind,
                }
            )
    measured = [row for row in rows if row["source"] == "measured"]
    dates = sorted(row["date"][:10] for row in measured)
    machines = sorted({f"{row['machine']} ({row['cpus']} CPUs)" for row in measured})
    meta = {
        "command": [
            "python benchmarks/readme_times.py",
            *(f"python benchmarks/readme_times.py {extra}" for extra in args.also),
            "python benchmarks/readme_times.py --report",
        ],
        "machine": ["; ".join(machines) + "; one command at a time, other processes as the load average says"],
        "date": [f"{dates[0]} to {dates[-1]} (code {', '.join(sorted({row['code'] for row in measured}))})"],
        "note": [
            "time: wall time of the command alone (after the venv and pip install steps); load average: the "
            "1-minute load average sampled every 5 s while it ran, mean per run (on 2 cores, above 2 the command "
            "shared them); runs per row in benchmarks/results/readme_times.csv"
        ],
    }
    columns = ("command", "in README", "runs", "time", "per run (s)", "load average while it ran", "source")
    write_data(args.data, meta, columns, table)
    print(f"wrote {args.data}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated words: time the commands holding one of them")
    parser.add_argument("--slow", action="store_true", help="also the Isaac Lab setup and the slow test suite")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command (default: %(default)s)")
    parser.add_argument("--csv", default=DEFAULT_CSV, help="the runs (default: %(default)s)")
    parser.add_argument(
        "--record",
        nargs=2,
        metavar=("COMMAND", "SECONDS"),
        help="append a time measured elsewhere (with --source) instead of running anything",
    )
    parser.add_argument("--source", default="", help="--record: where the figure comes from")
    parser.add_argument("--report", action="store_true", help="write --data from --csv")
    parser.add_argument("--data", default=DATA, help="the results page's data file (default: %(default)s)")
    parser.add_argument(
        "--also", action="append", default=[], help="--report: other arguments the runs were made with (for the page)"
    )
    args = parser.parse_args(argv)
    if args.report:
        return report(args)
    if args.record:
        if not args.source:
            parser.error("--record needs --source: where the figure comes from")
        command, seconds = args.record
        row = dict.fromkeys(COLUMNS, "")
        row.update(command=command, seconds=f"{float(seconds):.0f}", source=args.source)
        append_row(args.csv, row)
        return 0
    words = [w for w in args.only.split(",") if w]
    commands = readme_commands(open(os.path.join(REPO, "README.md")).read(), slow=args.slow)
    commands = [c for c in commands if not words or any(w in c for w in words)]
    failures = 0
    for _ in range(args.repeat):
        for command in commands:
            row = run_command(command)
            append_row(args.csv, row)
            failures += row["exit"] != 0
            print(f"{row['seconds']} s (exit {row['exit']}, load {row['load_mean']} to {row['load_max']})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
