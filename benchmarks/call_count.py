"""Named Python functions one MAPPO env step and its update pass through: skrl's built-in agent against ours.

A reader following one env step (``act``, ``record_transition``) and one update (``post_interaction`` at the end of
a rollout) reads every function the interpreter enters on the way. This counts them with ``sys.setprofile``: every
distinct function (file, name, first line) of skrl and of this package entered during one such step, leaving out
comprehensions, generator expressions and lambdas. Only the agent's calls are profiled: what the env's step enters
(skrl's space helpers included) is not the agent's. The env is the built-in spread env with 4 agents, models of their
own (``make_models`` of the tests' builders: Gaussian policy, value MLP), a rollout of one step so that the step
includes the update, one epoch of one mini-batch. The step is counted after one uncounted step (lazy allocation).

Usage::

    python benchmarks/call_count.py            # ours (default config) and skrl's MAPPO
    python benchmarks/call_count.py --list     # and every function counted, by file
    python benchmarks/call_count.py --csv F    # and ours by file as a CSV (the results page's table)
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
from collections import defaultdict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

import skrl  # noqa: E402

import skrl_marl_ext  # noqa: E402
from skrl_marl_ext.envs import make_spread_env  # noqa: E402

PACKAGES = (os.path.dirname(skrl.__file__), os.path.dirname(skrl_marl_ext.__file__))
ANONYMOUS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")
CFG = {
    "rollouts": 1,
    "learning_epochs": 1,
    "mini_batches": 1,
    "experiment": {"write_interval": 0, "checkpoint_interval": 0},
}


def build(which: str, env):
    from helpers import make_models  # tests/helpers.py

    models = make_models(env, "mappo")
    common = {
        "possible_agents": env.possible_agents,
        "models": models,
        "observation_spaces": env.observation_spaces,
        "state_spaces": env.state_spaces,
        "action_spaces": env.action_spaces,
        "device": env.device,
    }
    if which == "skrl":
        from skrl.memories.torch import RandomMemory
        from skrl.multi_agents.torch.mappo import MAPPO, MAPPO_CFG

        memories = {uid: RandomMemory(memory_size=1, num_envs=env.num_envs) for uid in env.possible_agents}
        # skrl 2.1.1's expand refuses an empty dict: per-agent *_kwargs given per agent
        kwargs = {uid: {} for uid in env.possible_agents}
        names = ("observation_preprocessor", "state_preprocessor", "value_preprocessor", "learning_rate_scheduler")
        cfg = MAPPO_CFG(
            rollouts=1,
            learning_epochs=1,
            mini_batches=1,
            experiment=dict(CFG["experiment"]),
            **{f"{name}_kwargs": dict(kwargs) for name in names},
        )
        agent = MAPPO(memories=memories, cfg=cfg, **common)
    else:
        agent = skrl_marl_ext.MAPPO(cfg=dict(CFG), **common)
    agent.init()
    agent.enable_training_mode(True)
    return agent


def one_step(agent, env, observations, states, t, profile=None):
    """One step as skrl's trainers run it: acting, the env and recording without gradients, then the update.
    ``profile`` (a ``sys.setprofile`` function) is on during the agent's three calls only."""
    with torch.no_grad():
        sys.setprofile(profile)
        actions, _ = agent.act(observations, states, timestep=t, timesteps=10)
        sys.setprofile(None)
        next_obs, rewards, terminated, truncated, infos = env.step(actions)
        next_states = env.state()
        sys.setprofile(profile)
        agent.record_transition(
            observations=observations,
            states=states,
            actions=actions,
            rewards=rewards,
            next_observations=next_obs,
            next_states=next_states,
            terminated=terminated,
            truncated=truncated,
            infos=infos,
            timestep=t,
            timesteps=10,
        )
    agent.post_interaction(timestep=t, timesteps=10)
    sys.setprofile(None)
    return next_obs, next_states


def count(which: str) -> dict[str, set[str]]:
    torch.manual_seed(0)
    env = make_spread_env(num_agents=4, num_envs=8)
    agent = build(which, env)
    observations, _ = env.reset()
    states = env.state()
    observations, states = one_step(agent, env, observations, states, 0)  # uncounted: lazy allocation
    seen: dict[str, set[str]] = defaultdict(set)

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_name in ANONYMOUS or not code.co_filename.startswith(tuple(p + os.sep for p in PACKAGES)):
            return
        root = next(p for p in PACKAGES if code.co_filename.startswith(p + os.sep))
        seen[os.path.relpath(code.co_filename, os.path.dirname(root))].add(f"{code.co_name}:{code.co_firstlineno}")

    try:
        one_step(agent, env, observations, states, 1, profile)
    finally:
        sys.setprofile(None)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every function counted, by file")
    parser.add_argument("--csv", help="also write ours by file (file, functions, names) to this CSV")
    args = parser.parse_args()
    totals = []
    for which in ("skrl", "ours"):
        seen = count(which)
        functions = sum(len(names) for names in seen.values())
        totals.append(f"{which} {functions} in {len(seen)} files")
        print(f"{which}: {functions} named functions in {len(seen)} files")
        by_file = {path: sorted(seen[path], key=lambda s: int(s.split(":")[1])) for path in sorted(seen)}
        if args.list:
            for path, names in by_file.items():
                print(f"  {path}: {', '.join(names)}")
        if args.csv and which == "ours":
            with open(args.csv, "w", newline="") as f:
                python = ".".join(map(str, sys.version_info[:2]))
                f.write(f"# command: python benchmarks/call_count.py --csv {args.csv}\n")
                f.write(f"# machine: exact counts, the same on any machine (Python {python}, torch ")
                f.write(f"{torch.__version__.split('+')[0]}, skrl {skrl.__version__})\n")
                f.write(f"# date: {datetime.date.today().isoformat()}\n")
                f.write(f"# note: ours by file; named functions: {', '.join(totals)}\n")
                writer = csv.writer(f)
                writer.writerow(["file", "functions", "names"])
                for path, names in by_file.items():
                    writer.writerow([f"`{path}`", len(names), ", ".join(name.split(":")[0] for name in names)])


if __name__ == "__main__":
    main()
