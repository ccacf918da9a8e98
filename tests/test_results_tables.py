"""The results pages' tables are what their data files give: ``docs/results/make_tables.py --check`` passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
SCRIPT = RESULTS / "make_tables.py"


def make_tables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_committed_pages_match_their_data():
    done = make_tables("--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_data_file_has_a_table_and_its_command_machine_and_date():
    pages = "".join(page.read_text() for page in RESULTS.glob("*.md"))
    for data in sorted((RESULTS / "data").glob("*.csv")):
        assert f"<!-- table: {data.stem}" in pages, f"{data.name} is on no page"
        head = [line for line in data.read_text().splitlines() if line.startswith("# ")]
        keys = {line[2:].partition(":")[0] for line in head}
        assert {"machine", "date"} <= keys, f"{data.name}: {keys}"
        assert "command" in keys or data.stem == "gpu_targets", f"{data.name}: no command"


def test_an_edited_data_file_changes_its_table(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(RESULTS, root, ignore=shutil.ignore_patterns("__pycache__"))
    data = root / "data" / "soak.csv"
    data.write_text(data.read_text().replace("685 MiB (+16 MiB, 2%)", "999 MiB (+330 MiB, 49%)"))
    page = root / "soak.md"
    before = page.read_text()
    assert "999 MiB" not in before

    stale = make_tables("--check", "--root", str(root))
    assert stale.returncode == 1
    assert "soak.md" in stale.stdout
    assert page.read_text() == before  # --check writes nothing

    assert make_tables("--root", str(root)).returncode == 0
    after = page.read_text()
    assert "| 999 MiB (+330 MiB, 49%) |" in after and "685 MiB" not in after
    assert after.replace("999 MiB (+330 MiB, 49%)", "685 MiB (+16 MiB, 2%)") == before  # only the table changed
    assert make_tables("--check", "--root", str(root)).returncode == 0


def test_a_marker_without_its_data_file_is_a_clear_error(tmp_path):
    root = tmp_path / "results"
    (root / "data").mkdir(parents=True)
    (root / "page.md").write_text("# A page\n\n<!-- table: missing_results -->\n<!-- end table -->\n")
    done = make_tables("--check", "--root", str(root))
    assert done.returncode == 2
    assert "missing_results" in done.stderr and "no data file" in done.stderr
