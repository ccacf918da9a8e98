"""The docs' generated tables list what the code has: every config field, every CLI option, the README's defaults."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "docs" / "_ext"))

from helpers import one_thread  # noqa: E402, F401  (one_thread: autouse)
from marl_tables import config_rows, option_rows, subcommands  # noqa: E402

from skrl_marl_ext import HAPPO_CFG, HASAC_CFG, IPPO_CFG, MADDPG_CFG, MAPPO_CFG, MASAC_CFG  # noqa: E402
from skrl_marl_ext.cli import make_parser  # noqa: E402


@pytest.mark.parametrize("cfg_class", [MAPPO_CFG, IPPO_CFG, MADDPG_CFG, HAPPO_CFG, MASAC_CFG, HASAC_CFG])
def test_config_table_lists_every_field_with_its_default_and_doc(cfg_class):
    rows = config_rows(cfg_class)
    fields = dataclasses.fields(cfg_class)
    assert [row.name for row in rows] == [field.name for field in fields]
    undocumented = [row.name for row in rows if not row.doc.strip()]
    assert not undocumented, f"{cfg_class.__name__}: fields without a docstring: {undocumented}"
    defaults = {row.name: row.default for row in rows}
    for field in fields:
        if field.default is not dataclasses.MISSING:
            assert defaults[field.name] == repr(field.default)


@dataclasses.dataclass(kw_only=True)
class _ExtendedCfg(MAPPO_CFG):
    new_knob: int = 7
    """A field added to a config appears in its table."""


def test_a_field_added_to_a_config_appears_in_its_table():
    rows = {row.name: row for row in config_rows(_ExtendedCfg)}
    assert rows["new_knob"].default == "7"
    assert rows["new_knob"].doc == "A field added to a config appears in its table."
    assert rows["rollouts"].doc == next(row.doc for row in config_rows(MAPPO_CFG) if row.name == "rollouts")


def test_cli_table_lists_every_option_of_every_command():
    parsers = subcommands(make_parser())
    assert set(parsers) == {"train", "eval", "export"}
    for name, parser in parsers.items():
        written = " ".join(row.option for row in option_rows(parser))
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in written, f"{name}: {option}"
        assert all(row.help and "%(" not in row.help for row in option_rows(parser)), name


def _cell(text: str):
    text = text.strip().strip("`")
    if text == "None":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def test_readme_defaults_table_matches_the_library_and_the_cli():
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|$", readme, flags=re.MULTILINE)
    assert len(rows) >= 5, "README has no defaults table"
    library = {field.name: field.default for field in dataclasses.fields(MAPPO_CFG)}
    cli = yaml.safe_load((REPO / "skrl_marl_ext" / "configs" / "mappo.yaml").read_text())["agent"]
    for name, ours, theirs in rows:
        assert _cell(ours) == library[name], name
        assert _cell(theirs) == cli[name], name


def test_readme_quickstart_runs(tmp_path, monkeypatch, capsys):
    """The README's script, shortened to one rollout and its update."""
    readme = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, flags=re.DOTALL).group(1)
    assert '"timesteps": 3000' in code
    code = code.replace('"timesteps": 3000', '"timesteps": 32, "disable_progressbar": True')
    monkeypatch.chdir(tmp_path)  # skrl's default experiment directory is ./runs
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["agent"].experiment_dir.startswith(str(tmp_path))
    assert "mean return of agent_0 with deterministic actions:" in capsys.readouterr().out  # it prints a result
