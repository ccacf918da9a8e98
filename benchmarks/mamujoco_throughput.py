"""Env frames/s of MaMuJoCo stepped alone with random actions: through this package's wrapper against the raw
PettingZoo env, at several numbers of envs.

A frame is one step of one env (every agent acting once). "raw" steps ``num_envs`` ``mamujoco_v1.parallel_env``
copies in a Python loop with NumPy actions and resets a copy when its episode ends, which is what the wrapper does
around them; "wrapper" is :func:`skrl_marl_ext.envs.make_mamujoco_env` taking torch actions and returning stacked
float32 tensors and the infos (a MAPPO run also reads ``state()`` each step; not timed here). Repeats interleave the
two; the table gives medians. MuJoCo's warnings are dropped for the whole run (nothing is logged).

Example (2 cores)::

    python benchmarks/mamujoco_throughput.py --spec HalfCheetah-2x3 --num-envs 1 8 20 --steps 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import mujoco
import numpy as np
import torch

from skrl_marl_ext.envs.mamujoco import make_mamujoco_env, parse_mamujoco_name

WARMUP = 20
"""Untimed steps before the clock starts."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default="HalfCheetah-2x3", help="<scenario>-<agent_conf> (default: %(default)s)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 20], help="(default: %(default)s)")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per measure (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="measures per row, interleaved (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    return parser.parse_args(argv)


def raw_frames_per_second(scenario: str, agent_conf: str | None, *, num_envs: int, steps: int) -> float:
    """Frames/s of ``num_envs`` raw ``mamujoco_v1`` envs stepped one after another, each reset when it ends."""
    from gymnasium_robotics.envs.multiagent_mujoco import mamujoco_v1

    envs = [mamujoco_v1.parallel_env(scenario, agent_conf) for _ in range(num_envs)]
    rng = np.random.default_rng(0)
    spaces = {uid: envs[0].action_space(uid) for uid in envs[0].possible_agents}
    actions = [  # drawn before the clock starts: the env alone is timed
        [{uid: rng.uniform(-1, 1, space.shape).astype(space.dtype) for uid, space in spaces.items()} for _ in envs]
        for _ in range(WARMUP + steps)
    ]
    for index, env in enumerate(envs):
        env.reset(seed=index)
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


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    mujoco.set_mju_user_warning(lambda message: None)  # each model load warns; neither console nor MUJOCO_LOG.TXT
    scenario, agent_conf = parse_mamujoco_name(args.spec)
    measures = {"raw": raw_frames_per_second, "wrapper": wrapper_frames_per_second}
    print(f"MaMuJoCo {args.spec}: env frames/s, random actions, median of {args.repeats} x {args.steps} steps")
    print("| num_envs | raw pettingzoo | our wrapper | wrapper / raw |")
    print("|---:|---:|---:|---:|")
    for num_envs in args.num_envs:
        results = {name: [] for name in measures}
        for _ in range(args.repeats):
            for name, measure in measures.items():
                results[name].append(measure(scenario, agent_conf, num_envs=num_envs, steps=args.steps))
        raw, ours = (statistics.median(results[name]) for name in measures)
        print(f"| {num_envs} | {raw:,.0f} | {ours:,.0f} | {ours / raw:.2f} |")


if __name__ == "__main__":
    main()
