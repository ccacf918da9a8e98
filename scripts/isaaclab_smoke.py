"""Build Isaac Lab 3.0's ``Isaac-Pendulum-MARL-Direct`` kit-less on the CPU and step it: a check of the install that
``scripts/setup_isaaclab.sh`` ends with, and the run that compiles Warp's kernels into ``WARP_CACHE_PATH`` (minutes
the first time, seconds after).

Run it with the Isaac Lab interpreter, ``ISAACSIM_ASSET_ROOT`` pointing at the stand-in assets
(``scripts/make_isaaclab_assets.py``)::

    ISAACSIM_ASSET_ROOT=.isaaclab-assets WARP_CACHE_PATH=.isaaclab-cache/warp \\
        .isaaclab-venv/bin/python scripts/isaaclab_smoke.py

It exits non-zero when the env cannot be built, when its spaces are not the task's (agents ``cart``/``pendulum``,
observations 4/3, one action each, state 7), or when an unactuated pendulum does not fall.
"""

from __future__ import annotations

import argparse
import time

TASK = "Isaac-Pendulum-MARL-Direct"
FALL_STEPS = 10
"""Env steps (1/60 s each) over which an unactuated pole must lean further."""


def make_env(num_envs: int, *, seed: int = 0):
    """The task's env as ``isaaclab train`` makes it on a CPU: its registered config with the presets resolved
    (Newton/MJWarp physics), ``sim.device = "cpu"``, Isaac Lab's ``launch_simulation`` (kit-less: it starts nothing),
    then ``gym.make``. Returns ``(env, launch context)``; exit the context after closing the env."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab.app import launch_simulation
    from isaaclab_tasks.utils.hydra import resolve_presets
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    cfg = resolve_presets(load_cfg_from_registry(TASK, "env_cfg_entry_point"))
    cfg.sim.device = "cpu"
    cfg.scene.num_envs = num_envs
    cfg.seed = seed
    launch = launch_simulation(cfg, {"device": "cpu"})
    launch.__enter__()
    return gym.make(TASK, cfg=cfg), launch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60, help=f"at least {FALL_STEPS}")
    args = parser.parse_args(argv)

    import torch

    start = time.perf_counter()
    env, launch = make_env(args.num_envs)
    unwrapped = env.unwrapped
    built = time.perf_counter() - start
    sizes = {uid: unwrapped.observation_spaces[uid].shape[0] for uid in unwrapped.possible_agents}
    actions = {uid: unwrapped.action_spaces[uid].shape[0] for uid in unwrapped.possible_agents}
    observations, _ = env.reset()
    state = unwrapped.state()
    expected = ({"cart": 4, "pendulum": 3}, {"cart": 1, "pendulum": 1}, 7)
    if (sizes, actions, state.shape[-1]) != expected:
        raise SystemExit(f"{TASK}: spaces {sizes}, {actions}, state {state.shape[-1]}; expected {expected}")
    zero = {uid: torch.zeros(args.num_envs, n) for uid, n in actions.items()}
    first_angle = observations["cart"][:, 2].abs().mean().item()
    start = time.perf_counter()
    for step in range(args.steps):
        observations, *_ = env.step(zero)
        if step == FALL_STEPS - 1:  # before the first poles pass 90 degrees and their envs reset
            last_angle = observations["cart"][:, 2].abs().mean().item()
    stepped = time.perf_counter() - start
    env.close()
    launch.__exit__(None, None, None)
    print(
        f"{TASK}: built in {built:.1f} s; {args.steps} steps of {args.num_envs} envs in {stepped:.1f} s "
        f"({args.steps * args.num_envs / stepped:.0f} env frames/s); mean |pole angle| {first_angle:.2f} -> "
        f"{last_angle:.2f} rad after {FALL_STEPS} steps with no action"
    )
    if not last_angle > first_angle:
        raise SystemExit(f"{TASK}: the unactuated pole did not fall ({first_angle:.3f} -> {last_angle:.3f} rad)")


if __name__ == "__main__":
    main()
