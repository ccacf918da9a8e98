"""Training frames/s of skrl's MAPPO and ours on Isaac Lab 3.0's ``Isaac-Pendulum-MARL-Direct`` (kit-less, CPU), at
the task's shipped skrl config, beside the env stepped alone.

Both agents are built from the task's ``skrl_marl_mappo_cfg.yaml`` in the installed ``isaaclab_tasks`` (rollouts 16,
8 epochs x 1 mini-batch, [32, 32] ELU models, KL-adaptive learning rate, ``RunningStandardScaler`` inputs), skrl's by
skrl's Runner and ours by :class:`skrl_marl_ext.runner.Runner`, on one env wrapped by skrl's Isaac Lab wrapper. A frame
is one step of one env (both agents acting once). Training is timed through
:func:`bench_common.train_frames_per_second` (skrl's training loop, updates included; one rollout untimed first); "env
alone" steps the same env with uniform random actions in [-1, 1] and reads ``state()``, the fastest any agent can go.
Each size interleaves skrl, ours and the env alone ``--repeats`` times; the table gives medians and the ratio ours /
skrl with the range of the paired ratios.

The robot is the stand-in of ``scripts/make_isaaclab_assets.py`` (its masses and sizes are not NVIDIA's asset's), so
the env's own cost is that of the stand-in. Run it with the Isaac Lab interpreter (``scripts/setup_isaaclab.sh``)::

    . .isaaclab-cache/env.sh
    .isaaclab-venv/bin/python benchmarks/isaaclab_pendulum_speed.py --num-envs 64 1024 --timesteps 320 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys

import torch
from bench_common import env_frames_per_second, markdown_table, median, round_up, train_frames_per_second

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "Isaac-Pendulum-MARL-Direct"
RUNS = ("skrl MAPPO", "our MAPPO", "env alone")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024], help="(default: %(default)s)")
    parser.add_argument("--timesteps", type=int, default=320, help="timed steps per run, whole rollouts (%(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per size (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default: %(default)s)")
    return parser.parse_args(argv)


def shipped_cfg() -> dict:
    """The task's MAPPO YAML file as skrl's Runner reads it, without TensorBoard, checkpoints or a progress bar."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from skrl.utils.runner.torch import Runner

    module, name = gym.spec(TASK).kwargs["skrl_mappo_cfg_entry_point"].split(":")
    path = os.path.join(os.path.dirname(importlib.import_module(module).__file__), name)
    cfg = Runner.load_cfg_from_yaml(path)
    cfg["agent"]["experiment"].update(write_interval=0, checkpoint_interval=0, directory="/tmp/isaaclab_speed")
    cfg["trainer"].update(disable_progressbar=True, headless=True, close_environment_at_exit=False)
    return cfg


def measure(env, cfg: dict, *, timesteps: int, repeats: int) -> dict[str, list[float]]:
    """Frames/s of each of :data:`RUNS`, interleaved ``repeats`` times on ``env``."""
    from skrl.utils.runner.torch import Runner as SkrlRunner

    from skrl_marl_ext.runner import Runner

    rollouts = cfg["agent"]["rollouts"]
    results: dict[str, list[float]] = {run: [] for run in RUNS}
    for repeat in range(repeats):
        for run, runner_class in (("skrl MAPPO", SkrlRunner), ("our MAPPO", Runner)):
            run_cfg = copy.deepcopy(cfg)
            run_cfg["seed"] = repeat
            agent = runner_class(env, run_cfg).agent
            results[run].append(train_frames_per_second(agent, env, timesteps=timesteps, warmup=rollouts))
            print(f"# {env.num_envs} envs, repeat {repeat}, {run}: {results[run][-1]:.0f} frames/s", file=sys.stderr)
        results["env alone"].append(env_frames_per_second(env, timesteps=timesteps))
        print(f"# {env.num_envs} envs, repeat {repeat}, env alone: {results['env alone'][-1]:.0f}", file=sys.stderr)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from skrl.envs.wrappers.torch import wrap_env

    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from isaaclab_smoke import make_env

    cfg = shipped_cfg()
    timesteps = round_up(args.timesteps, cfg["agent"]["rollouts"])
    rows = []
    for num_envs in args.num_envs:
        env, launch = make_env(num_envs, seed=0)
        results = measure(wrap_env(env, "isaaclab"), cfg, timesteps=timesteps, repeats=args.repeats)
        env.close()
        launch.__exit__(None, None, None)
        skrl = results["skrl MAPPO"]
        for run in RUNS:
            ratio = "-"
            if run == "our MAPPO":
                pairs = [ours / base for ours, base in zip(results[run], skrl, strict=True)]
                ratio = f"{median(results[run]) / median(skrl):.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
            rows.append([num_envs, run, f"{median(results[run]):.0f}", f"{min(results[run]):.0f}", ratio])
    print(
        f"{TASK} (stand-in robot), kit-less, device cpu, threads {torch.get_num_threads()}; shipped "
        f"skrl_marl_mappo_cfg.yaml; {timesteps} timed steps, {args.repeats} repeats\n"
    )
    print(markdown_table(["envs", "run", "frames/s (median)", "frames/s (min)", "ours / skrl (paired range)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
