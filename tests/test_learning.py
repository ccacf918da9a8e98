"""MAPPO and IPPO must learn the built-in spread env within a small CPU budget.

Returns are per agent per 25-step episode, evaluated deterministically. On this env a random policy gets about
-26.6, a zero action -25.9, any constant action worse, and a policy that walks straight to its goal about -6.0.
"""

import pytest
import torch
from helpers import QUIET, make_agent, make_models, spread
from skrl.trainers.torch import SequentialTrainer

LEARNING_CFG = {
    "rollouts": 32,
    "learning_epochs": 4,
    "mini_batches": 4,
    "learning_rate": 3e-3,
    "experiment": QUIET,
}
THRESHOLD = -17.0  # documented in README.md ("Learning results")


def evaluate(agent, env, steps=100):
    agent.enable_training_mode(False)
    obs, _ = env.reset()
    states = env.state()
    running = torch.zeros(env.num_envs)
    finished = []
    with torch.no_grad():
        for t in range(steps):
            _, outputs = agent.act(obs, states, timestep=t, timesteps=steps)
            obs, rewards, term, trunc, _ = env.step(outputs["mean_actions"])
            states = env.state()
            running += rewards["agent_0"].view(-1)
            done = (term["agent_0"] | trunc["agent_0"]).view(-1)
            finished += running[done].tolist()
            running[done] = 0
    return sum(finished) / len(finished)


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_learns_spread(algo):
    torch.manual_seed(0)
    env = spread(num_envs=64, seed=0)
    models = make_models(env, algo, hidden=(64, 64), initial_log_std=-0.5)
    agent = make_agent(env, algo, models=models, cfg=LEARNING_CFG)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 2500, "disable_progressbar": True}).train()
    score = evaluate(agent, env)
    assert score > THRESHOLD, f"{algo} reached {score:.2f}, needs > {THRESHOLD}"
