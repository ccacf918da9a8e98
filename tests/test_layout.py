"""The package stays readable: no function over 60 lines, and tests reach the agents through their public behaviour."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 60


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_of_the_package_is_longer_than_a_screen():
    long = [
        f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted((REPO / "skrl_marl_ext").rglob("*.py"))
        for node in _functions(path)
        if node.end_lineno - node.lineno + 1 > MAX_LINES
    ]
    assert not long, f"functions over {MAX_LINES} lines (docstring included): split them by meaning: {long}"


def test_tests_call_no_private_method():
    """``x._method(...)`` in a test is a test of the implementation, not of behaviour (``self``/``cls`` of a test's own
    helper classes excepted)."""
    calls = [
        f"{path.name}:{node.lineno} {ast.unparse(node.func)}"
        for path in sorted((REPO / "tests").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("_")
        and not node.func.attr.startswith("__")
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls", "torch"))
    ]
    assert not calls, f"tests calling private methods: {calls}"


def test_call_count_profiles_the_agents_calls_only():
    """``benchmarks/call_count.py`` (the layout's measure) reaches both updates and counts nothing the env's step
    enters: skrl's space helpers, called by the env, are left out."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import call_count
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    skrl, ours = call_count.count("skrl"), call_count.count("ours")
    names = {
        which: {n.split(":")[0] for names in seen.values() for n in names}
        for which, seen in (("skrl", skrl), ("ours", ours))
    }
    assert {"update", "compute_gae"} <= names["skrl"]
    assert {"ppo_loss", "compute_gae", "_mini_batch_step"} <= names["ours"]
    for seen in (skrl, ours):
        assert not [path for path in seen if "spaces" in path or "/envs/" in path]
