"""Quickstart: MAPPO from this package trained by skrl's own SequentialTrainer on the built-in spread env.

Three agents learn to cover three landmarks (team return per agent: random -26.6, learned -11 to -19 depending on
the run). Takes about 5 minutes of CPU time (2-core machine) and writes TensorBoard logs and checkpoints under
runs/quickstart/. The last line printed compares the trained agent's deterministic episodes with random actions on the
same 64 new goals (one run on a 2-core machine shared with other jobs: trained -18.5 vs random actions -27.5 per
agent).

Run: ``python examples/quickstart.py [--timesteps N] [--num-envs N]``.
"""

import argparse

import torch
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import MAPPO
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import GaussianMLP, ValueMLP

parser = argparse.ArgumentParser()
parser.add_argument("--timesteps", type=int, default=3000, help="training steps of every env (default: %(default)s)")
parser.add_argument("--num-envs", type=int, default=64, help="envs stepped as one batch (default: %(default)s)")
args = parser.parse_args()

env = make_spread_env(num_envs=args.num_envs, num_agents=3, seed=0)  # any skrl multi-agent env wrapper works here
models = {
    uid: {
        "policy": GaussianMLP(
            observation_space=env.observation_space(uid), action_space=env.action_space(uid), initial_log_std=-0.5
        ),
        "value": ValueMLP(state_space=env.state_space(uid), input="states"),  # centralised critic
    }
    for uid in env.possible_agents
}
cfg = {
    "rollouts": 32,
    "learning_epochs": 4,
    "mini_batches": 4,
    "learning_rate": 3e-3,
    "experiment": {"directory": "runs", "experiment_name": "quickstart", "checkpoint_interval": 1000},
}
agent = MAPPO(
    possible_agents=env.possible_agents,
    models=models,
    observation_spaces=env.observation_spaces,
    state_spaces=env.state_spaces,
    action_spaces=env.action_spaces,
    device=env.device,
    cfg=cfg,
)
SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps}).train()
print("checkpoints and TensorBoard logs in", agent.experiment_dir)


def evaluate(act, num_envs: int, seed: int = 1) -> dict[str, float]:
    """Mean return per agent of one episode in each of ``num_envs`` fresh envs (the same goals for every ``act``).

    :param act: ``act(observations, states, step) -> {agent: actions}``.
    :param num_envs: Number of episodes, one per env.
    :param seed: Seed of the evaluation envs (not the training seed, so the goals are new to the agent).
    """
    eval_env = make_spread_env(num_envs=num_envs, num_agents=3, seed=seed)
    observations, _ = eval_env.reset()
    returns = {uid: torch.zeros(num_envs) for uid in eval_env.possible_agents}
    running = torch.ones(num_envs, dtype=torch.bool)  # count each env's first episode only
    with torch.no_grad():
        for step in range(eval_env.unwrapped.episode_length):
            actions = act(observations, eval_env.state(), step)
            observations, rewards, terminated, truncated, _ = eval_env.step(actions)
            for uid in eval_env.possible_agents:
                returns[uid] += rewards[uid].view(-1) * running
            done = terminated[eval_env.possible_agents[0]] | truncated[eval_env.possible_agents[0]]
            running &= ~done.view(-1)
    return {uid: float(value.mean()) for uid, value in returns.items()}


def trained(observations, states, step):
    _, outputs = agent.act(observations, states, timestep=step, timesteps=args.timesteps)
    return outputs["mean_actions"]  # in evaluation mode: the policies' deterministic (mean) actions


generator = torch.Generator().manual_seed(0)


def random_actions(observations, states, step):
    return {uid: torch.rand(obs.shape[0], 2, generator=generator) * 2 - 1 for uid, obs in observations.items()}


agent.enable_training_mode(False)
learned, baseline = evaluate(trained, args.num_envs), evaluate(random_actions, args.num_envs)
mean = sum(learned.values()) / len(learned)
per_agent = ", ".join(f"{uid} {value:.1f}" for uid, value in learned.items())
print(
    f"quickstart result: mean return per agent over {args.num_envs} deterministic episodes: trained {mean:.1f} "
    f"({per_agent}) vs random actions {sum(baseline.values()) / len(baseline):.1f} (closer to 0 is better)"
)
