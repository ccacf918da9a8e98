"""The compiled path (``cfg.compile``) against eager and against skrl's MAPPO: training frames/s once compiled, what the
first rollout and its update cost (the compilation), and on a GPU the peak of ``torch.cuda.max_memory_allocated``.

Configs: ``null-<N>``, the setting of ``agent_scaling.py`` (the null env with ``N`` agents, 16-dim observations, one
state of all observations, MLPs 2x64 tanh, rollouts 16, 4 epochs x 4 mini-batches), and ``memory_peak.py``'s
``handover`` (Isaac Lab's Shadow-Handover MAPPO sizes, models and schedule, KL-adaptive learning rate) and
``8-agents`` (8 agents sharing one 512-wide state), with running scalers on observations, states and values. Variants:
:data:`VARIANTS`; ours always with ``batch_agent_models=True`` (agents with models of their own as one batch, the GPU
default).

Each (config, variant, repeat) runs in a fresh Python process with an empty inductor cache (what a first run pays; a
later run of the same models reads compiled code from torch's on-disk cache and starts faster); repeats interleave
the variants (A B C A B C ...). In each, the first rollout and its update run untimed for frames/s but timed on their
own ("first rollout + update"; the compiled path compiles there), then ``--timesteps`` env steps are timed, updates
included, through skrl's ``Trainer.train`` loop (:func:`bench_common.train_frames_per_second`). The peak memory is
``torch.cuda.max_memory_allocated()`` over the whole run (CUDA only). The table gives medians; "compilation" is the
first rollout and update of a compiled variant less ours eager's.

CPU (2 cores)::

    python benchmarks/compiled_speed.py --configs null-4,null-16 --num-envs 64,256 --timesteps 96 --repeats 3

GPU (frames/s and peak memory at the two configs, 4096 envs)::

    python benchmarks/compiled_speed.py --configs handover,8-agents --num-envs 4096 --device cuda --timesteps 64 \\
        --variants skrl,ours-eager,ours-compiled,ours-cuda-graphs,ours-one-pass --repeats 3

What the update's passes of one agent cost against one pass of all (the memory they save: ``memory_peak.py``)::

    python benchmarks/compiled_speed.py --configs handover,8-agents --num-envs 512 --timesteps 32 \
        --variants ours-eager,ours-one-pass --repeats 3

``--device cpu`` with few envs is a smoke check of the same code path.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

VARIANTS = {
    "skrl": None,
    "ours-eager": {},
    "ours-compiled": {"compile": True},
    "ours-cuda-graphs": {"compile": {"mode": "reduce-overhead"}},
    "ours-one-pass": {"update_agents_at_once": 1024},
}
"""skrl's MAPPO, and ours with the config fields added to ``batch_agent_models=True`` (``ours-cuda-graphs``: CUDA
graphs through ``torch.compile``'s ``reduce-overhead`` mode, on a GPU only; ``ours-one-pass``: every agent's forward
and backward of a mini-batch in one pass, where ``"auto"`` may split them to hold less memory)."""
NULL_SETTING = {"obs_size": 16, "hidden": (64, 64), "rollouts": 16, "epochs": 4, "mini_batches": 4}
"""The ``null-<N>`` configs: ``agent_scaling.py``'s setting."""
MIB = 2**20


def build(config: str, variant: str, *, num_envs: int, device: str):
    """The env, the agent of ``variant`` and the rollout length of ``config``."""
    import memory_peak
    from bench_common import TrainCfg, make_agent

    ours_cfg = VARIANTS[variant]
    if config.startswith("null-"):
        from skrl_marl_ext.envs.null import make_null_env

        s = NULL_SETTING
        env = make_null_env(
            num_envs=num_envs, num_agents=int(config[5:]), obs_size=s["obs_size"], device=device, seed=0
        )
        cfg = TrainCfg(rollouts=s["rollouts"], epochs=s["epochs"], minibatches=s["mini_batches"], hidden=s["hidden"])
        algo = "skrl-mappo" if ours_cfg is None else "ours-mappo"
        ours = None if ours_cfg is None else {"batch_agent_models": True, **ours_cfg}
        return env, make_agent(algo, env, shared=False, cfg=cfg, device=device, ours_cfg=ours), cfg.rollouts
    settings = memory_peak.CONFIGS[config]
    env = memory_peak.make_env(settings, num_envs=num_envs, device=device)
    which = "skrl" if ours_cfg is None else "ours-batched"
    agent = memory_peak.make_agent(settings, which, env, device=device, ours_cfg=ours_cfg)
    return env, agent, settings.rollouts


def measure(config: str, variant: str, *, num_envs: int, timesteps: int, device: str) -> dict:
    """One run (see the module docstring): frames/s once warm, seconds of the first rollout and update, peak bytes."""
    from bench_common import round_up, train_frames_per_second

    env, agent, rollouts = build(config, variant, num_envs=num_envs, device=device)
    timesteps = round_up(timesteps, rollouts)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    fps = train_frames_per_second(agent, env, timesteps=timesteps, warmup=rollouts)
    elapsed = time.perf_counter() - start
    return {
        "config": config,
        "variant": variant,
        "envs": num_envs,
        "frames_per_second": fps,
        "first_seconds": elapsed - num_envs * timesteps / fps,
        "peak": torch.cuda.max_memory_allocated() if cuda else None,
        "batched": [bool(g.batched) for g in getattr(agent, "groups", ())],
    }


def run_one(config: str, variant: str, num_envs: int, args: argparse.Namespace) -> dict:
    """:func:`measure` in a fresh process with an empty inductor cache."""
    from bench_common import run_json

    arguments = [__file__, "--one", config, variant, "--num-envs", str(num_envs)]
    arguments += ["--timesteps", str(args.timesteps), "--device", args.device, "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as cache:
        return run_json(arguments, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})


HEADER = [
    "config",
    "envs",
    "variant",
    "frames/s (median)",
    "vs ours eager (paired range)",
    "vs skrl",
    "first rollout + update (s)",
    "compilation (s)",
    "peak CUDA memory (MiB)",
]


def table_rows(results: list[dict]) -> list[list[str]]:
    """One row per (config, variant): medians over the repeats, ratios of paired repeats."""
    keys = list(dict.fromkeys((r["config"], r["envs"], r["variant"]) for r in results))
    runs = {key: [r for r in results if (r["config"], r["envs"], r["variant"]) == key] for key in keys}
    rows = []
    for config, envs, variant in keys:
        mine = runs[(config, envs, variant)]
        fps = [r["frames_per_second"] for r in mine]
        eager, skrl = runs.get((config, envs, "ours-eager")), runs.get((config, envs, "skrl"))
        versus = "-"
        if eager and variant != "ours-eager":
            pairs = [a / b["frames_per_second"] for a, b in zip(fps, eager, strict=True)]
            ratio = statistics.median(fps) / statistics.median(r["frames_per_second"] for r in eager)
            versus = f"{ratio:.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
        vs_skrl = "-"
        if skrl and variant != "skrl":
            vs_skrl = f"{statistics.median(fps) / statistics.median(r['frames_per_second'] for r in skrl):.2f}"
        first = statistics.median(r["first_seconds"] for r in mine)
        compilation = "-"
        if eager and variant.startswith("ours") and variant != "ours-eager":
            compilation = f"{first - statistics.median(r['first_seconds'] for r in eager):.1f}"
        peaks = [r["peak"] for r in mine if r["peak"] is not None]
        peak = f"{statistics.median(peaks) / MIB:.0f}" if peaks else "-"
        rows.append(
            [config, str(envs), variant, f"{statistics.median(fps):.0f}", versus, vs_skrl]
            + [f"{first:.1f}", compilation, peak]
        )
    return rows


def write_csv(path: str, results: list[dict], argv: list[str], args: argparse.Namespace) -> None:
    import skrl

    with open(path, "w", newline="") as f:
        f.write(f"# command: {' '.join(['python benchmarks/compiled_speed.py', *argv])}\n")
        f.write(
            f"# machine: {platform.machine()} {args.device}, {args.threads} torch thread(s); Python "
            f"{platform.python_version()}, torch {torch.__version__}, skrl {skrl.__version__}\n"
        )
        f.write(f"# date: {datetime.date.today().isoformat()}\n")
        f.write(
            "# note: ours with batch_agent_models=True; each run a fresh process with an empty inductor cache; "
            f"{args.timesteps} timed env steps after the first rollout and update; medians of {args.repeats} "
            "interleaved repeats\n"
        )
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(table_rows(results))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="null-4,null-16", help="comma-separated: null-<N>, handover, 8-agents")
    parser.add_argument("--variants", default="skrl,ours-eager,ours-compiled", help=f"subset of {list(VARIANTS)}")
    parser.add_argument("--num-envs", default="64", help="comma-separated numbers of envs stepped as one batch")
    parser.add_argument("--timesteps", type=int, default=64, help="timed env steps (rounded up to whole rollouts)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each variant")
    parser.add_argument("--device", default="cpu", help="torch device of env, models and buffers")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--csv", default=None, metavar="PATH", help="also write the table to PATH (make_tables.py form)"
    )
    parser.add_argument("--one", nargs=2, metavar=("CONFIG", "VARIANT"), help="measure one run here, print JSON")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    args.num_envs = [int(n) for n in args.num_envs.split(",")]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {unknown}; choose from {', '.join(VARIANTS)}")
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.one:
        torch.set_num_threads(args.threads)
        result = measure(*args.one, num_envs=args.num_envs[0], timesteps=args.timesteps, device=args.device)
        print(json.dumps(result))
        return 0
    results = []
    for config in args.configs.split(","):
        for num_envs in args.num_envs:
            for repeat in range(args.repeats):
                for variant in args.variants:
                    result = run_one(config, variant, num_envs, args)
                    results.append(result)
                    fps, first = result["frames_per_second"], result["first_seconds"]
                    print(
                        f"# {config}, {num_envs} envs, repeat {repeat}, {variant}: {fps:.0f} frames/s, first rollout "
                        f"+ update {first:.1f} s, batched {result['batched']}",
                        file=sys.stderr,
                    )
    from bench_common import markdown_table

    print(markdown_table(HEADER, table_rows(results)))
    if args.csv:
        csv_argv = [a for i, a in enumerate(argv) if a != "--csv" and (i == 0 or argv[i - 1] != "--csv")]
        write_csv(args.csv, results, csv_argv, args)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
