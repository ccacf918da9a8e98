"""MADDPG on MPE ``simple_spread_v3`` (mpe2), 8 copies batched by BatchedParallelEnvWrapper, from examples/maddpg.yaml.

Run: ``python examples/mpe_spread_maddpg.py [--timesteps N]`` (needs ``pip install 'skrl-marl-ext[mpe]'``).
The same from the command line:
``skrl-marl train --config examples/maddpg.yaml --env pettingzoo:mpe2.simple_spread_v3 --num-envs 8``.
"""

import argparse
import os

from skrl_marl_ext.envs import EpisodeRecorder, make_pettingzoo_env
from skrl_marl_ext.runner import Runner

parser = argparse.ArgumentParser()
parser.add_argument("--timesteps", type=int, default=None, help="default: the YAML's trainer.timesteps")
parser.add_argument("--num-envs", type=int, default=8)
args = parser.parse_args()

cfg = Runner.load_cfg_from_yaml(os.path.join(os.path.dirname(__file__), "maddpg.yaml"))
if args.timesteps:
    cfg["trainer"]["timesteps"] = args.timesteps
env = EpisodeRecorder(
    make_pettingzoo_env("mpe2.simple_spread_v3", num_envs=args.num_envs, seed=cfg["seed"], N=3, max_cycles=25)
)
runner = Runner(env, cfg)
runner.run("train")
first, last = env.episodes[: args.num_envs], env.episodes[-args.num_envs :]
for name, episodes in (("first", first), ("last", last)):
    mean = sum(sum(r.values()) / len(r) for _, r in episodes) / len(episodes)
    print(f"{name} {len(episodes)} episodes, mean return per agent: {mean:.2f}")
