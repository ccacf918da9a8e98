"""A task that needs memory: MAPPO and IPPO with GRU models against the same budget with MLP models.

``builtin:memory`` (:mod:`skrl_marl_ext.envs.memory`) shows each agent a cue only at the first step of an episode and
rewards the action that names it ``delay`` steps later: success is the mean episode return, chance is
``1 / num_cues``. A recurrent policy can carry the cue; an MLP policy cannot, whatever its budget.

Every run trains one (algo, model, seed) with skrl's ``SequentialTrainer`` and then measures the success rate of the
deterministic (greedy) policy over fresh episodes (:func:`skrl_marl_ext.trainers.mean_episode_return`). The models:
``gru``, a :class:`~skrl_marl_ext.models.CategoricalRNN` policy and a :class:`~skrl_marl_ext.models.ValueRNN`
critic (GRU 64, head 64, sequences of ``--sequence-length`` steps); ``mlp``, ``CategoricalMLP`` and ``ValueMLP``
(2 x 64). Each agent has models of its own. Config: rollouts 32, 4 epochs x 4 mini-batches, lr 1e-3, entropy 0.01.

    python benchmarks/memory_task.py --algos mappo,ippo --models gru,mlp --seeds 0,1,2

``--speed`` times instead: ms per env step (acting, recording and updates over a whole run) of MAPPO with GRU
models at sequence lengths 1 and 16, interleaved, with the MLP models as the reference::

    python benchmarks/memory_task.py --speed --num-envs 256 --timesteps 320 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed

from skrl_marl_ext import IPPO, MAPPO
from skrl_marl_ext.envs import make_env
from skrl_marl_ext.models import CategoricalMLP, CategoricalRNN, ValueMLP, ValueRNN
from skrl_marl_ext.trainers import mean_episode_return

CFG = {
    "rollouts": 32,
    "learning_epochs": 4,
    "mini_batches": 4,
    "learning_rate": 1e-3,
    "entropy_loss_scale": 0.01,
    "experiment": {"write_interval": 0, "checkpoint_interval": 0},
}


def make_models(env, *, model: str, algo: str, sequence_length: int) -> dict:
    models = {}
    for uid in env.possible_agents:
        obs, act, state = env.observation_space(uid), env.action_space(uid), env.state_space(uid)
        source = "states" if algo == "mappo" else "observations"
        if model == "mlp":
            policy = CategoricalMLP(observation_space=obs, action_space=act, hidden_sizes=(64, 64))
            value = ValueMLP(observation_space=obs, state_space=state, input=source, hidden_sizes=(64, 64))
        else:
            kw = {"cell": model, "hidden_size": 64, "sequence_length": sequence_length, "hidden_sizes": (64,)}
            policy = CategoricalRNN(observation_space=obs, action_space=act, **kw)
            value = ValueRNN(observation_space=obs, state_space=state, input=source, **kw)
        models[uid] = {"policy": policy, "value": value}
    return models


def build(*, algo: str, model: str, seed: int, num_envs: int, sequence_length: int, delay: int):
    set_seed(seed)  # skrl's wrapper seeds the env from skrl's seed at its first reset
    env = make_env("builtin:memory", num_envs=num_envs, seed=seed, delay=delay)
    torch.manual_seed(seed)
    cls = MAPPO if algo == "mappo" else IPPO
    agent = cls(
        possible_agents=env.possible_agents,
        models=make_models(env, model=model, algo=algo, sequence_length=sequence_length),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=CFG,
    )
    return env, agent


def train(env, agent, timesteps: int, *, progress: bool = False) -> float:
    trainer = SequentialTrainer(
        env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True, "disable_progressbar": not progress}
    )
    start = time.perf_counter()
    trainer.train()
    return time.perf_counter() - start


def success(env, agent, delay: int) -> float:
    """Mean greedy success rate over every agent and the whole episodes of ``4 * (delay + 1)`` steps."""
    steps = 4 * (delay + 1)
    rates = (mean_episode_return(agent, env, steps=steps, uid=uid, whole_episodes=True) for uid in env.possible_agents)
    return statistics.mean(rates)


def learning(args) -> None:
    torch.set_num_threads(1)
    print(f"memory task: {args.num_envs} envs, delay {args.delay}, {args.timesteps} steps per run, chance 0.25")
    print("| algo | model | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean |")
    print("|---|---|" + "---|" * (len(args.seeds) + 1))
    for algo in args.algos:
        for model in args.models:
            rates = []
            for seed in args.seeds:
                env, agent = build(
                    algo=algo,
                    model=model,
                    seed=seed,
                    num_envs=args.num_envs,
                    sequence_length=args.sequence_length,
                    delay=args.delay,
                )
                train(env, agent, args.timesteps)
                rates.append(success(env, agent, args.delay))
            cells = " | ".join(f"{r:.3f}" for r in rates)
            print(f"| {algo} | {model} | {cells} | {statistics.mean(rates):.3f} |", flush=True)


def speed(args) -> None:
    """ms per env step, interleaved repeats, median; GRU at sequence lengths 1 and 16 and MLP."""
    torch.set_num_threads(1)
    variants = [("mlp", 16), ("gru", 1), ("gru", 16)]
    times = {v: [] for v in variants}
    for _ in range(args.repeats):
        for model, length in variants:
            env, agent = build(
                algo="mappo", model=model, seed=0, num_envs=args.num_envs, sequence_length=length, delay=args.delay
            )
            times[(model, length)].append(1000 * train(env, agent, args.timesteps) / args.timesteps)
    reference = statistics.median(times[("mlp", 16)])
    print(f"MAPPO, memory task, {args.num_envs} envs, {args.timesteps} steps, 1 thread, median of {args.repeats}")
    print("| models | sequence length | ms per env step | x MLP |")
    print("|---|---|---|---|")
    for (model, length), values in times.items():
        ms = statistics.median(values)
        shown = "-" if model == "mlp" else str(length)
        print(f"| {model} | {shown} | {ms:.2f} | {ms / reference:.2f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default="mappo,ippo")
    parser.add_argument("--models", default="gru,mlp", help="gru, lstm, mlp")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--timesteps", type=int, default=1600)
    parser.add_argument("--delay", type=int, default=6)
    parser.add_argument("--sequence-length", type=int, default=16)
    parser.add_argument("--speed", action="store_true", help="time sequence lengths 1 and 16 instead")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    args.algos = args.algos.split(",")
    args.models = args.models.split(",")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    speed(args) if args.speed else learning(args)


if __name__ == "__main__":
    main()
