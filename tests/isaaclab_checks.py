"""Checks shared by the tests of Isaac Lab's skrl configs (stand-in envs and Isaac Lab 3.0's): models sized as the
YAML says, and trained."""

from __future__ import annotations

import torch


def input_size(env, uid, token):
    if token == "OBSERVATIONS":
        return env.observation_spaces[uid].shape[0]
    assert token == "STATES", token
    return env.state_spaces[uid].shape[0]


def assert_sized_as_yaml(env, cfg, models):
    """Each role's first layer reads the YAML's ``input`` (observation or state size) and its layers are the YAML's."""
    separate = cfg["models"]["separate"]
    for uid in env.possible_agents:
        for role, out in (("policy", env.action_spaces[uid].shape[0]), ("value", 1)):
            (net,) = cfg["models"][role]["network"]
            linears = [m for m in models[uid][role].modules() if isinstance(m, torch.nn.Linear)]
            assert linears[0].in_features == input_size(env, uid, net["input"]), (uid, role, net["input"])
            assert [m.out_features for m in linears[: len(net["layers"])]] == net["layers"], (uid, role)
            head = linears[-1] if separate else getattr(models[uid][role], f"{role}_layer")
            assert head.out_features == out, (uid, role)


def snapshot_of(agent, uids):
    """Every distinct policy/value module of the agents, with a copy of its parameters."""
    modules = {id(m): m for uid in uids for m in (agent.models[uid]["policy"], agent.models[uid]["value"])}
    return [(m, [p.detach().clone() for p in m.parameters()]) for m in modules.values()]


def assert_trained(snapshot):
    for module, before in snapshot:
        after = list(module.parameters())
        assert all(torch.isfinite(p).all() for p in after), type(module).__name__
        assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after, strict=True)), type(module).__name__
