"""The code one MAPPO env step and its update pass through: skrl's built-in agent against ours.

A reader following one env step (``act``, ``record_transition``) and one update (``post_interaction`` at the end of
a rollout) reads every line the interpreter executes on the way. This traces them with ``sys.settrace``: every
distinct line of skrl and of this package executed during one such step, by part (the algorithm's file, the pure
math, skrl, the models, the rest of the package), the named functions entered (comprehensions, generator expressions
and lambdas left out) and the deepest stack of named skrl/package frames. Only the agent's calls are traced: what the env's step enters
(skrl's space helpers included) is not the agent's. The env is the built-in spread env with 4 agents, models of their
own (``make_models`` of the tests' builders: Gaussian policy, value MLP), a rollout of one step so that the step
includes the update, one epoch of one mini-batch. The step is counted after one uncounted step (lazy allocation).

Usage::

    python benchmarks/call_count.py            # ours (default config) and skrl's MAPPO
    python benchmarks/call_count.py --list     # and every function counted, by file, and the deepest stack
    python benchmarks/call_count.py --csv F    # and ours by file as a CSV (the results page's table)
    python benchmarks/call_count.py --one-by-one   # ours with the agents' models run one by one
"""

from __future__ import annotations

import argparse
import ast
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
    ``profile`` (a ``sys.settrace`` function) is on during the agent's three calls only."""
    with torch.no_grad():
        sys.settrace(profile)
        actions, _ = agent.act(observations, states, timestep=t, timesteps=10)
        sys.settrace(None)
        next_obs, rewards, terminated, truncated, infos = env.step(actions)
        next_states = env.state()
        sys.settrace(profile)
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
    sys.settrace(None)
    return next_obs, next_states


ALGORITHM_FILES = {"ours": "skrl_marl_ext/algorithms/mappo.py", "skrl": "skrl/multi_agents/torch/mappo/mappo.py"}
PARTS = (
    "the algorithm's file",
    "pure math (`functional/`)",
    "skrl",
    "the models (the user's)",
    "the rest of the package",
)


def part(which: str, path: str) -> str:
    """The part of the code ``path`` (relative to site-packages or the repository) belongs to."""
    if path == ALGORITHM_FILES[which]:
        return PARTS[0]
    if path.startswith("skrl_marl_ext/functional/"):
        return PARTS[1]
    if path.startswith("skrl/"):
        return PARTS[2]
    if path.startswith("skrl_marl_ext/models/"):
        return PARTS[3]
    return PARTS[4]


def count(which: str) -> dict[str, set[str]]:
    """Named functions entered by one step, by file (see :func:`trace`)."""
    return trace(which)["functions"]


def trace(which: str) -> dict:
    """One counted step of ``which`` (``"skrl"`` or ``"ours"``): ``functions`` (file -> names entered), ``lines``
    (file -> line numbers executed), ``depth`` (the deepest stack of named skrl/package frames) and ``deepest`` (that
    stack, outermost first)."""
    torch.manual_seed(0)
    env = make_spread_env(num_agents=4, num_envs=8)
    agent = build(which, env)
    observations, _ = env.reset()
    states = env.state()
    observations, states = one_step(agent, env, observations, states, 0)  # uncounted: lazy allocation
    seen: dict[str, set[str]] = defaultdict(set)
    lines: dict[str, set[int]] = defaultdict(set)
    deepest: list[str] = []
    prefixes = tuple(p + os.sep for p in PACKAGES)

    def where(code) -> str | None:
        if not code.co_filename.startswith(prefixes):
            return None
        root = next(p for p in PACKAGES if code.co_filename.startswith(p + os.sep))
        return os.path.relpath(code.co_filename, os.path.dirname(root))

    def local(frame, event, arg):
        if event == "line":
            lines[where(frame.f_code)].add(frame.f_lineno)
        return local

    def profile(frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        path = where(code)
        if path is None:
            return None
        if code.co_name not in ANONYMOUS:
            seen[path].add(f"{code.co_name}:{code.co_firstlineno}")
            stack, f = [], frame
            while f is not None:
                p = where(f.f_code)
                if p is not None and f.f_code.co_name not in ANONYMOUS:
                    stack.append(f"{p}:{f.f_code.co_name}")
                f = f.f_back
            if len(stack) > len(deepest):
                deepest[:] = stack[::-1]
        return local

    try:
        one_step(agent, env, observations, states, 1, profile)
    finally:
        sys.settrace(None)
    return {"functions": seen, "lines": lines, "depth": len(deepest), "deepest": deepest}


def statements(path: str, numbers: set[int]) -> int:
    """How many statements of ``path`` executed lines ``numbers`` fall in: a statement spread over several lines (a
    call with a keyword argument per line) counts once, a compound statement (``if``, ``for``, ``with``, ``def``) by its
    header. The line count depends on how the code is formatted; this one does not."""
    root = next(p for p in PACKAGES if path.startswith(os.path.basename(p) + "/"))
    tree = ast.parse(open(os.path.join(os.path.dirname(root), path)).read())
    spans = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
            spans.add((node.lineno, max(node.lineno, end)))
    return sum(any(start <= n <= end for n in numbers) for start, end in spans)


def by_part(which: str, result: dict) -> dict[str, int]:
    """Distinct lines executed per part, the total, the files and the deepest stack."""
    counts = dict.fromkeys(PARTS, 0)
    for path, numbers in result["lines"].items():
        counts[part(which, path)] += len(numbers)
    counts["all"] = sum(counts[p] for p in PARTS)
    counts["statements"] = sum(statements(path, numbers) for path, numbers in result["lines"].items())
    counts["files"] = len(result["lines"])
    counts["depth"] = result["depth"]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every function counted and the deepest stack")
    parser.add_argument("--csv", help="also write ours by file (file, lines, functions, names) to this CSV")
    parser.add_argument(
        "--one-by-one", action="store_true", help="ours with batch_agent_models=False (the agents' models one by one)"
    )
    args = parser.parse_args()
    if args.one_by_one:
        CFG["batch_agent_models"] = False
    totals = []
    for which in ("skrl", "ours"):
        result = trace(which)
        seen, counts = result["functions"], by_part(which, result)
        functions = sum(len(names) for names in seen.values())
        totals.append(f"{which} {counts['all']} lines, {functions} functions in {counts['files']} files")
        print(
            f"{which}: {counts['all']} distinct lines ({counts['statements']} statements) in {counts['files']} files, "
            f"{functions} named functions, deepest stack of named frames {counts['depth']}"
        )
        for name in PARTS:
            print(f"  {name}: {counts[name]}")
        by_file = {path: sorted(seen[path], key=lambda s: int(s.split(":")[1])) for path in sorted(result["lines"])}
        if args.list:
            for path, names in by_file.items():
                print(f"  {path} ({len(result['lines'][path])} lines): {', '.join(names)}")
            print("  deepest: " + " > ".join(result["deepest"]))
        if args.csv and which == "ours":
            with open(args.csv, "w", newline="") as f:
                python = ".".join(map(str, sys.version_info[:2]))
                f.write(f"# command: python benchmarks/call_count.py --csv {args.csv}\n")
                f.write(f"# machine: exact counts, the same on any machine (Python {python}, torch ")
                f.write(f"{torch.__version__.split('+')[0]}, skrl {skrl.__version__})\n")
                f.write(f"# date: {datetime.date.today().isoformat()}\n")
                f.write(f"# note: ours by file; distinct lines executed: {', '.join(totals)}\n")
                writer = csv.writer(f)
                writer.writerow(["file", "lines", "functions", "names"])
                for path, names in by_file.items():
                    row = [f"`{path}`", len(result["lines"][path]), len(names)]
                    writer.writerow([*row, ", ".join(name.split(":")[0] for name in names)])


if __name__ == "__main__":
    main()
