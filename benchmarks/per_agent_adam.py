"""The cost of one optimiser step of a batched group's Adam (``G`` agents with models of their own, stacked).

Each agent has a policy and a value MLP (``--obs``, ``--state``, ``--hidden``; PPO's two parameter groups) whose parameters are
stacked ``(G, ...)`` as a batched group stacks them (:class:`skrl_marl_ext.groups.stacked.StackedModules`). Gradients
are random and set before each step, outside the timing. Three cases of what the agents' own optimisers would do:

- ``equal``: every agent steps, one learning rate for all (the default config);
- ``distinct``: every agent steps, each at its own learning rate (``KLAdaptiveLR`` once the agents' KLs differ);
- ``half-stopped``: each its own learning rate, and half the agents left out of the step (the KL early stop).

Timed, best and median of ``--repeats`` runs of ``--steps`` steps each, in microseconds per step:

- ``ours``: this package's :class:`~skrl_marl_ext.groups.optim.Adam`;
- ``baseline``: the same of another checkout (``--baseline PATH``, e.g. the commit before the vectorised step:
  ``git worktree add /tmp/base f2e4a28``), run in a child process with that checkout first on ``PYTHONPATH``;
- ``torch-loop``: ``G`` separate ``torch.optim.Adam(fused=True)``, one per agent, as agents run one by one;
- ``torch-fused``: one ``torch.optim.Adam(fused=True)`` over the stacked tensors (``equal`` only: it has one rate).

Before timing, ``ours`` is checked against ``torch-loop`` on the same gradients over the run (largest difference of
any parameter, printed and written).

Usage::

    python benchmarks/per_agent_adam.py --agents 8,32 --csv benchmarks/results/per_agent_adam.csv
    python benchmarks/per_agent_adam.py --agents 8,32 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

CASES = ("equal", "distinct", "half-stopped")


def mlp(sizes: list[int]) -> nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def agents_models(G: int, obs: int, hidden: list[int], state: int | None = None) -> list[nn.ModuleDict]:
    torch.manual_seed(0)
    state = state or obs
    return [nn.ModuleDict({"policy": mlp([obs, *hidden, 2]), "value": mlp([state, *hidden, 1])}) for _ in range(G)]


def rates_of(case: str, G: int, base: float = 3e-4) -> list[float]:
    return [base] * G if case == "equal" else [base * (1 + 0.1 * i) for i in range(G)]


def mask_of(case: str, G: int, step: int) -> list[bool] | None:
    if case != "half-stopped":
        return None
    return [(i + step) % 2 == 0 for i in range(G)]


def stacked_optimizer(models: list[nn.ModuleDict], case: str, lr: float):
    """The package's Adam over the models stacked as a batched group stacks them (two parameter groups), each agent
    at its rate of ``case``; and the stacked parameters."""
    from skrl_marl_ext.groups.stacked import StackedModules

    try:
        from skrl_marl_ext.groups.optim import make_adam

        kwargs = {"stacked": True}
    except ImportError:  # a checkout before groups/optim.py: make_adam(agents=G) was a batched group's
        from skrl_marl_ext.groups.stacked import make_adam

        kwargs = {}
    policy = StackedModules([m["policy"] for m in models])
    value = StackedModules([m["value"] for m in models])
    G, groups = len(models), [{"params": policy.parameters(), "lr": lr}, {"params": value.parameters(), "lr": lr}]
    optimizer = make_adam(groups, agents=G, **kwargs)
    for i, rate in enumerate(rates_of(case, G, lr)):
        for group in optimizer.agent_param_groups[i]:
            group["lr"] = rate
    return optimizer, policy.parameters() + value.parameters()


def grads_for(params: list[torch.Tensor], steps: int) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=generator) for p in params] for _ in range(steps)]


def set_grads(params, grads) -> None:
    for p, g in zip(params, grads, strict=True):
        p.grad = torch.empty_like(p).copy_(g)  # in the parameter's own layout, as autograd makes it


def time_steps(step, params, grads, *, repeats: int) -> list[float]:
    """Microseconds per step of each run of ``len(grads)`` steps (gradients set outside the timing)."""
    runs = []
    for _ in range(repeats):
        total = 0.0
        for t, g in enumerate(grads):
            set_grads(params, g)
            start = time.perf_counter()
            step(t)
            total += time.perf_counter() - start
        runs.append(total / len(grads) * 1e6)
    return runs


def loop_optimizers(models, case, lr):
    """One fused torch Adam per agent, two parameter groups, the agent's rate."""
    return [
        torch.optim.Adam(
            [{"params": m["policy"].parameters()}, {"params": m["value"].parameters()}], lr=rate, fused=True
        )
        for m, rate in zip(models, rates_of(case, len(models), lr), strict=True)
    ]


def check(G, case, args) -> float:
    """Largest difference of the package's Adam from ``G`` torch Adams over ``--steps`` steps, same gradients."""
    models = agents_models(G, args.obs, args.hidden, args.state)
    reference = copy.deepcopy(models)
    optimizer, params = stacked_optimizer(models, case, args.lr)
    loop = loop_optimizers(reference, case, args.lr)
    worst = 0.0
    for t, grads in enumerate(grads_for(params, args.steps)):
        set_grads(params, grads)
        agents = mask_of(case, G, t)
        optimizer.step(**({} if agents is None else {"agents": agents}))
        for i, (m, opt) in enumerate(zip(reference, loop, strict=True)):
            own = [g[i] for g in grads]
            for p, g in zip([*m["policy"].parameters(), *m["value"].parameters()], own, strict=True):
                p.grad = g.clone()
            if agents is None or agents[i]:
                opt.step()
        with torch.no_grad():
            for a, b in zip(models, reference, strict=True):
                for x, y in zip(a.parameters(), b.parameters(), strict=True):
                    worst = max(worst, float((x - y).abs().max()))
    return worst


def run(args) -> list[dict]:
    from skrl_marl_ext.groups.stacked import StackedModules

    rows = []
    for G in args.agents:
        for case in CASES:
            models = agents_models(G, args.obs, args.hidden, args.state)
            optimizer, params = stacked_optimizer(models, case, args.lr)

            def step(t, optimizer=optimizer, case=case, G=G):
                agents = mask_of(case, G, t)
                optimizer.step(**({} if agents is None else {"agents": agents}))

            runs = time_steps(step, params, grads_for(params, args.steps), repeats=args.repeats)
            rows.append(row(args, G, case, args.label, runs, check(G, case, args)))
            if args.only_ours:
                continue
            models = agents_models(G, args.obs, args.hidden, args.state)
            loop = loop_optimizers(models, case, args.lr)
            flat = [p for m in models for p in [*m["policy"].parameters(), *m["value"].parameters()]]

            def loop_step(t, loop=loop, case=case, G=G):
                agents = mask_of(case, G, t)
                for i, opt in enumerate(loop):
                    if agents is None or agents[i]:
                        opt.step()

            runs = time_steps(loop_step, flat, grads_for(flat, args.steps), repeats=args.repeats)
            rows.append(row(args, G, case, "torch-loop", runs, None))
            if case == "equal":  # one rate: one torch Adam over the stacked tensors
                models = agents_models(G, args.obs, args.hidden, args.state)
                params = StackedModules([m["policy"] for m in models]).parameters()
                params += StackedModules([m["value"] for m in models]).parameters()
                fused = torch.optim.Adam(params, lr=args.lr, fused=True)
                runs = time_steps(
                    lambda t, fused=fused: fused.step(), params, grads_for(params, args.steps), repeats=args.repeats
                )
                rows.append(row(args, G, case, "torch-fused", runs, None))
    if args.baseline:  # the other checkout's Adam, in a child process that imports that checkout
        command = [sys.executable, os.path.abspath(__file__), "--only-ours", "--label", "baseline", "--json"]
        command += [f"--agents={','.join(map(str, args.agents))}", f"--obs={args.obs}", f"--state={args.state}"]
        command += [f"--hidden={','.join(map(str, args.hidden))}", f"--steps={args.steps}", f"--repeats={args.repeats}"]
        command += [f"--threads={args.threads}", f"--lr={args.lr}"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([args.baseline, os.environ.get("PYTHONPATH", "")]))
        output = subprocess.run(command, env=env, cwd=args.baseline, check=True, capture_output=True, text=True).stdout
        for line in output.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(
                    f"G={rows[-1]['agents']:3d} {rows[-1]['case']:13s} baseline     best {rows[-1]['best_us']:9.1f} us"
                )
    return rows


def row(args, G, case, variant, runs, difference) -> dict:
    result = {
        "agents": G,
        "case": case,
        "variant": variant,
        "best_us": round(min(runs), 1),
        "median_us": round(statistics.median(runs), 1),
        "max_abs_difference_to_torch_loop": "" if difference is None else f"{difference:.2e}",
        "threads": torch.get_num_threads(),
        "load_average": round(os.getloadavg()[0], 1),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "date": datetime.date.today().isoformat(),
    }
    if args.json:
        print(json.dumps(result))
        return result
    print(
        f"G={G:3d} {case:13s} {variant:12s} best {result['best_us']:9.1f} us  median {result['median_us']:9.1f} us"
        + (f"  (max difference to torch-loop {difference:.2e})" if difference is not None else "")
    )
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="8,32", help="comma-separated numbers of agents")
    parser.add_argument("--obs", type=int, default=16, help="observation size (the policy's input)")
    parser.add_argument("--state", type=int, default=16, help="state size (the value model's input)")
    parser.add_argument("--hidden", default="64,64", help="hidden layer widths")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed run (and of the check)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; best and median are reported")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", default=None, metavar="PATH", help="a checkout whose Adam to time as well")
    parser.add_argument("--csv", default=None, metavar="PATH", help="also write the rows to PATH")
    parser.add_argument("--label", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--only-ours", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.agents = [int(a) for a in args.agents.split(",")]
    args.hidden = [int(h) for h in args.hidden.split(",")]
    torch.set_num_threads(args.threads)
    rows = run(args)
    if args.csv:
        with open(args.csv, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
