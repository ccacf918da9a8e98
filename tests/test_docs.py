"""The docs' generated tables list what the code has: every config field, every CLI option, the README's defaults."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "docs"))

from helpers import one_thread  # noqa: E402, F401  (one_thread: autouse)
from make_docs_tables import config_rows, option_rows, subcommands  # noqa: E402

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


def test_every_test_the_reliability_page_names_exists():
    """docs/reliability.md names the test of each promise: each is a test function of the file it names (of
    tests/test_<section>.py where it names none, as the section's heading column says), so a renamed test shows here."""
    import ast

    text = (REPO / "docs" / "reliability.md").read_text()
    defined: dict[str, set[str]] = {}
    for path in (REPO / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        defined[path.name] = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    everywhere = set().union(*defined.values())
    missing = []
    for match in re.finditer(r"`(?:tests/(test_\w+\.py))?(?:::)?(test_\w+)`", text):
        file, name = match.groups()
        if file and not name:
            continue
        if name and name not in (defined.get(file, set()) if file else everywhere):
            missing.append(f"{file or ''}::{name}")
    files = set(re.findall(r"`tests/(test_\w+\.py)", text))
    missing += [f"tests/{f}" for f in files if f not in defined]
    assert not missing, f"docs/reliability.md names tests that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------------- Markdown pages

MAKE_DOCS_TABLES = REPO / "docs" / "make_docs_tables.py"
MYST_ROLE = re.compile(r"\{[a-z]+(?::[a-z]+)*\}`")
MYST_DIRECTIVE = re.compile(r"^(```+|:::+)\{(?P<name>[^}]+)\}(?P<body>.*?)^\1", re.DOTALL | re.MULTILINE)


def make_docs_tables(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(MAKE_DOCS_TABLES), *args], capture_output=True, text=True, check=False, env=env
    )


def test_committed_pages_hold_the_tables_the_code_gives():
    done = make_docs_tables("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {name: (REPO / "docs" / name).read_text() for name in ("mappo.md", "happo.md", "maddpg.md", "envs_cli.md")}
    for name, cfg_class in (("mappo.md", MAPPO_CFG), ("happo.md", HAPPO_CFG), ("maddpg.md", MADDPG_CFG)):
        assert f"<!-- generated: config-table skrl_marl_ext.{cfg_class.__name__} -->" in pages[name]
        for field in dataclasses.fields(cfg_class):
            assert f"| `{field.name}` |" in pages[name], (name, field.name)
    for command in ("train", "eval", "export"):
        assert f"<!-- generated: cli-options {command} -->" in pages["envs_cli.md"]
    assert "| `--env-arg KEY=VALUE` |" in pages["envs_cli.md"]
    generated = re.findall(r"<!-- generated: .*?<!-- end generated -->", "".join(pages.values()), flags=re.DOTALL)
    assert len(generated) == 6
    for block in generated:  # no reST left for a Markdown reader to see raw (the usage line is a fenced block)
        block = re.sub(r"```text\n.*?```", "", block, flags=re.DOTALL)
        assert not re.search(r":[a-z]+:`|``\w|\w``|`_", block), block[:200]


def test_a_field_added_to_a_config_appears_in_its_page_once_regenerated(tmp_path):
    (tmp_path / "extended_cfg.py").write_text(
        "import dataclasses\nfrom skrl_marl_ext import MAPPO_CFG\n\n\n@dataclasses.dataclass(kw_only=True)\n"
        'class ExtendedCfg(MAPPO_CFG):\n    new_knob: int = 7\n    """Turns ``x`` by :class:`~a.b.C` (a | b)."""\n'
    )
    root = tmp_path / "docs"
    root.mkdir()
    page = root / "page.md"
    text = "# A page\n\n<!-- generated: config-table extended_cfg.ExtendedCfg -->\n<!-- end generated -->\n\nAfter.\n"
    page.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))

    stale = make_docs_tables("--check", "--root", str(root), env=env)
    assert stale.returncode == 1 and "page.md" in stale.stdout
    assert page.read_text() == text  # --check writes nothing

    assert make_docs_tables("--root", str(root), env=env).returncode == 0
    after = page.read_text()
    assert "| `new_knob` | `7` | Turns `x` by `C` (a \\| b). |" in after
    assert "| `rollouts` | `16` |" in after and after.endswith("<!-- end generated -->\n\nAfter.\n")
    assert make_docs_tables("--check", "--root", str(root), env=env).returncode == 0


def test_a_marker_of_an_unknown_kind_or_class_is_a_one_line_error(tmp_path):
    for marker, said in (
        ("config-tabel skrl_marl_ext.MAPPO_CFG", "unknown kind"),
        ("config-table nope.Cfg", "nope.Cfg"),
    ):
        (tmp_path / "page.md").write_text(f"<!-- generated: {marker} -->\n<!-- end generated -->\n")
        done = make_docs_tables("--check", "--root", str(tmp_path))
        assert done.returncode == 2
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_pages_github_shows_hold_no_sphinx_syntax():
    """GitHub renders the Markdown as it is: no MyST roles, and no directives but the index's hidden toctrees (the
    Sphinx sidebar; the page lists the same links) and the API page, which is the Sphinx build's own."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        if "_build" in page.parts or page == REPO / "docs" / "api.md":
            continue
        text = page.read_text()
        assert not MYST_ROLE.search(text), f"{page.name}: {MYST_ROLE.search(text).group(0)}"
        for match in MYST_DIRECTIVE.finditer(text):
            assert match.group("name") == "toctree" and ":hidden:" in match.group("body"), (page.name, match.group(0))


def _first_paragraph(text: str) -> str:
    body = re.sub(r"^#.*\n+", "", text.lstrip())
    return body.split("\n\n")[0]


def test_every_algorithm_list_names_all_six(capsys):
    import tomllib

    from skrl_marl_ext.cli import main

    with pytest.raises(SystemExit):
        main(["export", "--help"])
    texts = {
        "pyproject.toml description": tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["description"],
        "skrl-marl export --help": capsys.readouterr().out,
    }
    for page in ("README.md", "docs/index.md", "docs/envs_cli.md", "docs/usage.md"):
        texts[f"{page} intro"] = _first_paragraph((REPO / page).read_text())
    for where, text in texts.items():
        missing = [
            name
            for name in ("MAPPO", "IPPO", "HAPPO", "MADDPG", "MASAC", "HASAC")
            if name not in " ".join(text.split())
        ]
        assert not missing, f"{where} does not name {missing}"


def test_every_readme_command_has_measured_times():
    """README's times come from runs of its own commands (benchmarks/readme_times.py): a command added to README, or
    changed, needs its rows in benchmarks/results/readme_times.csv before its time can be given."""
    import csv

    sys.path.insert(0, str(REPO / "benchmarks"))
    from readme_times import readme_commands

    with open(REPO / "benchmarks" / "results" / "readme_times.csv", newline="") as file:
        timed = {row["command"] for row in csv.DictReader(file) if row["exit"] in ("0", "")}
    commands = readme_commands((REPO / "README.md").read_text(), slow=True)
    assert len(commands) >= 6, commands
    missing = [command for command in commands if command not in timed]
    assert not missing, f"no time recorded for README's {missing}: run python benchmarks/readme_times.py"
