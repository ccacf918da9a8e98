"""Soak run: many env steps through skrl's SequentialTrainer, watching resident memory and tracking containers.

A leak shows as growth of the resident set size (RSS) or of the agent's tracking containers with the number of steps.
The first update allocates the rollout buffers and the optimiser state, so growth is measured from the end of the
first tenth of the run to its end. TensorBoard writing is on (``write_interval``) so the tracking path is exercised.

Example (the figures in docs/results/soak.md)::

    python benchmarks/soak.py --algo mappo --num-agents 16 --num-envs 1024 --frames 1000000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import torch
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import IPPO, MAPPO
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import GaussianMLP, ValueMLP


def rss_mib() -> float:
    """Resident set size of this process, MiB (Linux ``/proc``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def tracking_size(agent) -> int:
    """Number of values held by the agent's tracking containers (skrl's, cleared at every write)."""
    return sum(len(v) for v in agent.tracking_data.values()) + len(agent._track_rewards) + len(agent._track_timesteps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=["mappo", "ippo"], default="mappo")
    parser.add_argument("--num-agents", type=int, default=16)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--frames", type=int, default=1_000_000, help="env frames (num_envs x steps)")
    parser.add_argument("--shared", action="store_true", help="one policy/value pair shared by all agents")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    env = make_spread_env(num_envs=args.num_envs, num_agents=args.num_agents, seed=0)

    def build(uid):
        return {
            "policy": GaussianMLP(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
            "value": ValueMLP(
                observation_space=env.observation_space(uid),
                state_space=env.state_space(uid),
                input="states" if args.algo == "mappo" else "observations",
            ),
        }

    shared = build(env.possible_agents[0]) if args.shared else None
    models = {uid: shared or build(uid) for uid in env.possible_agents}
    steps = args.frames // args.num_envs
    directory = tempfile.mkdtemp(prefix="soak-")
    cfg = {
        "rollouts": 16,
        "learning_epochs": 2,
        "mini_batches": 2,
        "experiment": {"directory": directory, "write_interval": 50, "checkpoint_interval": 0},
    }
    cls = MAPPO if args.algo == "mappo" else IPPO
    agent = cls(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})

    samples: list[tuple[float, float, int]] = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.perf_counter(), rss_mib(), tracking_size(agent)))
            done.wait(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    thread.start()
    trainer.train()
    done.set()
    thread.join()
    elapsed = time.perf_counter() - start
    samples.append((time.perf_counter(), rss_mib(), tracking_size(agent)))

    tenth, half, last = samples[max(1, len(samples) // 10)], samples[len(samples) // 2], samples[-1]
    peak_tracking = max(s[2] for s in samples)
    print(
        f"| {args.algo} | {'shared' if args.shared else 'per-agent'} | {args.num_agents} | {args.num_envs} | "
        f"{steps * args.num_envs:,} | {elapsed:.0f} s | {tenth[1]:.0f} MiB | {half[1]:.0f} MiB | {last[1]:.0f} MiB | "
        f"{half[1] - tenth[1]:+.1f} MiB | {last[1] - half[1]:+.1f} MiB | {peak_tracking} |"
    )
    print(
        "columns: algo | models | agents | envs | frames | time | RSS at 10% | RSS at 50% | RSS at end | "
        "growth 10-50% | growth 50-100% | max values held by the tracking containers"
    )


if __name__ == "__main__":
    main()
