"""MADDPG training speed against the number of agents: env frames/s and ms per gradient step.

skrl has no MADDPG, so there is no baseline in the same run; the table shows how the cost grows with the agents
(each critic reads the global state and the joint action, so a critic's input grows linearly with the agents and
the total critic work quadratically). Runs skrl's ``SequentialTrainer`` on the built-in spread env; one gradient step
per env step (the default). The first ``--warmup`` steps are run untimed.

Example (the table in BENCHMARKS.md)::

    python benchmarks/maddpg_scaling.py --agents 4,16,64 --num-envs 64 --timesteps 200 --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MADDPG, joint_action_space
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import QMLP, DeterministicMLP


def run(num_agents: int, args) -> tuple[float, float]:
    """Frames/s and median ms per gradient step for ``num_agents`` agents."""
    torch.manual_seed(0)
    env = make_spread_env(num_envs=args.num_envs, num_agents=num_agents, seed=0, device=args.device)
    joint = joint_action_space(env.action_spaces, env.possible_agents)
    hidden = tuple(int(h) for h in args.hidden.split(","))

    def models(uid):
        def policy():
            return DeterministicMLP(
                observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=hidden
            )

        def critic():
            return QMLP(state_space=env.state_space(uid), action_space=joint, hidden_sizes=hidden)

        return {"policy": policy(), "target_policy": policy(), "critic": critic(), "target_critic": critic()}

    shared = models(env.possible_agents[0]) if args.shared else None
    agent = MADDPG(
        possible_agents=env.possible_agents,
        models={uid: shared or models(uid) for uid in env.possible_agents},
        memories={uid: RandomMemory(memory_size=1000, num_envs=env.num_envs) for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={"batch_size": args.batch_size, "experiment": {"write_interval": 0, "checkpoint_interval": 0}},
    )
    step_times: list[float] = []
    gradient_step = agent._gradient_step

    def timed_gradient_step():
        if env.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        gradient_step()
        if env.device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - start)

    agent._gradient_step = timed_gradient_step
    quiet = {"headless": True, "disable_progressbar": True}
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.warmup, **quiet}).train()
    step_times.clear()
    start = time.perf_counter()
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps, **quiet}).train()
    elapsed = time.perf_counter() - start
    median = sorted(step_times)[len(step_times) // 2]
    return args.timesteps * args.num_envs / elapsed, 1000 * median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", default="4,16,64", help="comma-separated numbers of agents")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--timesteps", type=int, default=200, help="timed env steps per row")
    parser.add_argument("--warmup", type=int, default=20, help="untimed env steps first")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", default="64,64", help="hidden sizes of every MLP")
    parser.add_argument("--shared", action="store_true", help="one set of models shared by all agents")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"MADDPG, spread env, {args.num_envs} envs, MLP {args.hidden}, batch {args.batch_size}, "
        f"{'shared' if args.shared else 'per-agent'} models, {args.device}"
    )
    print("| agents | frames/s | ms per gradient step |")
    print("|---|---|---|")
    for n in (int(a) for a in args.agents.split(",")):
        fps, ms = run(n, args)
        print(f"| {n} | {fps:.0f} | {ms:.1f} |", flush=True)


if __name__ == "__main__":
    main()
