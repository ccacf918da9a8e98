"""Resident memory of a ``skrl-marl train`` process over a long run: does it stay flat?

Starts the command line in a subprocess (by default ``builtin:spread`` with 256 envs and TensorBoard on, the CLI's
default), samples the resident set size (RSS, ``VmRSS`` of ``/proc/<pid>/status``) of that process and the step it
reached (read from its progress bar) every ``--interval`` seconds, stops it after ``--seconds`` with SIGINT (the
CLI's clean stop) and appends one CSV row per sample to ``--out``: ``label, code, date, seconds, step, rss_mib``
(``--label`` names the run, ``code`` is the commit of the package measured).

The first ``--warmup`` seconds are left out (imports, the first rollout and update allocate buffers and optimiser
state, the allocator settles). What is reported over the rest:

- ``growth_percent``: the median RSS of the last fifth of the samples against that of the first fifth, in %;
- ``kib_per_1000_steps``: the least-squares slope of RSS against the step, KiB per 1000 env steps.

RSS swings by tens of MiB within one rollout (an update allocates and frees its mini-batches, and the allocator gives
memory back to the system or not), so medians over many samples and a slope over the whole window are compared, not
single samples.

Example (the rows in ``benchmarks/results/rss_growth.csv``: ``before``, the package keeping every episode and every
tracked value between TensorBoard writes, for 10 minutes; ``after``, for 30 minutes)::

    nice -n 10 python benchmarks/rss_growth.py --seconds 1800 --interval 10 --label after
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

DEFAULT_TRAIN = ["--env", "builtin:spread", "--num-envs", "256", "--threads", "1"]
"""The run of the issue that found the growth: MPE-style spread, 256 envs, TensorBoard on (the default)."""
COLUMNS = ("label", "code", "date", "seconds", "step", "rss_mib")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Sample:
    seconds: float
    """Since the process started."""
    step: int
    """The step its progress bar showed last (0 before the first step)."""
    rss_mib: float


def process_rss_mib(pid: int) -> float | None:
    """``VmRSS`` of process ``pid`` in MiB (None once it has ended)."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class _ProgressReader(threading.Thread):
    """Reads the child's stdout as it comes and keeps the last step its progress bar showed (``  12%|... | 345/...``)."""

    _STEP = re.compile(rb"\|\s*(\d+)/(\d+)\s*\[")

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.step, self.tail = stream, 0, b""

    def run(self) -> None:
        while chunk := self.stream.read1(65536):
            text = self.tail + chunk
            found = self._STEP.findall(text)
            if found:
                self.step = int(found[-1][0])
            self.tail = text[-200:]


def measure(
    train_args: list[str], *, seconds: float, interval: float, out_dir: str, env: dict | None = None
) -> tuple[list[Sample], str]:
    """Run ``skrl-marl train <train_args> --timesteps <many> --out <out_dir>`` for ``seconds``, sampling every
    ``interval`` seconds; return the samples and the command's stderr.

    :raises RuntimeError: When the command ends by itself before ``seconds`` (its stderr is in the message).
    """
    command = [sys.executable, "-m", "skrl_marl_ext", "train", *train_args, "--timesteps", "100000000"]
    command += ["--out", out_dir]
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env)
        reader = _ProgressReader(process.stdout)
        reader.start()
        start, samples = time.monotonic(), []
        try:
            while (elapsed := time.monotonic() - start) < seconds:
                rss = process_rss_mib(process.pid)
                if rss is None or process.poll() is not None:
                    stderr.seek(0)
                    raise RuntimeError(f"the run ended after {elapsed:.0f} s: {stderr.read().decode()[-2000:]}")
                samples.append(Sample(round(elapsed, 1), reader.step, round(rss, 1)))
                time.sleep(max(0.0, start + len(samples) * interval - time.monotonic()))
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # a clean stop: checkpoint and run.json
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            reader.join(timeout=10)
        stderr.seek(0)
        return samples, stderr.read().decode()


def growth(samples: list[Sample], *, warmup: float) -> dict[str, float]:
    """What the module docstring reports, over the samples after ``warmup`` seconds: ``rss_start_mib`` and
    ``rss_end_mib`` (medians of the first and last fifth), ``growth_percent``, ``kib_per_1000_steps``, ``steps``."""
    kept = [s for s in samples if s.seconds >= warmup]
    if len(kept) < 10:
        raise ValueError(f"{len(kept)} samples after the warm-up of {warmup} s; run longer or sample more often")
    fifth = len(kept) // 5
    first = statistics.median(s.rss_mib for s in kept[:fifth])
    last = statistics.median(s.rss_mib for s in kept[-fifth:])
    steps = [s.step for s in kept]
    rss = [s.rss_mib for s in kept]
    mean_step, mean_rss = statistics.fmean(steps), statistics.fmean(rss)
    spread = sum((x - mean_step) ** 2 for x in steps)
    slope = sum((x - mean_step) * (y - mean_rss) for x, y in zip(steps, rss, strict=True)) / spread if spread else 0.0
    return {
        "rss_start_mib": first,
        "rss_end_mib": last,
        "growth_percent": 100.0 * (last - first) / first,
        "kib_per_1000_steps": slope * 1024 * 1000,
        "steps": steps[-1] - steps[0],
    }


def code_version() -> str:
    """``<short commit>`` of the repository, ``+dirty`` when skrl_marl_ext/ has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--", "skrl_marl_ext"], capture_output=True, text=True
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def append_csv(samples: list[Sample], path: str, *, label: str, code: str, date: str) -> None:
    """Append the samples to the CSV at ``path`` (with its header :data:`COLUMNS` when the file is new)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new = not os.path.isfile(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as file:
        writer = csv.writer(file)
        if new:
            writer.writerow(COLUMNS)
        writer.writerows([label, code, date, s.seconds, s.step, s.rss_mib] for s in samples)


def read_csv(path: str, *, label: str) -> list[Sample]:
    """The samples of the run ``label`` in the CSV at ``path``."""
    with open(path, newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["label"] == label]
    return [Sample(float(r["seconds"]), int(r["step"]), float(r["rss_mib"])) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1800.0, help="how long the run is sampled")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds left out at the start")
    parser.add_argument("--label", default="run", help="name of the run in the CSV")
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "rss_growth.csv"), help="CSV file")
    parser.add_argument("--summarize", action="store_true", help="print the growth of each run in --out; run nothing")
    parser.add_argument(
        "train_args", nargs="*", help=f"arguments of skrl-marl train after '--' (default: {' '.join(DEFAULT_TRAIN)})"
    )
    args = parser.parse_args()
    if args.summarize:
        with open(args.out, newline="") as file:
            labels = dict.fromkeys(row["label"] for row in csv.DictReader(file))
        for label in labels:
            result = growth(read_csv(args.out, label=label), warmup=args.warmup)
            print(label, {key: round(value, 1) for key, value in result.items()})
        return
    code, date = code_version(), datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory(prefix="rss-growth-") as out_dir:
        samples, _ = measure(
            args.train_args or DEFAULT_TRAIN, seconds=args.seconds, interval=args.interval, out_dir=out_dir
        )
    append_csv(samples, args.out, label=args.label, code=code, date=date)
    result = growth(samples, warmup=args.warmup)
    print(
        f"{len(samples)} samples, {result['steps']} steps after {args.warmup:.0f} s of warm-up: RSS "
        f"{result['rss_start_mib']:.0f} -> {result['rss_end_mib']:.0f} MiB ({result['growth_percent']:+.1f} %), "
        f"{result['kib_per_1000_steps']:+.0f} KiB per 1000 steps; rows: {args.out}"
    )


if __name__ == "__main__":
    main()
