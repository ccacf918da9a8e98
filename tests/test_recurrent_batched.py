"""Recurrent models in a batched group (agents with models of their own run as one ``torch.vmap``): the GRU and LSTM
of :mod:`skrl_marl_ext.models.rnn` batch and train exactly as one by one; models that cannot run under vmap (skrl's
documented ``nn.GRU`` models) run one by one, with a warning where batching was asked for."""

from __future__ import annotations

import copy
import warnings

import helpers
import pytest
import torch
from helpers import QUIET, drive, lockstep, max_difference, one_thread, spread, state_of  # noqa: F401
from rnn_doc_models import DocGaussianRNN, DocValueRNN
from torch import nn

from skrl_marl_ext.features.recurrent import RESET_KEY
from skrl_marl_ext.models.rnn import CategoricalRNN, GaussianRNN, RecurrentCore, ValueRNN, recurrent_sequence

ROLLOUTS, LENGTH = 8, 4
CFG = {
    "rollouts": ROLLOUTS,
    "mini_batches": 2,
    "learning_epochs": 2,
    "grad_norm_clip": 0.05,
    "mini_batch_order": "sequential",  # the loop draws a permutation per agent, a batched group one for all
    "experiment": QUIET,
}


def make_agent(env, algo="mappo", cfg=None, models=None):
    return helpers.make_agent(env, algo, cfg={**CFG, "batch_agent_models": True, **(cfg or {})}, models=models)


def rnn_models(env, *, cell="gru", algo="mappo", layers=1, hidden=16, doc=False):
    """Per-agent recurrent policy and value models (ours, or skrl's documented ones with ``doc``)."""

    def build(uid):
        obs, act, state = env.observation_space(uid), env.action_space(uid), env.state_space(uid)
        if doc:
            kw = {"lstm": cell == "lstm", "sequence_length": LENGTH, "num_envs": env.num_envs, "num_layers": layers}
            value_space = state if algo == "mappo" else obs
            return {
                "policy": DocGaussianRNN(obs, None, act, env.device, **kw),
                "value": DocValueRNN(obs, value_space, act, env.device, **kw),
            }
        kw = {
            "cell": cell,
            "hidden_size": hidden,
            "num_layers": layers,
            "sequence_length": LENGTH,
            "hidden_sizes": (16,),
        }
        policy_cls = CategoricalRNN if hasattr(act, "n") else GaussianRNN
        source = "states" if algo == "mappo" else "observations"
        return {
            "policy": policy_cls(observation_space=obs, action_space=act, **kw),
            "value": ValueRNN(observation_space=obs, state_space=state, input=source, **kw),
        }

    return {uid: build(uid) for uid in env.possible_agents}


def same_acting(name, mine, own):
    """What acting stored must agree between the two forms: the critics' values and the hidden states a step started
    from."""
    if name in ("values", "final_values") or name.startswith("rnn_"):
        assert max_difference([mine.float()], [own.float()]) < 1e-6, name


# ---------------------------------------------------------------- the cell equations


def torch_module_in_pieces(rnn, x, hidden, ended):
    """The reference: torch's module run on the pieces between the steps where a sequence ended, the hidden states of
    the sequences that ended zeroed between pieces (skrl's documented models)."""
    lstm = isinstance(rnn, nn.LSTM)
    L = x.shape[1]
    cuts = [0, *[t + 1 for t in range(L - 1) if bool(ended[:, t].any())], L]
    outputs = []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=False):
        out, new = rnn(x[:, start:stop], tuple(hidden) if lstm else hidden[0])
        new = list(new) if lstm else [new]
        hidden = [h * (~ended[:, stop - 1]).float().view(1, -1, 1) for h in new]
        outputs.append(out)
    return torch.cat(outputs, dim=1), new


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("steps, resets", [(1, False), (6, False), (6, True)])
def test_cell_equations_equal_torch_modules(cell, layers, steps, resets):
    """``recurrent_sequence`` (plain tensor ops, resets as a mask) gives what ``nn.GRU``/``nn.LSTM`` give, run in pieces
    between episode ends; an acting step is a sequence of one."""
    torch.manual_seed(0)
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(5, 8, num_layers=layers, batch_first=True)
    x = torch.randn(7, steps, 5)
    hidden = [torch.randn(layers, 7, 8) for _ in range(2 if cell == "lstm" else 1)]
    ended = torch.rand(7, steps) < (0.3 if resets else 0.0)
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    weights = [tuple(getattr(rnn, f"{n}_l{k}") for n in names) for k in range(layers)]
    keep = (~ended).float() if resets else None
    out, new = recurrent_sequence(cell=cell, x=x, hidden=hidden, weights=weights, keep=keep)
    with torch.no_grad():
        expected_out, expected_new = torch_module_in_pieces(rnn, x, hidden, ended)
    assert not resets or bool(ended[:, :-1].any())
    torch.testing.assert_close(out, expected_out, atol=1e-6, rtol=0)
    for got, want in zip(new, expected_new, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_cell_equations_refuse_mismatched_shapes():
    rnn = nn.GRU(5, 8, batch_first=True)
    weights = [(rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)]
    with pytest.raises(ValueError, match=r"do not fit 1 layers of 3 rows"):
        recurrent_sequence(cell="gru", x=torch.randn(3, 2, 5), hidden=[torch.zeros(1, 4, 8)], weights=weights)
    with pytest.raises(ValueError, match=r"keep must be \(S, L\)"):
        recurrent_sequence(
            cell="gru", x=torch.randn(3, 2, 5), hidden=[torch.zeros(1, 3, 8)], weights=weights, keep=torch.ones(3, 3)
        )


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
def test_core_under_vmap_equals_each_core(cell, layers):
    """``RecurrentCore`` inside ``torch.vmap`` (over stacked copies of 3 cores' parameters, ``torch.func``) gives
    each core's own result, acting and training through episode ends: the path vmap batches equals torch's module."""
    torch.manual_seed(1)
    cores = [RecurrentCore(5, cell=cell, hidden_size=8, num_layers=layers, sequence_length=4) for _ in range(3)]
    params, buffers = torch.func.stack_module_state(cores)
    sizes = [(layers, 8)] * (2 if cell == "lstm" else 1)
    for sequences, rows in ((False, 6), (True, 12)):
        x = torch.randn(3, rows, 5)
        hidden = [torch.randn(3, layers, rows, h) for layers, h in sizes]
        terminated = torch.rand(3, rows, 1) < 0.3 if sequences else None

        def one(params, buffers, x, hidden, terminated, sequences=sequences):
            return torch.func.functional_call(
                cores[0], (params, buffers), (x, hidden, terminated), {"sequences": sequences}
            )

        got_out, got_new = torch.vmap(one, in_dims=(0, 0, 0, 0, 0 if sequences else None))(
            params, buffers, x, hidden, terminated
        )
        for i, core in enumerate(cores):
            with torch.no_grad():
                own = [h[i] for h in hidden]
                out, new = core(x[i], own, terminated[i] if sequences else None, sequences=sequences)
            torch.testing.assert_close(got_out[i], out, atol=1e-6, rtol=0)
            for got, want in zip(got_new, new, strict=True):
                torch.testing.assert_close(got[i], want, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- the agents


CASES = {
    "gru-mappo": dict(cell="gru", algo="mappo", layers=1, continuous=True),
    "lstm-ippo": dict(cell="lstm", algo="ippo", layers=1, continuous=True),
    "lstm-2-layers-mappo": dict(cell="lstm", algo="mappo", layers=2, continuous=True),
    "gru-2-layers-discrete-ippo": dict(cell="gru", algo="ippo", layers=2, continuous=False),
    # V(final observation) from the critic's hidden state of the episode; masked agents' hidden states reset
    "gru-time-limit-bootstrap-masks": dict(
        cell="gru", algo="mappo", layers=1, continuous=True, cfg={"time_limit_bootstrap": True}, masks=True
    ),
    # the batched update in passes of some agents (cfg.update_agents_at_once; no effect one by one)
    "gru-passes-of-2-mappo": dict(
        cell="gru", algo="mappo", layers=1, continuous=True, cfg={"update_agents_at_once": 2}
    ),
    "lstm-passes-of-1-masks": dict(
        cell="lstm",
        algo="mappo",
        layers=1,
        continuous=True,
        cfg={"update_agents_at_once": 1, "time_limit_bootstrap": True},
        masks=True,
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_batched_recurrent_update_equals_one_by_one(case):
    """Three updates on the same rollouts, episodes ending inside sequences: acting gives the same values and hidden
    states, and the parameters and optimiser moments after each update agree within 1e-6."""
    spec = CASES[case]
    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=3, continuous=spec["continuous"], episode_length=5)
    models = rnn_models(env, cell=spec["cell"], algo=spec["algo"], layers=spec["layers"])
    cfg = spec.get("cfg", {})
    batched = make_agent(env, spec["algo"], cfg=cfg, models=models)
    loop = make_agent(env, spec["algo"], cfg={**cfg, "batch_agent_models": False}, models=copy.deepcopy(models))
    assert [(g.size, g.batched) for g in batched.groups] == [(3, True)]
    assert [g.size for g in loop.groups] == [1, 1, 1]
    before = [p.detach().clone() for uid in env.possible_agents for m in models[uid].values() for p in m.parameters()]
    resets_inside, final_values, masked = 0, False, False

    def mask_agent_1(t, infos):  # agent_1 masked in a different env at each step
        infos["agent_mask"] = {"agent_1": torch.arange(env.num_envs).view(-1, 1) != t % env.num_envs}
        return infos

    for _ in lockstep(
        batched,
        loop,
        env,
        3 * ROLLOUTS,
        rollouts=ROLLOUTS,
        infos_fn=mask_agent_1 if spec.get("masks") else None,
        check=same_acting,
    ):
        b = batched.groups[0].rollout
        resets_inside += int(b[RESET_KEY].view(ROLLOUTS // LENGTH, LENGTH, -1)[:, :-1].sum())  # not after the last step
        final_values |= "final_values" in b.tensors and bool(
            ((b["final_values"] != b["values"]) & b["truncated"]).any()
        )
        masked |= not bool(b["agent_mask"].all())
        assert max_difference(state_of(batched, env), state_of(loop, env)) < 1e-6
    assert resets_inside > 0
    assert final_values == masked == spec.get("masks", False)  # the case's branches were taken
    after = [p.detach() for uid in env.possible_agents for m in models[uid].values() for p in m.parameters()]
    assert max_difference(after, before) > 1e-3  # it learned: the comparison compares something


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_batched_recurrent_acting_equals_one_by_one(cell):
    """Evaluation: the deterministic actions of a batched group equal the agents' own, step after step, the hidden
    states carried on and reset where episodes end."""
    torch.manual_seed(2)
    env = spread(num_envs=3, num_agents=4, episode_length=4)
    models = rnn_models(env, cell=cell)
    batched = make_agent(env, models=models)
    loop = make_agent(env, cfg={"batch_agent_models": False}, models=copy.deepcopy(models))
    assert batched.groups[0].batched and len(loop.groups) == 4
    for agent in (batched, loop):
        agent.init()
        agent.enable_training_mode(False)
    obs, _ = env.reset()
    states, ended = env.state(), 0
    for t in range(10):
        with torch.no_grad():
            actions, outputs = batched.act(obs, states, timestep=t, timesteps=10)
            _, loop_outputs = loop.act(obs, states, timestep=t, timesteps=10)
            for uid in env.possible_agents:
                assert max_difference([outputs["mean_actions"][uid]], [loop_outputs["mean_actions"][uid]]) < 1e-6
            next_obs, rewards, terminated, truncated, infos = env.step(outputs["mean_actions"])
        step = dict(observations=obs, states=states, actions=actions, rewards=rewards, next_observations=next_obs)
        step.update(next_states=env.state(), terminated=terminated, truncated=truncated, infos=infos)
        for agent in (batched, loop):
            agent.record_transition(**step, timestep=t, timesteps=10)
        ended += int(sum(terminated[u].sum() + truncated[u].sum() for u in env.possible_agents))
        obs, states = next_obs, step["next_states"]
    assert ended > 0


def test_checkpoints_load_between_batched_and_one_by_one(tmp_path):
    """A batched group's checkpoint loads into agents run one by one and back, optimiser moments included; both then
    act alike (the files are the per-agent layout skrl reads)."""
    torch.manual_seed(3)
    env = spread(num_envs=4, num_agents=3, episode_length=5)
    batched = make_agent(env, models=rnn_models(env, cell="lstm"))
    drive(batched, env, ROLLOUTS)  # one update: moments not at their initial values
    batched.save(str(tmp_path / "batched.pt"))
    loop = make_agent(env, cfg={"batch_agent_models": False}, models=rnn_models(env, cell="lstm"))
    loop.load(str(tmp_path / "batched.pt"))
    assert max_difference(state_of(loop, env), state_of(batched, env)) == 0.0
    drive(loop, env, ROLLOUTS)
    loop.save(str(tmp_path / "loop.pt"))
    again = make_agent(env, models=rnn_models(env, cell="lstm"))
    assert again.groups[0].batched
    again.load(str(tmp_path / "loop.pt"))
    assert max_difference(state_of(again, env), state_of(loop, env)) == 0.0
    loop.reset_recurrent_states()  # both from zero hidden states, as after a load
    for agent in (again, loop):
        agent.enable_training_mode(False)
    obs, _ = env.reset()
    with torch.no_grad():
        mine = again.act(obs, env.state(), timestep=0, timesteps=1)[1]["mean_actions"]
        theirs = loop.act(obs, env.state(), timestep=0, timesteps=1)[1]["mean_actions"]
    assert max_difference([mine[u] for u in env.possible_agents], [theirs[u] for u in env.possible_agents]) < 1e-6


@pytest.mark.parametrize("lstm", [False, True])
def test_skrl_style_models_run_one_by_one_with_a_warning(lstm):
    """skrl's documented GRU/LSTM models (``nn.GRU`` and ``if terminated.any()``) cannot run under vmap: asked to
    batch, the agents run one by one and a warning names the model and the reason; they train unchanged."""
    torch.manual_seed(4)
    env = spread(num_envs=4, num_agents=4)
    cell = "lstm" if lstm else "gru"
    with pytest.warns(UserWarning, match=rf"DocGaussianRNN\) cannot run under torch.vmap \(.*aten::{cell}") as caught:
        agent = make_agent(env, models=rnn_models(env, cell=cell, doc=True))
    assert len([w for w in caught if "torch.vmap" in str(w.message)]) == 1  # one per kind of model
    assert caught[0].filename == __file__ or "helpers.py" in caught[0].filename  # the caller's line
    assert [(g.size, g.batched) for g in agent.groups] == [(1, False)] * 4
    before = [p.detach().clone() for g in agent.groups for p in g.parameters()]
    drive(agent, env, 2 * ROLLOUTS)
    assert max_difference([p.detach() for g in agent.groups for p in g.parameters()], before) > 0
    with warnings.catch_warnings():  # "auto" decides without a word
        warnings.simplefilter("error")
        auto = make_agent(env, cfg={"batch_agent_models": "auto"}, models=rnn_models(env, cell=cell, doc=True))
    assert [g.size for g in auto.groups] == [1] * 4


def test_the_batching_dry_run_leaves_models_and_rng_as_they_were():
    """Deciding whether recurrent models batch (a vmapped dry run) changes no parameter, buffer, mode or RNG state."""
    torch.manual_seed(5)
    env = spread(num_envs=2, num_agents=4)
    for doc in (False, True):
        models = rnn_models(env, doc=doc)
        models["agent_1"]["policy"].eval()  # a mode the agent must not change while constructing
        own = {uid: {r: list(m.parameters()) for r, m in roles.items()} for uid, roles in models.items()}
        values = {uid: {r: copy.deepcopy(m.state_dict()) for r, m in roles.items()} for uid, roles in models.items()}
        modes = {uid: {r: m.training for r, m in roles.items()} for uid, roles in models.items()}
        rng = torch.get_rng_state()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = make_agent(env, models=models)
        assert torch.equal(torch.get_rng_state(), rng)
        assert agent.groups[0].batched != doc
        for uid, roles in models.items():
            for role, model in roles.items():
                assert model.training == modes[uid][role]
                assert all(p is q for p, q in zip(model.parameters(), own[uid][role], strict=True))
                for name, tensor in model.state_dict().items():
                    assert torch.equal(tensor, values[uid][role][name])


def test_auto_batches_recurrent_agents_on_a_cpu_as_it_does_mlps():
    """``batch_agent_models="auto"`` on a CPU: 4 agents with GRU/LSTM models of hidden size up to 128 batch (a GRU's
    weights stack 3 gates of it: the width is the hidden size); wider ones, or 3 agents, run one by one."""

    def layout(num_agents, hidden, cell="gru"):
        env = spread(num_envs=2, num_agents=num_agents)
        models = rnn_models(env, cell=cell, hidden=hidden)
        agent = make_agent(env, cfg={"batch_agent_models": "auto"}, models=models)
        return [(g.size, g.batched) for g in agent.groups]

    assert layout(4, 64) == [(4, True)]
    assert layout(4, 128, cell="lstm") == [(4, True)]
    assert layout(4, 129) == [(1, False)] * 4
    assert layout(3, 64) == [(1, False)] * 3


def test_mixed_precision_trains_a_batched_recurrent_group():
    """Autocast (bf16 on a CPU) and the grad scaler run through the vmapped cell equations; the parameters move and
    stay finite."""
    torch.manual_seed(6)
    env = spread(num_envs=4, num_agents=3, episode_length=5)
    agent = make_agent(env, cfg={"mixed_precision": True}, models=rnn_models(env, cell="lstm"))
    assert agent.groups[0].batched
    before = [p.detach().clone() for p in agent.groups[0].parameters()]
    drive(agent, env, 2 * ROLLOUTS)
    after = [p.detach() for p in agent.groups[0].parameters()]
    assert all(torch.isfinite(p).all() for p in after)
    assert max_difference(after, before) > 0
