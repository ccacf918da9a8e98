"""MADDPG training speed against the number of agents: env frames/s and ms per gradient step.

skrl has no MADDPG, so there is no baseline in the same run; the table shows how the cost grows with the agents
(each critic reads the global state and the joint action, so a critic's input grows linearly with the agents and
the total critic work quadratically). Runs skrl's ``SequentialTrainer`` on the built-in spread env; MADDPG's default
``gradient_steps`` (2) gradient steps per env step. The first ``--warmup`` steps are run untimed.

Models, one of three layouts (the table's title says which):

- default: a policy, target policy, critic and target critic per agent, *batched*: MADDPG's default
  ``batch_agent_models=True`` stacks each role's parameters and runs it as one ``torch.func`` vmapped call;
- ``--loop``: the same per-agent models with ``batch_agent_models=False``, the per-agent loop (one call per agent);
- ``--shared``: one set of models shared by all agents (one group; ``batch_agent_models`` does not apply).

``--twin`` adds the second critic and target critic (TD3's clipped double Q, what ``skrl-marl train --algo maddpg``
builds by default); without it each agent has one critic.

:func:`make_maddpg` builds the env and agent (``benchmarks/op_count.py --algo maddpg`` counts its ops).

Example (the table in docs/results/agent_scaling.md; add ``--loop`` or ``--shared`` for the other layouts)::

    python benchmarks/maddpg_scaling.py --agents 4,16,64 --num-envs 64 --timesteps 200 --threads 1
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MADDPG, joint_action_space
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import QMLP, DeterministicMLP


def make_maddpg(
    num_agents: int,
    *,
    num_envs: int = 64,
    hidden: tuple[int, ...] = (64, 64),
    batch_size: int = 256,
    shared: bool = False,
    loop: bool = False,
    twin: bool = False,
    device: str = "cpu",
    cfg: dict | None = None,
    memory_size: int = 1000,
):
    """Spread env and our MADDPG on it, models seeded with 0: ``(agent, env)``.

    :param shared: One set of models for all agents; otherwise four models per agent.
    :param loop: Per-agent models run one agent after the other (``batch_agent_models=False``), not batched.
    :param twin: Twin critics (``critic_2`` and ``target_critic_2``) besides the first.
    :param cfg: More MADDPG config fields (e.g. ``learning_starts``).
    :param memory_size: Replay rows per env.
    """
    torch.manual_seed(0)
    env = make_spread_env(num_envs=num_envs, num_agents=num_agents, seed=0, device=device)
    joint = joint_action_space(env.action_spaces, env.possible_agents)

    def models(uid):
        def policy():
            return DeterministicMLP(
                observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=hidden
            )

        def critic():
            return QMLP(state_space=env.state_space(uid), action_space=joint, hidden_sizes=hidden)

        roles = {"policy": policy(), "target_policy": policy(), "critic": critic(), "target_critic": critic()}
        if twin:
            roles.update(critic_2=critic(), target_critic_2=critic())
        return roles

    shared_models = models(env.possible_agents[0]) if shared else None
    quiet = {"experiment": {"write_interval": 0, "checkpoint_interval": 0}}
    agent = MADDPG(
        possible_agents=env.possible_agents,
        models={uid: shared_models or models(uid) for uid in env.possible_agents},
        memories={uid: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={"batch_size": batch_size, "batch_agent_models": not loop, **quiet, **(cfg or {})},
    )
    return agent, env


def layout(*, shared: bool, loop: bool, twin: bool = False) -> str:
    """The models' layout in words."""
    critics = ", twin critics" if twin else ""
    if shared:
        return "shared models" + critics
    return (
        "per-agent models, " + ("loop (batch_agent_models=False)" if loop else "batched (batch_agent_models=True)")
    ) + critics


def run(num_agents: int, args) -> tuple[float, float]:
    """Frames/s and median ms per gradient step for ``num_agents`` agents."""
    hidden = tuple(int(h) for h in args.hidden.split(","))
    agent, env = make_maddpg(
        num_agents,
        num_envs=args.num_envs,
        hidden=hidden,
        batch_size=args.batch_size,
        shared=args.shared,
        loop=args.loop,
        twin=args.twin,
        device=args.device,
        memory_size=getattr(args, "memory_size", 1000),
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
    # no atexit hook: skrl's would hold every row's agent, and its replay (some 13 GB at 64 agents), until exit
    quiet = {"headless": True, "disable_progressbar": True, "close_environment_at_exit": False}
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
    parser.add_argument(
        "--loop", action="store_true", help="per-agent models one agent after the other (batch_agent_models=False)"
    )
    parser.add_argument("--twin", action="store_true", help="twin critics (critic_2, target_critic_2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.shared and args.loop:
        parser.error("--loop applies to per-agent models: give --shared or --loop, not both")
    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"MADDPG, spread env, {args.num_envs} envs, MLP {args.hidden}, batch {args.batch_size}, "
        f"{layout(shared=args.shared, loop=args.loop, twin=args.twin)}, {args.device}, {torch.get_num_threads()} threads"
    )
    print("| agents | frames/s | ms per gradient step |")
    print("|---|---|---|")
    for n in (int(a) for a in args.agents.split(",")):
        fps, ms = run(n, args)
        print(f"| {n} | {fps:.0f} | {ms:.1f} |", flush=True)
        gc.collect()  # the row's agent, before the next is built


if __name__ == "__main__":
    main()
