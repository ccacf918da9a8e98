"""Regenerate the results pages' tables from the data files beside them.

A page under ``docs/results/`` holds each generated table between two markers::

    <!-- table: NAME -->
    ... (rewritten by this script)
    <!-- end table -->

``NAME`` is a data file ``data/NAME.csv``: ``# key: value`` lines first (``command`` may repeat; ``machine``, ``date``
and ``note`` once each), then a header row and one row per table row, cells written as they are shown. A marker may
keep only some rows, ``<!-- table: NAME algo=maddpg* -->`` (a column name, ``=``, a shell-style pattern).

Usage: ``python docs/results/make_tables.py`` rewrites every page in place; ``--check`` writes nothing and exits 1
when a page differs from what its data gives. ``--root DIR`` works on another copy of the folder.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK = re.compile(r"<!-- table: (?P<spec>[^>]*?) -->\n.*?<!-- end table -->", re.DOTALL)


def read_data(path: Path) -> tuple[dict[str, list[str]], list[list[str]]]:
    """Read a data file: its ``# key: value`` lines and its rows (the header first).

    :param path: the CSV file
    :return: the metadata (each key's values in order) and the rows
    """
    meta: dict[str, list[str]] = {}
    lines = path.read_text().splitlines()
    body = []
    for line in lines:
        if line.startswith("#") and not body:
            key, _, value = line[1:].partition(":")
            meta.setdefault(key.strip(), []).append(value.strip())
        elif line.strip():
            body.append(line)
    rows = list(csv.reader(body))
    if not rows:
        raise ValueError(f"{path}: no header row")
    if any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(f"{path}: every row needs {len(rows[0])} cells, as the header")
    return meta, rows


def render(spec: str, data_dir: Path) -> str:
    """The Markdown a marker's table stands for: the table, then its commands, machine and date.

    :param spec: the marker's text after ``table:`` (a data file name, then optional ``column=pattern`` filters)
    :param data_dir: the folder of the data files
    """
    name, *filters = spec.split()
    path = data_dir / f"{name}.csv"
    if not path.is_file():
        raise ValueError(f"table {name!r}: no data file {path}; add it or fix the marker")
    meta, (header, *rows) = read_data(path)
    for item in filters:
        column, _, pattern = item.partition("=")
        if column not in header:
            raise ValueError(f"table {name!r}: filter {item!r} names no column of {path.name}")
        rows = [row for row in rows if fnmatch.fnmatchcase(row[header.index(column)], pattern)]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    commands = meta.get("command", [])
    if commands:
        out += ["", "```", *commands, "```"]
    said = [f"{key.capitalize()}: {meta[key][0]}." for key in ("machine", "date", "note") if key in meta]
    said.append(f"Data: `data/{path.name}`.")
    out += ["", " ".join(said)]
    return "\n".join(out)


def regenerate(text: str, data_dir: Path) -> str:
    """A page's text with every marked table regenerated from its data file."""

    def block(match: re.Match) -> str:
        spec = match.group("spec")
        return f"<!-- table: {spec} -->\n\n{render(spec, data_dir)}\n\n<!-- end table -->"

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    parser.add_argument("--root", type=Path, default=HERE, help="the results folder (default: this script's)")
    args = parser.parse_args(argv)
    stale = []
    for page in sorted(args.root.glob("*.md")):
        text = page.read_text()
        try:
            new = regenerate(text, args.root / "data")
        except ValueError as error:
            parser.exit(2, f"{page}: {error}\n")
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    for page in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {page}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
