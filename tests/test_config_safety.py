"""A config never runs code, and every config value is checked by name before skrl sees it.

Through the public ways a config arrives: the Python ``Runner`` (a dict, or a YAML file read with
``Runner.load_cfg_from_yaml``) and ``skrl-marl train --config FILE`` / ``SECTION.KEY=VALUE`` overrides.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
import yaml
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)

from skrl_marl_ext import cli
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.runner import Runner

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
DEFAULTS = os.path.join(ROOT, "skrl_marl_ext", "configs", "mappo.yaml")  # the package's model classes
INSTANTIATORS = os.path.join(ROOT, "examples", "mappo.yaml")  # skrl's model instantiators (GaussianMixin, ...)
QUIET = {"write_interval": 0, "checkpoint_interval": 0}


def _env():
    return make_spread_env(num_envs=2, num_agents=2, continuous=True, seed=0)


def _cfg(path=DEFAULTS):
    with open(path) as file:
        cfg = yaml.safe_load(file)
    cfg["agent"]["experiment"] = dict(QUIET)
    cfg["trainer"].update(timesteps=4, disable_progressbar=True)
    return cfg


def _set(cfg, dotted, value):
    """``cfg`` (a copy) with ``value`` at ``dotted`` (``models.policy.network.0.input``)."""
    cfg = copy.deepcopy(cfg)
    *parents, last = dotted.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return cfg


def _train(tmp_path, *argv):
    """``skrl-marl train`` on the fast built-in env; returns the exit status."""
    out = str(tmp_path / "runs")
    base = ["train", "--env", "builtin:spread", "--num-envs", "2", "--timesteps", "4", "--out", out, "--no-progress"]
    return cli.main([*base, *argv])


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------------------------------- no code runs


CODE = "__import__('os').system('touch MARKER')"
"""Python that creates the file MARKER (replaced by a path under ``tmp_path``) if anything runs it."""

INJECTIONS = [
    (DEFAULTS, "agent.state_preprocessor", CODE),
    (DEFAULTS, "agent.learning_rate_scheduler", CODE),
    (DEFAULTS, "agent.value_preprocessor", f"RunningStandardScaler if {CODE} else None"),
    (INSTANTIATORS, "models.policy.network.0.input", CODE),
    (INSTANTIATORS, "models.policy.network.0.input", f"concatenate([OBSERVATIONS, {CODE}])"),
    (INSTANTIATORS, "models.policy.network.0.name", f"net = {CODE}; x"),
    (INSTANTIATORS, "models.policy.output", f"ACTIONS if {CODE} else ACTIONS"),
    (INSTANTIATORS, "models.policy.output", "ACTIONS.__class__"),
    (INSTANTIATORS, "models.policy.network.0.layers.0", {"linear": {"out_features": CODE}}),
    (INSTANTIATORS, "models.policy.network.0.layers.0", {"linear": {f"bias={CODE}, out_features": 8}}),
    (INSTANTIATORS, "models.policy.network.0.layers.0", {"conv2d": {"padding": f'same"); {CODE}; ("'}}),
    # skrl's shared model (models.separate false) writes these arguments into its source
    (INSTANTIATORS, "models.policy.reduction", f'sum"); {CODE}; ("'),
    (INSTANTIATORS, "models.policy.clip_actions", CODE),
]
"""Where skrl's Runner or its model instantiators would run a config string as Python: (config, field, value)."""


def _with_code(tmp_path, source, dotted, value):
    """A YAML file: the config ``source`` with ``value`` at ``dotted``; returns its path and the marker's."""
    marker = tmp_path / "ran"
    cfg = _set(_cfg(source), dotted, value)
    if dotted in ("models.policy.reduction", "models.policy.clip_actions"):
        cfg["models"]["separate"] = False
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg).replace("MARKER", str(marker)))
    return str(path), marker


@pytest.mark.parametrize("source, dotted, value", INJECTIONS)
def test_a_yaml_with_code_is_refused_and_runs_none(source, dotted, value, tmp_path):
    path, marker = _with_code(tmp_path, source, dotted, value)
    with pytest.raises(ValueError) as error:
        Runner(_env(), Runner.load_cfg_from_yaml(path))
    message = str(error.value)
    assert "\n" not in message and message.startswith(".".join(dotted.split(".")[:2])), message
    assert not marker.exists()


@pytest.mark.parametrize("source, dotted, value", [INJECTIONS[0], INJECTIONS[3]])
def test_the_command_refuses_code_in_a_config_file(source, dotted, value, tmp_path, capsys):
    path, marker = _with_code(tmp_path, source, dotted, value)
    assert _train(tmp_path, "--config", path) == 2
    assert _one_line_error(capsys).startswith(f"skrl-marl train: error: config: {'.'.join(dotted.split('.')[:2])}")
    assert not marker.exists()


def test_exploration_scheduler_expressions_are_refused_with_the_fields_to_use():
    cfg = _cfg(os.path.join(ROOT, "skrl_marl_ext", "configs", "maddpg.yaml"))
    cfg["agent"]["exploration_scheduler"] = "max(0.1, 1 - timestep / timesteps)"
    with pytest.raises(
        ValueError, match="agent.exploration_scheduler: a config never runs code.*exploration_final_scale"
    ):
        Runner(_env(), cfg)


def test_documented_network_expressions_still_build():
    """skrl's own forms: tokens, earlier containers, concatenate, activations and arithmetic in the output."""
    cfg = _cfg(INSTANTIATORS)
    cfg["models"]["policy"]["network"] = [
        {"name": "features", "input": "OBSERVATIONS", "layers": [16], "activations": "elu"},
        {"name": "head", "input": "concatenate([features, OBSERVATIONS[:, :2]])", "layers": [{"linear": 8}]},
    ]
    cfg["models"]["policy"]["output"] = "2 * tanh(ACTIONS)"
    policy = Runner(_env(), cfg).agent.models["agent_0"]["policy"]
    actions, _ = policy.act({"observations": torch.zeros(3, policy.num_observations)}, role="policy")
    assert actions.shape == (3, policy.num_actions)


# ---------------------------------------------------------------------------------------------------- class names


@pytest.mark.parametrize(
    "dotted, value, expected",
    [
        (
            "agent.state_preprocessor",
            "RunningStandardScalar",
            "agent.state_preprocessor: unknown class 'RunningStandardScalar'. Did you mean 'RunningStandardScaler'? "
            "Known: RunningStandardScaler, ValueNorm",
        ),
        ("agent.learning_rate_scheduler", "KLAdaptiveRL", "Did you mean 'KLAdaptiveLR'?"),
        (
            "models.policy.class",
            "PolicyMPL",
            "models.policy.class: unknown class 'PolicyMPL'. Did you mean 'PolicyMLP'?",
        ),
        ("memory.class", "RandomMemroy", "memory.class: unknown class 'RandomMemroy'. Did you mean 'RandomMemory'?"),
        ("trainer.class", "SequentalTrainer", "Did you mean 'SequentialTrainer'?"),
        ("models.policy.activation", "tahn", "models.policy.activation: expected one of 'elu', 'relu', 'tanh'"),
    ],
)
def test_an_unknown_name_gets_the_closest(dotted, value, expected):
    with pytest.raises(ValueError) as error:
        Runner(_env(), _set(_cfg(), dotted, value))
    assert expected in str(error.value), error.value


@pytest.mark.parametrize(
    "dotted, value, expected",
    [
        ("models.policy.network.0.input", "OBSERVATION", "unknown name 'OBSERVATION'. Did you mean 'OBSERVATIONS'?"),
        ("models.policy.network.0.activations", "rleu", "unknown activation 'rleu' (str). Did you mean 'relu'?"),
        ("models.policy.output", "tanhh(ACTIONS)", "unknown function 'tanhh'. Did you mean 'tanh'?"),
    ],
)
def test_an_unknown_network_token_gets_the_closest(dotted, value, expected):
    with pytest.raises(ValueError) as error:
        Runner(_env(), _set(_cfg(INSTANTIATORS), dotted, value))
    assert str(error.value).startswith(dotted.replace(".0.", "[0].")) and expected in str(error.value), error.value


@pytest.mark.parametrize("name", ["LinearLR", "torch.optim.lr_scheduler.LinearLR"])
def test_torch_schedulers_resolve_by_name(name):
    cfg = _cfg()
    cfg["agent"].update(learning_rate_scheduler=name, learning_rate_scheduler_kwargs={"total_iters": 3})
    agent = Runner(_env(), cfg).agent
    assert agent.cfg.learning_rate_scheduler["agent_0"] is torch.optim.lr_scheduler.LinearLR


# ---------------------------------------------------------------------------------------------------- value types


@pytest.mark.parametrize(
    "dotted, value, expected",
    [
        ("agent.rollouts", "10", "agent.rollouts: expected an integer, got '10' (str)"),
        ("agent.rollouts", True, "agent.rollouts: expected an integer, got True"),
        ("agent.learning_epochs", 2.5, "agent.learning_epochs: expected an integer"),
        ("agent.time_limit_bootstrap", "yes", "agent.time_limit_bootstrap: expected true or false"),
        ("agent.learning_rate", "fast", "agent.learning_rate: expected a number"),
        ("agent.experiment.write_interval", "often", "agent.experiment.write_interval: expected an integer or 'auto'"),
        ("agent.learning_rate_scheduler_kwargs", {"kl_treshold": 0.01}, "Did you mean 'kl_threshold'?"),
        ("models.policy.hidden_sizes", 32, "models.policy.hidden_sizes: expected a list of integers, got 32"),
        ("models.value.input", "state", "models.value.input: expected one of 'observations', 'states'"),
        ("memory.memory_size", "100", "memory.memory_size: expected an integer, got '100' (str)"),
        ("trainer.headless", "no", "trainer.headless: expected true or false, got 'no' (str)"),
        ("seed", 1.5, "seed: expected an integer or null, got 1.5"),
    ],
)
def test_each_value_is_checked_by_name(dotted, value, expected):
    cfg = _cfg()
    if dotted.startswith("agent.learning_rate_scheduler"):
        cfg["agent"]["learning_rate_scheduler"] = "KLAdaptiveLR"
    with pytest.raises(ValueError) as error:
        Runner(_env(), _set(cfg, dotted, value))
    assert expected in str(error.value) and "\n" not in str(error.value), error.value


def test_a_class_argument_is_checked_against_the_class():
    cfg = _cfg(os.path.join(ROOT, "skrl_marl_ext", "configs", "maddpg.yaml"))
    cfg["agent"]["exploration_noise_kwargs"] = {"mean": 0.0}
    with pytest.raises(ValueError, match=r"^agent.exploration_noise_kwargs: GaussianNoise needs 'std'$"):
        Runner(_env(), cfg)
    cfg["agent"]["exploration_noise_kwargs"] = {"mean": 0.0, "std": "0.1"}
    with pytest.raises(ValueError, match=r"^agent.exploration_noise_kwargs.std: expected a number, got '0.1' \(str\)"):
        Runner(_env(), cfg)


def test_a_shared_model_must_be_made_of_skrl_instantiators():
    cfg = _set(_cfg(), "models.separate", False)
    with pytest.raises(ValueError, match=r"^models.policy.class: with models.separate false .* got 'PolicyMLP'"):
        Runner(_env(), cfg)


def test_a_non_numeric_string_says_why():
    with pytest.raises(ValueError, match=r"agent.learning_rate: .* got 'fast' \(str\), which is not a number"):
        Runner(_env(), _set(_cfg(), "agent.learning_rate", "fast"))


def test_a_misspelt_agent_key_gets_our_did_you_mean():
    with pytest.raises(ValueError, match=r"^MAPPO: unknown config key 'learning_rat'\. Did you mean 'learning_rate'\?"):
        Runner(_env(), _set(_cfg(), "agent.learning_rat", 1e-3))
    with pytest.raises(ValueError, match=r"memory.memory_sise: RandomMemory takes no argument 'memory_sise'\."):
        Runner(_env(), _set(_cfg(), "memory.memory_sise", 4))
    with pytest.raises(ValueError, match=r"^agnet: unknown config section\. Did you mean 'agent'\?"):
        Runner(_env(), {**_cfg(), "agnet": {}})


def test_1e_3_in_a_yaml_file_is_the_number(tmp_path, capsys):
    # PyYAML (YAML 1.1) reads 1e-3 as the string '1e-3'
    text = open(DEFAULTS).read().replace("learning_rate: 5.0e-04", "learning_rate: 1e-3")
    assert "learning_rate: 1e-3" in text
    path = tmp_path / "config.yaml"
    path.write_text(text)
    cfg = Runner.load_cfg_from_yaml(str(path))
    assert cfg["agent"]["learning_rate"] == "1e-3"
    cfg["agent"]["experiment"] = dict(QUIET)
    agent = Runner(_env(), cfg).agent
    assert agent.cfg.learning_rate["agent_0"] == (0.001, 0.001)
    assert _train(tmp_path, "--config", str(path)) == 0


# ---------------------------------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    "override, expected",
    [
        ("learning_rate=1e-3", "Did you mean 'agent.learning_rate=1e-3'?"),
        ("timesteps=8", "Did you mean 'trainer.timesteps=8'?"),
        ("hidden_sizes=[8]", "Did you mean 'models.policy.hidden_sizes=[8]'?"),
        ("agent.rollouts='10'", "config: agent.rollouts: expected an integer, got '10' (str)"),
        ("agent.state_preprocessor=RunningStandardScalar", "Did you mean 'RunningStandardScaler'?"),
        ("models.policy.hidden_sizes=32", "config: models.policy.hidden_sizes: expected a list of integers, got 32"),
    ],
)
def test_overrides_are_checked_by_name(override, expected, tmp_path, capsys):
    assert _train(tmp_path, override) == 2
    assert expected in _one_line_error(capsys)
