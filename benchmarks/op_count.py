"""Aten ops per env step of multi-agent training: skrl 2.1.1's MAPPO/IPPO against this package's, and our MADDPG.

Every op that reaches the dispatcher's Python key while training runs is counted with a
``torch.utils._python_dispatch.TorchDispatchMode``: the ops of acting, of the env step, of ``record_transition`` and
of ``post_interaction`` (the updates, forward, backward and optimiser included), in the order that
:func:`skrl_marl_ext.trainers.interact` (the body of skrl's trainer loop for one multi-agent) runs them. What is
counted is what the dispatcher runs after autograd and after composite ops are decomposed: one counted op is about
one kernel launch on a GPU (each some 15 us of Python, dispatch and launch overhead for models this small on an
H100), so the count is a noise-free proxy for the per-step overhead that does not need a GPU to measure.

Counting rule: an op is counted unless it is a view. An op is a view when ``OpOverload.is_view`` says so (torch
>= 2.1; otherwise, when one of its schema's returns has alias info that is not a write, e.g. ``Tensor(a)``, as
opposed to the ``Tensor(a!)`` of in-place and ``out=`` ops), or when it is ``aten._unsafe_view`` (a view in all but
schema). Views left out are e.g. ``view``, ``expand``, ``slice``, ``select``, ``t``, ``transpose``, ``unsqueeze``,
``as_strided``, ``split``, ``unbind``, ``detach``, ``alias`` and ``reshape`` where it is a view (a reshape that copies
shows up as ``clone`` and is counted). Everything else counts once per call: in-place and ``out=`` ops, copies
(``copy_``, ``_to_copy``), factories (``empty``, ``zeros`` are ``empty`` + ``zero_``), host reads
(``_local_scalar_dense``, from ``.item()``), and a ``_foreach_*`` op over many tensors (one op, though a GPU may run
it as a few launches). Ops on CPU tensors count too although on a GPU run they launch nothing: mostly Adam's step
counters, CPU tensors on CUDA as well, whose ``.item()`` (two per parameter tensor per optimiser step, seen as
``_local_scalar_dense``) is about a tenth of skrl's count (``--by-op`` shows them).

The counts do not depend on ``--device``: the dispatch mode sees the same ops on CPU and CUDA, with one exception
handled here: ``torch.optim.Adam`` left at ``foreach=None`` (skrl's) loops over the parameters on CPU (some 8 ops per
parameter tensor) but runs about 10 ``_foreach_*`` ops for all of them on CUDA. By default (``--adam-foreach cuda``)
such optimisers are switched to ``foreach=True`` so that a CPU count is the count of a CUDA run; ``--adam-foreach
device`` keeps torch's choice for ``--device``. The same switch covers this package's per-agent gradient clip of a
batched group, which takes a norm per gradient tensor on CPU but one norm of their concatenation elsewhere
(:data:`skrl_marl_ext.groups.optim.NORMS_PER_TENSOR_ON`): ``cuda`` counts the latter. (This package's agents build
their Adams fused where torch has the kernel, CPU and CUDA alike: one ``_fused_adam_`` op per step, left as it is;
``clip_grad_norm_`` uses ``_foreach_norm`` on CPU and CUDA alike.)

Procedure, per agent count and variant: build env and agent with ``bench_common``'s builders (the null env
``skrl_marl_ext.envs.null``, MLPs of ``skrl_marl_ext.models``, one config for both libraries), run one rollout and its
update uncounted (lazy allocation), then count two rollouts and their updates, ``2 * rollouts`` env steps; the table
gives ops per env step, ``total / (2 * rollouts)``. Variants:

- ``skrl-per-agent``: skrl's ``skrl.multi_agents.torch.mappo.MAPPO`` (or ``ippo.IPPO``), a model pair per agent;
- ``ours-per-agent``: ``skrl_marl_ext.MAPPO``/``IPPO``, a model pair per agent, default config (per-agent models
  batched into one ``torch.func`` call (``batch_agent_models=True``, the GPU default), see ``batch_agent_models``);
- ``ours-per-agent-one-pass``: the same with ``update_agents_at_once`` above the agents (the update's forward and
  backward of all agents in one pass, where ``"auto"`` may split them to hold less memory);
- ``ours-per-agent-loop``: the same with ``cfg["batch_agent_models"] = False`` (per-agent models called one by one);
  skipped, with a note, where ``OnPolicyCfg`` has no ``batch_agent_models`` field;
- ``ours-shared``: ours, one model pair shared by all agents.

MADDPG (``--algo maddpg``): skrl has no MADDPG, so ``skrl-per-agent`` is skipped (with a note) and the ratio column
is ops relative to ``ours-per-agent-loop`` (the table's header says so; ``-`` where that variant was not run). Env,
models and agent are ``benchmarks/maddpg_scaling.py``'s (:func:`maddpg_scaling.make_maddpg`): its built-in *spread*
env (``skrl_marl_ext.envs.make_spread_env``; maddpg_scaling has no null env, so ``--obs-size`` does not apply: a
spread agent observes ``4 + 2 * (agents - 1)`` numbers, the state is ``4 * agents``), a deterministic policy,
target policy, Q critic and target critic per agent (``ours-per-agent``, batched; ``ours-per-agent-loop`` with
``batch_agent_models=False``) or one set for all (``ours-shared``), MLPs of ``--hidden`` (ReLU, the MADDPG models'
default), replay batches of ``--batch-size`` joint transitions, MADDPG's default ``gradient_steps`` (2) gradient
steps per env step from ``--learning-starts`` on. ``--warmup-steps`` env steps run uncounted (with the default 4 and
8, the last four of them already take gradient steps, so Adam's state and the replay are allocated), then ``--steps`` env steps are counted,
each with its gradient steps; the table gives ``total / steps``. ``--rollouts``, ``--epochs`` and ``--mini-batches``
do not apply.

Examples (a few minutes each on 2 cores, most of it skrl and the loop variant at 64 agents)::

    python benchmarks/op_count.py --agents 4,16,64 --algo mappo --by-op
    python benchmarks/op_count.py --agents 4,16,64 --algo maddpg --by-phase
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import sys
from collections import Counter

import torch
from bench_common import TrainCfg, make_agent, markdown_table
from maddpg_scaling import make_maddpg
from skrl.trainers.torch import SequentialTrainer
from torch.utils._python_dispatch import TorchDispatchMode

from skrl_marl_ext.trainers import PHASES, interact

try:  # where the per-agent clip's switch lives (earlier: groups/stacked.py, agents/batched.py; before groups: none)
    from skrl_marl_ext.groups import optim as batched
except ImportError:  # pragma: no cover
    try:
        from skrl_marl_ext.groups import stacked as batched
    except ImportError:
        batched = None

ALGOS = ("mappo", "ippo", "maddpg", "happo")
VARIANTS = ("skrl-per-agent", "ours-per-agent", "ours-per-agent-one-pass", "ours-per-agent-loop", "ours-shared")
NO_SKRL = frozenset({"maddpg", "happo"})
"""Algorithms skrl does not have: no ``skrl-per-agent``; the ratio column is relative to :data:`NO_SKRL_BASELINE`."""
NO_SKRL_BASELINE = "ours-per-agent-loop"
LOOP_CFG = {"batch_agent_models": False}
"""Config of ``ours-per-agent-loop`` on top of the default."""
BATCHED_CFG = {"batch_agent_models": True}
"""Config of ``ours-per-agent``: batched, as ``"auto"`` decides off the CPU (on a CPU it keeps wide models apart)."""
ONE_PASS_CFG = {**BATCHED_CFG, "update_agents_at_once": 1024}
"""Config of ``ours-per-agent-one-pass``: batched, every agent's forward and backward of a mini-batch in one pass."""
EXTRA_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})
"""Ops counted as views although their schema does not say so."""


def is_view(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` is left out of the count (see the module docstring for the rule)."""
    if func in EXTRA_VIEWS:
        return True
    flag = getattr(func, "is_view", None)
    if flag is not None:
        return bool(flag)
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class OpCounter(TorchDispatchMode):
    """Counts the ops (views left out) dispatched while active, by name (``aten.addmm``, overloads merged)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not is_view(func):
            self.ops[str(func.overloadpacket)] += 1
            self.total += 1
        return func(*args, **(kwargs or {}))


@dataclasses.dataclass
class Count:
    """The ops counted for one variant at one agent count."""

    agents: int
    variant: str
    steps: int
    total: int
    phases: dict[str, int]
    ops: Counter

    @property
    def per_step(self) -> float:
        return self.total / self.steps


def supports_loop_cfg(algo: str) -> bool:
    """Whether this package's config of ``algo`` (``OnPolicyCfg`` or ``MADDPG_CFG``) has every key of :data:`LOOP_CFG`."""
    if algo == "maddpg":
        from skrl_marl_ext import MADDPG_CFG as cfg_class
    else:
        from skrl_marl_ext.algorithms.mappo_cfg import OnPolicyCfg as cfg_class

    names = {field.name for field in dataclasses.fields(cfg_class)}
    return all(key in names for key in LOOP_CFG)


def build(variant: str, *, algo: str, num_agents: int, args, cfg: TrainCfg):
    """Env and agent of ``variant`` with ``bench_common``'s builders (``LOOP_CFG`` added for the loop variant);
    MADDPG's with ``maddpg_scaling``'s :func:`make_maddpg`."""
    from skrl_marl_ext.envs.null import make_null_env

    if algo == "maddpg":
        return make_maddpg(
            num_agents,
            num_envs=args.num_envs,
            hidden=args.hidden,
            batch_size=args.batch_size,
            shared=variant == "ours-shared",
            loop=variant == "ours-per-agent-loop",
            device=args.device,
            cfg={"learning_starts": args.learning_starts},
        )
    env = make_null_env(
        num_envs=args.num_envs,
        num_agents=num_agents,
        obs_size=args.obs_size,
        action_size=args.action_size,
        device=args.device,
    )
    owner = variant.split("-", 1)[0]
    kwargs = {"shared": variant == "ours-shared", "cfg": cfg, "device": args.device}
    if variant == "ours-per-agent-loop":
        kwargs["ours_cfg"] = LOOP_CFG
    elif variant == "ours-per-agent":
        kwargs["ours_cfg"] = BATCHED_CFG
    elif variant == "ours-per-agent-one-pass":
        kwargs["ours_cfg"] = ONE_PASS_CFG
    return make_agent(f"{owner}-{algo}", env, **kwargs), env


OPTIMIZER_FIELDS = ("optimizer", "policy_optimizer", "critic_optimizer")
"""Where our groups keep their optimisers (MAPPO/IPPO: one; MADDPG: one for the policies, one for the critics)."""


def optimizers_of(agent) -> list[torch.optim.Optimizer]:
    """skrl's optimisers (``agent.optimizers``, one per agent) and ours (per group, :data:`OPTIMIZER_FIELDS`)."""
    found = list(getattr(agent, "optimizers", {}).values())
    found += [getattr(g, name, None) for g in getattr(agent, "groups", ()) for name in OPTIMIZER_FIELDS]
    return [opt for opt in found if isinstance(opt, torch.optim.Optimizer)]


def use_cuda_foreach(agent) -> int:
    """Set ``foreach=True`` where an optimiser left it to torch (CUDA's choice; a fused one is left fused); return how
    many were changed."""
    changed = 0
    for opt in optimizers_of(agent):
        groups = [g for g in opt.param_groups if g.get("foreach", False) is None and not g.get("fused")]
        for group in groups:
            group["foreach"] = True
        if groups:
            opt.defaults["foreach"] = True
            changed += 1
    return changed


TRAINER_CFG = {"headless": True, "disable_progressbar": True, "close_environment_at_exit": False}
"""skrl trainer config: quiet, and no ``atexit`` hook (skrl's holds trainer, agent and env until exit, so every agent
built here would stay in memory: some 13 GB of replay for a 64-agent MADDPG)."""


def init_agent(agent, env, *, timesteps: int) -> None:
    """``agent.init()`` as skrl's trainers call it (bench_common does the same)."""
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, **TRAINER_CFG})


def count_training_ops(agent, env, *, warmup: int, counted: int) -> tuple[int, dict[str, int], Counter]:
    """Train ``warmup`` env steps uncounted, then count ``counted``: total ops, ops per phase (:data:`PHASES`) and
    ops by name.

    ``agent`` is initialised (:func:`init_agent` with ``warmup + counted`` timesteps).
    """
    total = warmup + counted
    agent.enable_training_mode(True)
    counter = OpCounter()
    phases = dict.fromkeys(PHASES, 0)
    seen = 0

    def on_phase(phase: str, _milliseconds: float) -> None:
        nonlocal seen
        phases[phase] += counter.total - seen
        seen = counter.total

    observations, _ = env.reset()
    states = env.state()
    for timestep in range(warmup):
        step = interact(agent, env, observations, states, timestep=timestep, timesteps=total)
        observations, states = step.next_observations, step.next_states
    with counter:
        for timestep in range(warmup, total):
            step = interact(agent, env, observations, states, timestep=timestep, timesteps=total, on_phase=on_phase)
            observations, states = step.next_observations, step.next_states
    return counter.total, phases, counter.ops


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Prints a markdown table: ops per env step (updates amortised) and the ratio to skrl's (maddpg: to "
        "ours-per-agent-loop's, skrl has no MADDPG).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--agents", default="4,16,64", help="comma-separated numbers of agents")
    parser.add_argument("--algo", default="mappo", choices=ALGOS)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    parser.add_argument("--num-envs", type=int, default=64, help="envs stepped as one batch")
    parser.add_argument("--obs-size", type=int, default=16, help="null env observation size per agent")
    parser.add_argument("--hidden", default="64,64", help="hidden layer widths of every MLP")
    parser.add_argument("--activation", default="tanh", help="the MLPs' activation (e.g. elu, Isaac Lab's)")
    parser.add_argument("--action-size", type=int, default=2, help="null env action size per agent")
    parser.add_argument(
        "--kl-threshold",
        type=float,
        default=0.0,
        help="above 0: KLAdaptiveLR with this kl_threshold (Isaac Lab: 0.008)",
    )
    parser.add_argument(
        "--distinct-lr",
        action="store_true",
        help="each agent its own learning rate from the start (mappo/ippo/happo), as KLAdaptiveLR leaves them",
    )
    parser.add_argument("--rollouts", type=int, default=16, help="env steps per update")
    parser.add_argument("--epochs", type=int, default=4, help="learning epochs per update")
    parser.add_argument("--mini-batches", type=int, default=4, help="mini-batches per epoch")
    parser.add_argument("--batch-size", type=int, default=256, help="maddpg: joint transitions per gradient step")
    parser.add_argument("--learning-starts", type=int, default=4, help="maddpg: env steps before the first update")
    parser.add_argument("--warmup-steps", type=int, default=8, help="maddpg: uncounted env steps first")
    parser.add_argument("--steps", type=int, default=32, help="maddpg: counted env steps")
    parser.add_argument("--device", default="cpu", help="torch device (the counts do not depend on it)")
    parser.add_argument(
        "--adam-foreach",
        default="cuda",
        choices=("cuda", "device"),
        help="Adams left at foreach=None, and the per-agent clip's norms: as on CUDA, or as on --device",
    )
    parser.add_argument("--csv", default=None, metavar="PATH", help="also write one row per count to PATH")
    parser.add_argument("--by-op", action="store_true", help="top 15 ops of each variant at the most agents")
    parser.add_argument("--by-phase", action="store_true", help="ops per env step of each phase of the step")
    args = parser.parse_args(argv)
    args.agents = [int(a) for a in args.agents.split(",")]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {unknown}; choose from {', '.join(VARIANTS)}")
    args.hidden = tuple(int(h) for h in args.hidden.split(","))
    if args.algo == "maddpg" and args.learning_starts >= args.warmup_steps:
        parser.error("--learning-starts must be below --warmup-steps: the warm-up must include gradient steps")
    return args


def step_counts(args) -> tuple[int, int]:
    """Uncounted and counted env steps: ``--warmup-steps`` and ``--steps`` for maddpg, else one rollout and two."""
    if args.algo == "maddpg":
        return args.warmup_steps, args.steps
    return args.rollouts, 2 * args.rollouts


def spread_learning_rates(agent) -> None:
    """Each agent its own learning rates (agent ``i``'s times ``1 + i / 100``), as ``KLAdaptiveLR`` leaves them once
    the agents' KLs differ: skrl's per-agent optimisers, ours through each agent's view of its group's Adam."""
    if hasattr(agent, "optimizers"):  # skrl's
        owners = [agent.optimizers[uid].param_groups for uid in agent.possible_agents]
    else:  # each agent's parameter groups of its group's optimiser (one for agents sharing a model)
        owners = []
        for group in agent.groups:
            owners += getattr(group.optimizer, "agent_param_groups", None) or [group.optimizer.param_groups]
    for i, param_groups in enumerate(owners):
        for param_group in param_groups:
            param_group["lr"] *= 1 + i / 100


def run_counts(args) -> list[Count]:
    """Count every variant of ``args.variants`` at every agent count."""
    cfg = TrainCfg(
        rollouts=args.rollouts,
        epochs=args.epochs,
        minibatches=args.mini_batches,
        hidden=args.hidden,
        activation=args.activation,
        kl_threshold=args.kl_threshold,
    )
    warmup, counted = step_counts(args)
    counts = []
    for num_agents in args.agents:
        for variant in args.variants:
            agent, env = build(variant, algo=args.algo, num_agents=num_agents, args=args, cfg=cfg)
            init_agent(agent, env, timesteps=warmup + counted)
            if args.distinct_lr:
                spread_learning_rates(agent)
            if args.adam_foreach == "cuda":
                use_cuda_foreach(agent)
                if batched is not None:
                    batched.NORMS_PER_TENSOR_ON = frozenset()
            total, phases, ops = count_training_ops(agent, env, warmup=warmup, counted=counted)
            counts.append(Count(num_agents, variant, counted, total, phases, ops))
            del agent, env
            gc.collect()  # free the agent (its replay: 13 GB for 64 MADDPG agents) before the next is built
            print(f"# {num_agents} agents, {variant}: {counts[-1].per_step:.0f} ops/step", file=sys.stderr)
    return counts


def print_tables(counts: list[Count], args) -> None:
    """Ops per env step against skrl's (MADDPG: against ``ours-per-agent-loop``'s); growth from the fewest to the most
    agents; per phase and op if asked."""
    baseline = NO_SKRL_BASELINE if args.algo in NO_SKRL else "skrl-per-agent"
    ratio_header = (
        "ops / skrl" if baseline == "skrl-per-agent" else f"ops / {baseline} (skrl has no {args.algo.upper()})"
    )
    base = {c.agents: c.per_step for c in counts if c.variant == baseline}
    rows = [
        [c.agents, c.variant, f"{c.per_step:.0f}", f"{c.per_step / base[c.agents]:.2f}" if c.agents in base else "-"]
        for c in counts
    ]
    print(markdown_table(["agents", "variant", "ops per env step", ratio_header], rows))
    lo, hi = min(args.agents), max(args.agents)
    by_key = {(c.agents, c.variant): c for c in counts}
    variants = list(dict.fromkeys(c.variant for c in counts))
    if lo != hi:
        growth = [[v, f"{by_key[hi, v].per_step / by_key[lo, v].per_step:.2f}"] for v in variants]
        print()
        print(markdown_table(["variant", f"ops at {hi} agents / ops at {lo}"], growth))
    if args.by_phase:
        rows = [[c.agents, c.variant] + [f"{c.phases[p] / c.steps:.0f}" for p in PHASES] for c in counts]
        print()
        print(markdown_table(["agents", "variant", *PHASES], rows))
    if args.by_op:
        for variant in variants:
            c = by_key[hi, variant]
            top = [[name, f"{n / c.steps:.1f}", f"{n / c.total:.1%}"] for name, n in c.ops.most_common(15)]
            print(f"\nTop ops of {variant} at {hi} agents (per env step):\n")
            print(markdown_table(["op", "ops per env step", "share"], top))


def write_csv(path: str, counts: list[Count], args) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["algo", "agents", "variant", "ops_per_env_step", "ops_total", "env_steps", *PHASES])
        for c in counts:
            phases = [f"{c.phases[p] / c.steps:.2f}" for p in PHASES]
            writer.writerow([args.algo, c.agents, c.variant, f"{c.per_step:.2f}", c.total, c.steps, *phases])


def drop_unavailable_variants(args) -> None:
    """Leave out (with a note) skrl's variant where skrl has no such algorithm, and the loop variant where the config
    has no ``batch_agent_models``."""
    if args.algo in NO_SKRL and "skrl-per-agent" in args.variants:
        print(
            f"note: skipping skrl-per-agent: skrl 2.1.1 has no {args.algo.upper()}; "
            f"ratios are to {NO_SKRL_BASELINE} instead",
            file=sys.stderr,
        )
        args.variants.remove("skrl-per-agent")
    if "ours-per-agent-loop" in args.variants and not supports_loop_cfg(args.algo):
        print(
            "note: skipping ours-per-agent-loop: the config has no 'batch_agent_models' field "
            "(ours-per-agent is then unbatched too)",
            file=sys.stderr,
        )
        args.variants.remove("ours-per-agent-loop")


def setting(args) -> str:
    """The counted setting in words (the line above the tables)."""
    warmup, counted = step_counts(args)
    foreach = args.adam_foreach if args.adam_foreach == "cuda" else args.device
    common = (
        f"{counted} counted env steps after {warmup} uncounted, device {args.device}, Adam foreach and clip norms as on "
        f"{foreach}, views not counted"
    )
    if args.algo == "maddpg":
        from skrl_marl_ext import MADDPG_CFG

        gradient_steps = getattr(MADDPG_CFG(), "gradient_steps", 1)
        return (
            f"spread env (maddpg_scaling.py's; obs 4 + 2 x (agents - 1), state 4 x agents), maddpg, {args.num_envs} "
            f"envs, MLP {args.hidden} relu, batch {args.batch_size}, {gradient_steps} gradient steps per env step from "
            f"step {args.learning_starts}, {common}; ratios to {NO_SKRL_BASELINE} (skrl has no MADDPG)"
        )
    return (
        f"null env (obs {args.obs_size}, state {args.obs_size} x agents, action {args.action_size}), {args.algo}, "
        f"{args.num_envs} envs, MLP {args.hidden} {args.activation}, rollouts {args.rollouts}, {args.epochs} epochs x "
        f"{args.mini_batches} mini-batches"
        + (f", KLAdaptiveLR (kl_threshold {args.kl_threshold})" if args.kl_threshold else "")
        + (", each agent its own learning rate" if args.distinct_lr else "")
        + f", {common}"
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    drop_unavailable_variants(args)
    counts = run_counts(args)
    print(setting(args) + "\n")
    print_tables(counts, args)
    if args.csv:
        write_csv(args.csv, counts, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
