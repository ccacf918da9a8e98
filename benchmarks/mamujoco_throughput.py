"""Env frames/s of MaMuJoCo: the raw PettingZoo env stepped in this process and in worker processes, this package's
wrapper, and MAPPO training on it, at several numbers of envs.

A frame is one step of one env (every agent acting once). "raw" steps ``num_envs`` ``mamujoco_v1.parallel_env``
copies in a Python loop with NumPy actions and resets a copy when its episode ends, which is what the wrapper does
around them. "raw, W workers" splits the copies over W ``spawn`` processes that step their share when sent the actions
and send back their observations, rewards and done flags stacked by agent (pipes, as ``multiprocessing`` gives them):
the most that stepping the wrapper's copies in worker processes could gain, since the wrapper's own work stays the
same. "wrapper" is :func:`skrl_marl_ext.envs.make_mamujoco_env` taking torch actions and returning stacked float32
tensors and the infos. The env alone is stepped with uniform random actions (``state()`` is not read). "MAPPO" trains
this package's MAPPO on the wrapper at the CLI's default sizes (2x128 tanh models per agent, rollouts 100, 4 epochs x 4
mini-batches, one torch thread) through skrl's training loop, updates included, reading ``state()`` every step as a
MAPPO run does. Repeats interleave the variants; the table gives medians, and each ratio to raw is the median of the
ratios within a repeat, with their range. Workers start before the clock does. MuJoCo's warnings are dropped for the
whole run (nothing is logged).

Example (2 cores)::

    python benchmarks/mamujoco_throughput.py --spec HalfCheetah-2x3 --num-envs 1 8 16 32 --workers 1 2 --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import datetime
import multiprocessing
import os
import platform
import shlex
import statistics
import sys
import time

import mujoco
import numpy as np
import torch

from skrl_marl_ext.envs.mamujoco import make_mamujoco_env, parse_mamujoco_name

WARMUP = 20
"""Untimed env steps before the clock starts."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default="HalfCheetah-2x3", help="<scenario>-<agent_conf> (default: %(default)s)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 16, 32], help="(default: %(default)s)")
    parser.add_argument(
        "--workers", type=int, nargs="*", default=[1, 2], help="worker counts of raw stepping (default: %(default)s)"
    )
    parser.add_argument("--steps", type=int, default=1000, help="timed env steps per measure (default: %(default)s)")
    parser.add_argument(
        "--train-steps", type=int, default=200, help="timed MAPPO steps per measure, 0: none (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="measures per row, interleaved (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--csv", help="also write the table to this CSV, with the command, machine and date")
    parser.add_argument("--machine", help="the machine, for the CSV (default: the CPU model and cores)")
    return parser.parse_args(argv)


def _raw_envs(scenario: str, agent_conf: str | None, seeds: list[int]) -> list:
    from gymnasium_robotics.envs.multiagent_mujoco import mamujoco_v1

    mujoco.set_mju_user_warning(lambda message: None)  # each model load warns; neither console nor MUJOCO_LOG.TXT
    envs = [mamujoco_v1.parallel_env(scenario, agent_conf) for _ in seeds]
    for env, seed in zip(envs, seeds, strict=True):
        env.reset(seed=seed)
    return envs


def _random_actions(env, *, num_envs: int, steps: int) -> list[list[dict[str, np.ndarray]]]:
    """``steps`` x ``num_envs`` uniform random actions, drawn before the clock starts (the env alone is timed)."""
    rng = np.random.default_rng(0)
    spaces = {uid: env.action_space(uid) for uid in env.possible_agents}
    return [
        [
            {uid: rng.uniform(-1, 1, space.shape).astype(space.dtype) for uid, space in spaces.items()}
            for _ in range(num_envs)
        ]
        for _ in range(steps)
    ]


def _step_all(envs: list, actions: list[dict[str, np.ndarray]]) -> tuple:
    """Step every env (a reset where one ended); the observations, rewards and done flags stacked by agent."""
    observations, rewards, dones = [], [], []
    for env, env_actions in zip(envs, actions, strict=True):
        obs, reward, terminated, truncated, _ = env.step(env_actions)
        if not env.agents:
            obs, _ = env.reset()
        observations.append(obs)
        rewards.append(reward)
        dones.append({uid: terminated[uid] or truncated[uid] for uid in terminated})
    agents = envs[0].possible_agents
    return (
        {uid: np.array([obs[uid] for obs in observations], dtype=np.float32) for uid in agents},
        np.array([[reward[uid] for uid in agents] for reward in rewards], dtype=np.float32),
        np.array([[done[uid] for uid in agents] for done in dones], dtype=bool),
    )


def _join(results: list[tuple]) -> tuple:
    """The workers' results as one batch, as the main process would build it."""
    observations = {uid: np.concatenate([result[0][uid] for result in results]) for uid in results[0][0]}
    return observations, np.concatenate([r[1] for r in results]), np.concatenate([r[2] for r in results])


def _raw_worker(connection, scenario: str, agent_conf: str | None, seeds: list[int]) -> None:
    """A worker of :func:`raw_frames_per_second`: step its envs with each list of actions received until None."""
    envs = _raw_envs(scenario, agent_conf, seeds)
    connection.send("ready")
    while (actions := connection.recv()) is not None:
        connection.send(_step_all(envs, actions))
    for env in envs:
        env.close()


def raw_frames_per_second(scenario: str, agent_conf: str | None, *, num_envs: int, steps: int, workers: int) -> float:
    """Frames/s of ``num_envs`` raw ``mamujoco_v1`` envs, each reset when it ends: stepped one after another in this
    process (``workers=0``), or split over ``workers`` processes that step their shares at the same time."""
    if not workers:
        envs = _raw_envs(scenario, agent_conf, list(range(num_envs)))
        actions = _random_actions(envs[0], num_envs=num_envs, steps=WARMUP + steps)
        for step, step_actions in enumerate(actions):
            if step == WARMUP:
                start = time.perf_counter()
            for env, env_actions in zip(envs, step_actions, strict=True):
                env.step(env_actions)
                if not env.agents:
                    env.reset()
        elapsed = time.perf_counter() - start
        for env in envs:
            env.close()
        return num_envs * steps / elapsed
    context = multiprocessing.get_context("spawn")
    shares = np.array_split(np.arange(num_envs), workers)
    connections, processes = [], []
    for share in shares:
        ours, theirs = context.Pipe()
        process = context.Process(target=_raw_worker, args=(theirs, scenario, agent_conf, share.tolist()), daemon=True)
        process.start()
        connections.append(ours)
        processes.append(process)
    for connection in connections:
        connection.recv()  # ready
    example = _raw_envs(scenario, agent_conf, [0])[0]
    actions = _random_actions(example, num_envs=num_envs, steps=WARMUP + steps)
    example.close()
    for step, step_actions in enumerate(actions):
        if step == WARMUP:
            start = time.perf_counter()
        for connection, share in zip(connections, shares, strict=True):
            connection.send(step_actions[share[0] : share[-1] + 1])
        _join([connection.recv() for connection in connections])
    elapsed = time.perf_counter() - start
    for connection, process in zip(connections, processes, strict=True):
        connection.send(None)
        process.join()
    return num_envs * steps / elapsed


def wrapper_frames_per_second(scenario: str, agent_conf: str | None, *, num_envs: int, steps: int) -> float:
    """Frames/s of :func:`make_mamujoco_env` with ``num_envs`` envs and uniform random torch actions."""
    env = make_mamujoco_env(scenario, agent_conf, num_envs=num_envs, seed=0)
    actions = [
        {uid: torch.rand(num_envs, *space.shape) * 2 - 1 for uid, space in env.action_spaces.items()}
        for _ in range(WARMUP + steps)
    ]
    env.reset()
    for step, step_actions in enumerate(actions):
        if step == WARMUP:
            start = time.perf_counter()
        env.step(step_actions)
    elapsed = time.perf_counter() - start
    env.close()
    return num_envs * steps / elapsed


def mappo_frames_per_second(scenario: str, agent_conf: str | None, *, num_envs: int, steps: int) -> float:
    """Frames/s of MAPPO training on :func:`make_mamujoco_env` (one rollout and its update untimed first)."""
    from bench_common import TrainCfg, make_agent, train_frames_per_second

    env = make_mamujoco_env(scenario, agent_conf, num_envs=num_envs, seed=0)
    cfg = TrainCfg(hidden=(128, 128), learning_rate=5e-4)
    agent = make_agent("ours-mappo", env, shared=False, cfg=cfg, device="cpu")
    result = train_frames_per_second(agent, env, timesteps=steps, warmup=cfg.rollouts)
    env.close()
    return result


def cell(values: list[float], bases: list[float]) -> str:
    """The median of ``values``, and the median of the paired ratios to ``bases`` with their range."""
    ratios = [value / base for value, base in zip(values, bases, strict=True)]
    return f"{statistics.median(values):,.0f} ({statistics.median(ratios):.2f}x, {min(ratios):.2f}-{max(ratios):.2f})"


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()}-core {model}"


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    mujoco.set_mju_user_warning(lambda message: None)
    scenario, agent_conf = parse_mamujoco_name(args.spec)
    header = ["num_envs", "raw", *(f"raw, {w} worker{'s' if w > 1 else ''}" for w in args.workers), "wrapper"]
    header += ["MAPPO training"] if args.train_steps else []
    print(f"MaMuJoCo {args.spec}: frames/s, median of {args.repeats} (x raw: the median of the paired ratios, range)")
    print("| " + " | ".join(header) + " |\n|" + "---:|" * len(header))
    load = [os.getloadavg()[0]]  # other work on the machine takes the cores that workers would use
    rows = []
    for num_envs in args.num_envs:
        raw, workers = [], {w: [] for w in args.workers}
        wrapper, mappo = [], []
        for _ in range(args.repeats):
            raw.append(raw_frames_per_second(scenario, agent_conf, num_envs=num_envs, steps=args.steps, workers=0))
            for w in (w for w in args.workers if w <= num_envs):  # no worker without an env
                workers[w].append(
                    raw_frames_per_second(scenario, agent_conf, num_envs=num_envs, steps=args.steps, workers=w)
                )
            wrapper.append(wrapper_frames_per_second(scenario, agent_conf, num_envs=num_envs, steps=args.steps))
            if args.train_steps:
                mappo.append(mappo_frames_per_second(scenario, agent_conf, num_envs=num_envs, steps=args.train_steps))
        row = [str(num_envs), f"{statistics.median(raw):,.0f}"]
        row += [cell(values, raw) if values else "-" for values in (*workers.values(), wrapper)]
        row += [cell(mappo, raw)] if args.train_steps else []
        rows.append(row)
        print("| " + " | ".join(row) + " |", flush=True)
    load.append(os.getloadavg()[0])
    print(f"load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            argv = sys.argv[1:] if argv is None else argv
            if "--machine" in argv:  # a label, in the machine line
                at = argv.index("--machine")
                argv = argv[:at] + argv[at + 2 :]
            f.write(f"# command: python benchmarks/mamujoco_throughput.py {shlex.join(argv)}\n")
            f.write(
                f"# machine: {args.machine or machine()}, load average {load[0]:.1f} at the start and {load[1]:.1f} "
                f"at the end; torch {torch.__version__}, mujoco {mujoco.__version__}\n"
            )
            f.write(f"# date: {datetime.date.today().isoformat()}\n")
            f.write(
                f"# note: MaMuJoCo {args.spec}, frames/s (a frame: one env stepped once), median of {args.repeats}, "
                "and in brackets the median of the ratios to raw within a repeat (their range); -: more workers than envs\n"
            )
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)


if __name__ == "__main__":
    main()
