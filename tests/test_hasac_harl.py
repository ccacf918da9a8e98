"""One HASAC gradient step equals HARL's (``harl/runners/off_policy_ha_runner.py``'s ``train`` with
``harl/algorithms/actors/hasac.py`` and ``harl/algorithms/critics/soft_twin_continuous_q_critic.py``) to float32
precision, on identical parameters, batch and random draws: the critic loss, each agent's policy loss and temperature
loss in the update order, the critics' temperature loss (every backward pass's loss, in order), and every parameter
after the step (policies, twin critics and their targets, temperatures).

HARL's code is read from ``.harl/`` at the repository root (git-ignored; fetched from github.com/PKU-MARL/HARL,
commit d539bad). Where it is missing, the numbers HARL gave are read from ``tests/data/hasac_harl_update.pt``, which
``python tests/test_hasac_harl.py`` writes from HARL's code (with the initial parameters and the batch it used).
"""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from helpers import QUIET
from skrl.memories.torch import RandomMemory

from skrl_marl_ext import HASAC, joint_action_space
from skrl_marl_ext.models import QMLP, SquashedGaussianMLP

HARL_DIR = Path(__file__).resolve().parents[1] / ".harl"
REFERENCE = Path(__file__).resolve().parent / "data" / "hasac_harl_update.pt"
B, S, A, HIDDEN = 32, 8, 3, (16, 16)
"""Batch (``B * A`` a multiple of 16: a stacked group's one draw of ``(2B, A)`` normals is HARL's two of ``(B, A)``),
state size, action size per agent, hidden sizes."""
UIDS = ["agent_0", "agent_1"]
CASES = {
    # agents alike, stacked into one batch, HARL's random order (ours given to HARL)
    "stacked-random": {"obs": (6, 6), "batch_agent_models": True, "update_order": "random"},
    # agents alike, one by one, fixed order
    "loop-fixed": {"obs": (6, 6), "batch_agent_models": False, "update_order": "fixed"},
    # different observation sizes (two groups)
    "heterogeneous-random": {"obs": (5, 7), "batch_agent_models": True, "update_order": "random"},
}
CRITICS = ("critic", "critic_2", "target_critic", "target_critic_2")
HARL_ARGS = {
    "hidden_sizes": list(HIDDEN),
    "activation_func": "relu",
    "final_activation_func": "tanh",
    "lr": 1e-3,
    "critic_lr": 1e-3,
    "polyak": 0.005,
    "gamma": 0.99,
    "use_proper_time_limits": True,
    "auto_alpha": True,
    "alpha_lr": 3e-4,
    "use_policy_active_masks": True,
    "use_huber_loss": False,
    "huber_delta": 10.0,
}
"""HARL's tuned HalfCheetah-2x3 HASAC values (lr, critic_lr, alpha_lr, polyak, gamma, auto_alpha, no Huber loss) on a
small network."""
SEED = 7
TEMPERATURE = 0.5
"""Every temperature at the start (HARL starts at 1, ``log_alpha = 0``, where the temperature losses are 0 whatever
their inputs; the same code at 0.5 shows them)."""


def spaces(case: str) -> tuple[dict, dict, dict]:
    obs = {u: gymnasium.spaces.Box(-np.inf, np.inf, (n,)) for u, n in zip(UIDS, CASES[case]["obs"], strict=True)}
    actions = {u: gymnasium.spaces.Box(-1.0, 1.0, (A,)) for u in UIDS}
    states = {u: gymnasium.spaces.Box(-np.inf, np.inf, (S,)) for u in UIDS}
    return obs, states, actions


def initial_and_batch(case: str) -> dict:
    """Initial parameters (ours, built seeded) and one batch of ``B`` joint transitions."""
    torch.manual_seed(SEED)
    agent = build(case)
    generator = torch.Generator().manual_seed(SEED)
    obs_sizes = CASES[case]["obs"]

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    data = {
        "states": rand(B, S),
        "next_states": rand(B, S),
        "observations": [rand(B, n) for n in obs_sizes],
        "next_observations": [rand(B, n) for n in obs_sizes],
        "actions": [torch.rand(B, A, generator=generator) * 2 - 1 for _ in UIDS],
        "rewards": rand(B, 1),
        "terminated": torch.rand(B, 1, generator=generator) < 0.2,
        "truncated": torch.rand(B, 1, generator=generator) < 0.2,
    }
    models = agent.models
    initial = {
        "policies": [copy.deepcopy(models[u]["policy"].state_dict()) for u in UIDS],
        "critics": {role: copy.deepcopy(models[UIDS[0]][role].state_dict()) for role in CRITICS},
    }
    return {"initial": initial, "data": data}


def build(case: str) -> HASAC:
    """Our HASAC: a team critic (HARL's one critic), HARL's policy (tanh after the last hidden layer)."""
    obs, states, actions = spaces(case)
    joint = joint_action_space(actions, UIDS)

    def critic():
        return QMLP(state_space=states[UIDS[0]], action_space=joint, hidden_sizes=HIDDEN, activation="relu")

    team = {role: critic() for role in CRITICS}
    models = {
        u: {
            "policy": SquashedGaussianMLP(
                observation_space=obs[u], action_space=actions[u], hidden_sizes=HIDDEN, final_activation="tanh"
            ),
            **team,
        }
        for u in UIDS
    }
    cfg = {
        "batch_size": B,
        "gradient_steps": 1,
        "discount_factor": HARL_ARGS["gamma"],
        "polyak": HARL_ARGS["polyak"],
        "actor_learning_rate": HARL_ARGS["lr"],
        "critic_learning_rate": HARL_ARGS["critic_lr"],
        "temperature_learning_rate": HARL_ARGS["alpha_lr"],
        "initial_temperature": TEMPERATURE,
        "grad_norm_clip": 0.0,
        "time_limit_bootstrap": True,
        "batch_agent_models": CASES[case]["batch_agent_models"],
        "update_order": CASES[case]["update_order"],
        "experiment": QUIET,
    }
    return HASAC(
        possible_agents=UIDS,
        models=models,
        memories={u: RandomMemory(memory_size=1, num_envs=B) for u in UIDS},
        observation_spaces=obs,
        state_spaces=states,
        action_spaces=actions,
        device="cpu",
        cfg=cfg,
    )


class LossRecorder:
    """Every backward pass's loss, in order (torch's ``Tensor.backward`` wrapped for the test)."""

    def __init__(self, monkeypatch) -> None:
        self.losses: list[float] = []
        backward = torch.Tensor.backward

        def recording(tensor, *args, **kwargs):
            self.losses.append(float(tensor.detach()))
            return backward(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "backward", recording)


def flat(module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def our_update(case: str, reference: dict, monkeypatch) -> dict:
    """One gradient step of our HASAC from the reference's parameters on its batch (stored through
    ``record_transition``, read whole through fixed indexes): the losses and the parameters after."""
    agent = build(case)
    initial, data = reference["initial"], reference["data"]
    for u, state in zip(UIDS, initial["policies"], strict=True):
        agent.models[u]["policy"].load_state_dict(state)
    for role, state in initial["critics"].items():
        agent.models[UIDS[0]][role].load_state_dict(state)
    agent.init()
    agent.enable_training_mode(True)
    per_agent = {
        key: dict(zip(UIDS, data[key], strict=True)) for key in ("observations", "next_observations", "actions")
    }
    agent.record_transition(
        observations=per_agent["observations"],
        states=dict.fromkeys(UIDS, data["states"]),
        actions=per_agent["actions"],
        rewards=dict.fromkeys(UIDS, data["rewards"]),
        next_observations=per_agent["next_observations"],
        next_states=dict.fromkeys(UIDS, data["next_states"]),
        terminated=dict.fromkeys(UIDS, data["terminated"]),
        truncated=dict.fromkeys(UIDS, data["truncated"]),
        infos={},
        timestep=0,
        timesteps=1,
    )
    indexes = torch.arange(B)
    agent.sample_indexes = lambda: indexes  # the whole batch, in order
    order = [UIDS.index(group.uids[agents][0]) for group, agents in agent.update_units()]
    recorder = LossRecorder(monkeypatch)
    torch.manual_seed(SEED + 1)
    agent.update(timestep=0, timesteps=1, uid=UIDS[0])
    monkeypatch.undo()
    team = agent.team_critic.models
    temperatures = [agent.checkpoint_modules[u]["temperature"].log_temperature.detach().clone() for u in UIDS]
    return {
        "order": order,
        "losses": recorder.losses,
        "policies": [flat(agent.models[u]["policy"]) for u in UIDS],
        "critics": {role: flat(team[role]) for role in CRITICS},
        "log_alphas": temperatures,
        "critic_log_alpha": agent.checkpoint_modules[UIDS[0]]["critic_temperature"].log_temperature.detach().clone(),
    }


def import_harl():
    """HARL's runner, actor and critic from ``.harl/`` (its unused ``setproctitle`` import stubbed)."""
    sys.modules.setdefault("setproctitle", types.ModuleType("setproctitle"))
    if str(HARL_DIR) not in sys.path:
        sys.path.insert(0, str(HARL_DIR))
    from harl.algorithms.actors.hasac import HASAC as HarlHASAC
    from harl.algorithms.critics.soft_twin_continuous_q_critic import SoftTwinContinuousQCritic
    from harl.runners.off_policy_ha_runner import OffPolicyHARunner

    return OffPolicyHARunner, HarlHASAC, SoftTwinContinuousQCritic


def harl_update(case: str, reference: dict, order: list[int], monkeypatch) -> dict:
    """HARL's ``train()`` (one gradient step) from the same parameters, batch and random draws, in ``order``."""
    runner_class, actor_class, critic_class = import_harl()
    obs, states, actions = spaces(case)
    initial, data = reference["initial"], reference["data"]
    actors = [actor_class(HARL_ARGS, obs[u], actions[u]) for u in UIDS]
    for actor, state in zip(actors, initial["policies"], strict=True):
        ours = list(state.values())
        with torch.no_grad():
            for p, value in zip(actor.actor.parameters(), ours, strict=True):
                p.copy_(value)
    critic = critic_class(HARL_ARGS, states[UIDS[0]], [actions[u] for u in UIDS], len(UIDS), "EP")
    with torch.no_grad():
        critic.log_alpha.fill_(np.log(TEMPERATURE))
    critic.alpha = torch.exp(critic.log_alpha.detach())
    modules = (critic.critic, critic.critic2, critic.target_critic, critic.target_critic2)
    with torch.no_grad():
        for role, module in zip(CRITICS, modules, strict=True):
            for p, value in zip(module.parameters(), initial["critics"][role].values(), strict=True):
                p.copy_(value)

    def numpy(x):
        return x.numpy().astype(np.float32)

    done = (data["terminated"] | data["truncated"]).float()
    batch = (
        numpy(data["states"]),
        [numpy(o) for o in data["observations"]],
        np.stack([numpy(a) for a in data["actions"]]),
        None,
        numpy(data["rewards"]),
        numpy(done),
        np.ones((len(UIDS), B, 1), dtype=np.float32),
        numpy(data["terminated"].float()),
        numpy(data["next_states"]),
        [numpy(o) for o in data["next_observations"]],
        None,
        np.full((B, 1), HARL_ARGS["gamma"], dtype=np.float32),
    )
    runner = runner_class.__new__(runner_class)
    log_alpha = [torch.full((1,), float(np.log(TEMPERATURE)), requires_grad=True) for _ in UIDS]
    runner.__dict__.update(
        total_it=0,
        buffer=types.SimpleNamespace(sample=lambda: batch),
        critic=critic,
        actor=actors,
        num_agents=len(UIDS),
        args={"algo": "hasac"},
        algo_args={"algo": {"use_policy_active_masks": True, "auto_alpha": True}},
        policy_freq=1,
        state_type="EP",
        fixed_order=False,
        device=torch.device("cpu"),
        value_normalizer=None,
        target_entropy=[-np.prod(actions[u].shape) for u in UIDS],
        log_alpha=log_alpha,
        alpha_optimizer=[torch.optim.Adam([a], lr=HARL_ARGS["alpha_lr"]) for a in log_alpha],
        alpha=[torch.exp(a.detach()) for a in log_alpha],
    )
    monkeypatch.setattr(np.random, "permutation", lambda n: np.array(order))  # our drawn order
    recorder = LossRecorder(monkeypatch)
    torch.manual_seed(SEED + 1)
    runner.train()
    monkeypatch.undo()
    return {
        "order": order,
        "losses": recorder.losses,
        "policies": [flat(actor.actor) for actor in actors],
        "critics": {role: flat(module) for role, module in zip(CRITICS, modules, strict=True)},
        "log_alphas": [a.detach().clone() for a in log_alpha],
        "critic_log_alpha": critic.log_alpha.detach().clone(),
    }


def harl_available() -> bool:
    return (HARL_DIR / "harl" / "runners" / "off_policy_ha_runner.py").is_file()


def stored() -> dict:
    return torch.load(REFERENCE, weights_only=True)


def assert_equal(ours: dict, harl: dict) -> None:
    tolerance = {"rtol": 1e-5, "atol": 1e-6}
    assert ours["order"] == harl["order"]
    assert len(ours["losses"]) == len(harl["losses"]) == 2 + 2 * len(UIDS)  # critic, (policy, temperature) x N, alpha_c
    torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(harl["losses"]), **tolerance)
    for mine, theirs in zip(ours["policies"], harl["policies"], strict=True):
        torch.testing.assert_close(mine, theirs, **tolerance)
    for role in CRITICS:
        torch.testing.assert_close(ours["critics"][role], harl["critics"][role], **tolerance)
    for mine, theirs in zip(ours["log_alphas"], harl["log_alphas"], strict=True):
        torch.testing.assert_close(mine, theirs, **tolerance)
    torch.testing.assert_close(ours["critic_log_alpha"], harl["critic_log_alpha"], **tolerance)


@pytest.mark.parametrize("case", list(CASES))
def test_one_hasac_gradient_step_equals_harls(case, monkeypatch):
    reference = stored()[case]
    ours = our_update(case, reference, monkeypatch)
    if harl_available():
        harl = harl_update(case, reference, ours["order"], monkeypatch)
    else:  # HARL's numbers, written from its code with these parameters, batch and draws
        harl = reference["harl"]
    assert_equal(ours, harl)
    # the step moved every parameter set (an update that did nothing would also be "equal")
    initial = reference["initial"]
    assert not torch.equal(ours["policies"][0], torch.cat([v.reshape(-1) for v in initial["policies"][0].values()]))
    assert not torch.equal(
        ours["critics"]["target_critic"],
        torch.cat([v.reshape(-1) for v in initial["critics"]["target_critic"].values()]),
    )


@pytest.mark.skipif(not harl_available(), reason="HARL's code is not in .harl/")
@pytest.mark.parametrize("case", list(CASES))
def test_the_committed_reference_is_harls(case, monkeypatch):
    reference = stored()[case]
    harl = harl_update(case, reference, reference["harl"]["order"], monkeypatch)
    assert_equal(harl, reference["harl"])


if __name__ == "__main__":  # write tests/data/hasac_harl_update.pt from HARL's code
    patch = pytest.MonkeyPatch()
    written = {}
    for name in CASES:
        reference = initial_and_batch(name)
        order = our_update(name, reference, patch)["order"]
        reference["harl"] = harl_update(name, reference, order, patch)
        written[name] = reference
    torch.save(written, REFERENCE)
    print(f"wrote {REFERENCE}")
