"""Training throughput of this package's MAPPO/IPPO against skrl's built-in ones (and HAPPO against our MAPPO), at
identical configuration.

Frames: an env frame is one step of one env with every agent acting once, so a run of ``timesteps`` steps of
``num_envs`` envs is ``num_envs * timesteps`` frames, whatever the number of agents. Training frames/s include
acting, env stepping, storing and the PPO updates (one per ``rollouts`` steps), as in a real training run; the env
alone (uniform random actions) is given for reference. Repeats interleave the algorithms (A B C D A B C D ...) so
a drift of the machine's speed hits all of them alike; the table gives medians and the ratio ours / skrl (HAPPO: /
our MAPPO), and the update's time per rollout (``post_interaction``, where the updates run) with its ratio.

Example (2 cores)::

    python benchmarks/frames_per_second.py --env vmas:balance --num-envs 256 --timesteps 100 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import sys

import torch
from bench_common import (
    ALGOS,
    BASELINE,
    TrainCfg,
    env_frames_per_second,
    flops_per_env_step,
    make_agent,
    make_env,
    markdown_table,
    matmul_flops_per_second,
    median,
    round_up,
    train_frames_per_second,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Env frame = one step of one env (all agents act once). Prints a markdown table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--env", default="builtin:spread", help="builtin:spread, null or vmas:<scenario>")
    parser.add_argument("--num-envs", type=int, default=256, help="envs stepped as one batch")
    parser.add_argument("--agents", type=int, default=None, help="number of agents (env default when omitted)")
    parser.add_argument(
        "--algos", default=",".join(ALGOS), help=f"comma-separated subset of {','.join(ALGOS)} (run interleaved)"
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="ours only: one policy and one value model for all agents (skrl's agents keep per-agent models)",
    )
    parser.add_argument("--timesteps", type=int, default=300, help="timed env steps per run (rounded up to rollouts)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each algorithm")
    parser.add_argument("--device", default="cpu", help="torch device of env, models and buffers")
    parser.add_argument("--hidden", default="256,256", help="hidden layer widths of every MLP")
    parser.add_argument("--activation", default="tanh", choices=("tanh", "relu", "elu"))
    parser.add_argument("--rollouts", type=int, default=100, help="env steps per update")
    parser.add_argument("--epochs", type=int, default=4, help="learning epochs per update")
    parser.add_argument("--minibatches", type=int, default=4, help="mini-batches per epoch")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (pin cores with taskset)")
    parser.add_argument("--no-env-alone", action="store_true", help="skip the env-alone reference row")
    parser.add_argument(
        "--batch-agent-models",
        default="default",
        help="ours only: comma-separated settings of cfg.batch_agent_models to run interleaved, each a row "
        "(default: the cfg's default; or true, false, auto)",
    )
    args = parser.parse_args(argv)
    args.algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in args.algos if a not in ALGOS]
    if unknown:
        parser.error(f"unknown --algos {unknown}; choose from {', '.join(ALGOS)}")
    args.hidden = tuple(int(h) for h in args.hidden.split(","))
    settings = {"default": None, "true": True, "false": False, "auto": "auto"}
    args.batch_agent_models = [b.strip().lower() for b in args.batch_agent_models.split(",") if b.strip()]
    unknown = [b for b in args.batch_agent_models if b not in settings]
    if unknown:
        parser.error(f"unknown --batch-agent-models {unknown}; choose from {', '.join(settings)}")
    args.runs = [
        (
            algo if not algo.startswith("ours") or b == "default" else f"{algo} (batch_agent_models={settings[b]})",
            algo,
            None if b == "default" else {"batch_agent_models": settings[b]},
        )
        for algo in args.algos
        for b in (args.batch_agent_models if algo.startswith("ours") else ["default"])
    ]
    return args


def paired_ratio(ours: list[float], base: list[float]) -> str:
    """Ratio of the medians, and the range of the per-repeat ratios."""
    pairs = [a / b for a, b in zip(ours, base, strict=True)]
    return f"{median(ours) / median(base):.2f} ({min(pairs):.2f}-{max(pairs):.2f})"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainCfg(
        rollouts=args.rollouts,
        epochs=args.epochs,
        minibatches=args.minibatches,
        hidden=args.hidden,
        activation=args.activation,
    )
    timesteps = round_up(args.timesteps, args.rollouts)
    results: dict[str, list[float]] = {name: [] for name, _, _ in args.runs}
    update_ms: dict[str, list[float]] = {name: [] for name, _, _ in args.runs}
    env_alone: list[float] = []
    for repeat in range(args.repeats):
        for name, algo, ours_cfg in args.runs:
            env = make_env(args.env, num_envs=args.num_envs, agents=args.agents, device=args.device, seed=repeat)
            shared = args.shared and algo.startswith("ours")
            agent = make_agent(algo, env, shared=shared, cfg=cfg, device=args.device, seed=repeat, ours_cfg=ours_cfg)
            phase_ms: dict[str, float] = {}
            fps = train_frames_per_second(agent, env, timesteps=timesteps, warmup=args.rollouts, phase_ms=phase_ms)
            results[name].append(fps)
            update_ms[name].append(phase_ms["post_interaction"] * args.rollouts)
            print(f"# repeat {repeat} {name}: {fps:.0f} frames/s", file=sys.stderr)
        if not args.no_env_alone:
            env = make_env(args.env, num_envs=args.num_envs, agents=args.agents, device=args.device, seed=repeat)
            env_alone.append(env_frames_per_second(env, timesteps=timesteps))

    num_agents = len(env.possible_agents)
    rows = []
    for name, algo, _ in args.runs:
        base = BASELINE.get(algo)
        models = "shared" if args.shared and algo.startswith("ours") else "per-agent"
        update = f"{median(update_ms[name]):.0f}"
        rows.append([name, models, f"{median(results[name]):.0f}", f"{min(results[name]):.0f}", "-", update, "-"])
        if base in results:
            # ratios of the medians, and the spread of the per-repeat (paired) ratios
            rows[-1][4] = paired_ratio(results[name], results[base])
            rows[-1][6] = paired_ratio(update_ms[name], update_ms[base])
    if env_alone:
        rows.append(
            ["env alone (random actions)", "-", f"{median(env_alone):.0f}", f"{min(env_alone):.0f}"] + ["-"] * 3
        )
    print(
        f"env {args.env}, {args.num_envs} envs, {num_agents} agents, MLP {args.hidden} {args.activation}, rollouts "
        f"{args.rollouts}, {args.epochs} epochs x {args.minibatches} mini-batches, {timesteps} timed steps, "
        f"{args.repeats} repeats, device {args.device}, threads {torch.get_num_threads()}\n"
    )
    header = ["algo", "models", "frames/s (median)", "frames/s (min)", "ratio (paired range)", "update ms", "ratio"]
    print(markdown_table(header, rows))
    # ceiling: the models' matrix products alone at the measured matmul rate (env and elementwise work left out)
    rate = matmul_flops_per_second(width=max(args.hidden), device=args.device)
    flops = flops_per_env_step(agent, num_envs=args.num_envs, epochs=args.epochs)
    print(
        f"\ncompute ceiling: {args.num_envs * rate / flops:.0f} frames/s ({flops / args.num_envs / 1e6:.2f} MFLOP "
        f"per env frame at the measured matmul rate {rate / 1e9:.1f} GFLOP/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
