"""MAPPO on VMAS ``balance`` (3 agents carry a package on a line to a goal), from examples/mappo.yaml.

Run: ``python examples/vmas_balance_mappo.py [--timesteps N]`` (needs ``pip install 'skrl-marl-ext[vmas]'``).
The same run from the command line: ``skrl-marl train --config examples/mappo.yaml``.
"""

import argparse
import os

from skrl_marl_ext.envs import EpisodeRecorder, make_vmas_env
from skrl_marl_ext.runner import Runner

parser = argparse.ArgumentParser()
parser.add_argument("--timesteps", type=int, default=None, help="default: the YAML's trainer.timesteps")
parser.add_argument("--num-envs", type=int, default=128)
args = parser.parse_args()

cfg = Runner.load_cfg_from_yaml(os.path.join(os.path.dirname(__file__), "mappo.yaml"))
if args.timesteps:
    cfg["trainer"]["timesteps"] = args.timesteps
env = EpisodeRecorder(make_vmas_env("balance", num_envs=args.num_envs, max_steps=100, seed=cfg["seed"]))
runner = Runner(env, cfg)
runner.run("train")
last = env.episodes[-args.num_envs :]
if last:
    mean = sum(sum(r.values()) / len(r) for _, r in last) / len(last)
    print(f"mean return per agent over the last {len(last)} episodes: {mean:.2f}")
else:
    print("mean return per agent: no episode finished yet (episodes last 100 steps)")
