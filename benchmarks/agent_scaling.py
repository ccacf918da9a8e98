"""Cost per env step against the number of agents: this package's MAPPO/IPPO (shared and per-agent models) and skrl's.

Runs on the null env (``skrl_marl_ext.envs.null``: a few tensor operations per step), so what is measured is the
agents: acting, storing and the PPO updates (amortised over the rollout), in ms per env step. skrl 2.1.1 loops over
the agents in Python with one optimiser each, so its cost grows linearly with the number of agents; a shared model
runs all agents as one batch; per-agent models (``ours-per-agent``) run at the default ``batch_agent_models="auto"``
(batched, their parameters stacked and one ``torch.func`` call per role, off the CPU and for many narrow models on it);
``ours-per-agent-loop`` (``batch_agent_models=False``) calls them one after another. Per agent count the variants run interleaved (A B C A B C ...), the table gives
medians and the ratio skrl / ours (how many times faster ours is). Named in ``--variants``, ``ours-shared-compiled``
and ``ours-per-agent-compiled`` run the compiled path (``cfg.compile=True``), e.g. on a GPU::

    python benchmarks/agent_scaling.py --device cuda --num-envs 4096 --agents 16,64 --hidden 256,256 --rollouts 50 \
        --timesteps 200 --repeats 3 --variants ours-per-agent,ours-per-agent-compiled,skrl-per-agent

The compute floor is the models' floating-point work per env step (:func:`bench_common.flops_per_env_step`, a
lower bound: matrix products only) divided by the measured rate of a float32 matrix product on this machine.

Example (2 cores)::

    python benchmarks/agent_scaling.py --agents 4,16,64 --num-envs 64 --threads 1
"""

from __future__ import annotations

import argparse
import sys

import torch
from bench_common import (
    TrainCfg,
    flops_per_env_step,
    make_agent,
    markdown_table,
    matmul_flops_per_second,
    median,
    round_up,
    train_frames_per_second,
)

VARIANTS = ("ours-shared", "ours-per-agent", "ours-per-agent-loop", "skrl-per-agent")
OPT_IN_VARIANTS = ("ours-shared-compiled", "ours-per-agent-compiled")
"""Run only when named in ``--variants``: ours with ``cfg.compile=True`` (the first rollout and update, untimed,
compile; ``compiled_speed.py`` times the compilation)."""
EXTRA_CFG = {
    "ours-per-agent-loop": {"batch_agent_models": False},
    "ours-shared-compiled": {"compile": True},
    "ours-per-agent-compiled": {"compile": True},
}
"""Config fields each variant adds: ``ours-per-agent-loop`` calls per-agent models one agent after the other (as skrl
does) instead of batched; the compiled variants run the compiled path."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Prints a markdown table: ms per env step (updates included), ratio skrl / ours, compute floor.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--agents", default="4,16,64", help="comma-separated numbers of agents")
    parser.add_argument("--algo", default="mappo", choices=("mappo", "ippo"))
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS + OPT_IN_VARIANTS}"
    )
    parser.add_argument("--num-envs", type=int, default=64, help="envs stepped as one batch")
    parser.add_argument("--obs-size", type=int, default=16, help="null env observation size per agent")
    parser.add_argument("--rollouts", type=int, default=16, help="env steps per update")
    parser.add_argument("--timesteps", type=int, default=32, help="timed env steps per run (rounded up to rollouts)")
    parser.add_argument("--epochs", type=int, default=4, help="learning epochs per update")
    parser.add_argument("--minibatches", type=int, default=4, help="mini-batches per epoch")
    parser.add_argument("--hidden", default="64,64", help="hidden layer widths of every MLP")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each variant")
    parser.add_argument("--device", default="cpu", help="torch device of env, models and buffers")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (pin cores with taskset)")
    args = parser.parse_args(argv)
    args.agents = [int(a) for a in args.agents.split(",")]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS + OPT_IN_VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {unknown}; choose from {', '.join(VARIANTS + OPT_IN_VARIANTS)}")
    args.hidden = tuple(int(h) for h in args.hidden.split(","))
    return args


def make(variant: str, *, algo: str, num_agents: int, args, cfg: TrainCfg, seed: int):
    from skrl_marl_ext.envs.null import make_null_env

    env = make_null_env(
        num_envs=args.num_envs, num_agents=num_agents, obs_size=args.obs_size, device=args.device, seed=seed
    )
    owner, models = variant.split("-", 1)
    extra = EXTRA_CFG.get(variant)
    shared = models.startswith("shared")
    agent = make_agent(f"{owner}-{algo}", env, shared=shared, cfg=cfg, device=args.device, seed=seed, ours_cfg=extra)
    return agent, env


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainCfg(rollouts=args.rollouts, epochs=args.epochs, minibatches=args.minibatches, hidden=args.hidden)
    timesteps = round_up(args.timesteps, args.rollouts)
    # the floor uses the rate of a large product at the models' width: the best this machine does
    rate = matmul_flops_per_second(width=max(args.hidden), device=args.device)
    rows = []
    for num_agents in args.agents:
        ms: dict[str, list[float]] = {v: [] for v in args.variants}
        flops = None
        for repeat in range(args.repeats):
            for variant in args.variants:
                agent, env = make(variant, algo=args.algo, num_agents=num_agents, args=args, cfg=cfg, seed=repeat)
                fps = train_frames_per_second(agent, env, timesteps=timesteps, warmup=args.rollouts)
                ms[variant].append(1000 * args.num_envs / fps)
                flops = flops_per_env_step(agent, num_envs=args.num_envs, epochs=args.epochs)
                print(
                    f"# {num_agents} agents, repeat {repeat}, {variant}: {ms[variant][-1]:.1f} ms/step", file=sys.stderr
                )
        floor = 1000 * flops / rate
        skrl = median(ms["skrl-per-agent"]) if "skrl-per-agent" in ms else None
        for variant in args.variants:
            value = median(ms[variant])
            ratio = f"{skrl / value:.2f}" if skrl is not None and variant != "skrl-per-agent" else "-"
            rows.append(
                [
                    num_agents,
                    variant,
                    f"{value:.1f}",
                    f"{min(ms[variant]):.1f}",
                    ratio,
                    f"{floor:.2f}",
                    f"{value / floor:.0f}x",
                ]
            )
    print(
        f"null env (obs {args.obs_size}, state {args.obs_size} x agents), {args.algo}, {args.num_envs} envs, MLP "
        f"{args.hidden} tanh, rollouts {args.rollouts}, {args.epochs} epochs x {args.minibatches} mini-batches, "
        f"{timesteps} timed steps, {args.repeats} repeats, device {args.device}, threads {torch.get_num_threads()}, "
        f"matmul rate {rate / 1e9:.1f} GFLOP/s\n"
    )
    header = ["agents", "variant", "ms/step (median)", "ms/step (min)", "skrl / ours", "floor ms/step", "vs floor"]
    print(markdown_table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
