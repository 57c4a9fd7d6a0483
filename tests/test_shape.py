"""The package's shape: no function over 80 lines, none over complexity 20
(ruff's mccabe check, C901) and none over 15 as radon counts
(:func:`complexity`), no file over 600 lines. ``create_app`` counts like any other function: the dashboard's
endpoints are module-level functions that read ``request.app.state``."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fusionworker"
MAX_FUNCTION_LINES = 80
MAX_COMPLEXITY = 20
#: the bound as radon counts (stricter than mccabe's)
MAX_RADON_COMPLEXITY = 15
MAX_FILE_LINES = 600


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line name (N lines)`` for each function of ``path`` longer than ``limit``
    (from its ``def`` line to its last line: a command's decorators, its options'
    help texts, do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > limit:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                found.append(f"{where}:{node.lineno} {node.name} ({size} lines)")
    return found


def test_the_walk_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    probe = tmp_path / "probe.py"
    probe.write_text(f"def short():\n    return 1\n\n\n@decorated\nasync def long():\n{body}\n")
    assert long_functions(probe) == [f"probe.py:6 long ({MAX_FUNCTION_LINES + 1} lines)"]


def test_no_function_is_over_80_lines() -> None:
    found = [hit for path in _sources() for hit in long_functions(path)]
    assert found == [], "\n".join(found)


def test_no_file_is_over_600_lines() -> None:
    found = []
    for path in _sources():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES:
            found.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert found == [], "\n".join(found)


def _ruff_c901(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901",
         "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", str(target)],
        capture_output=True, text=True, cwd=ROOT, timeout=120)


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Cyclomatic complexity as radon counts it (stricter than mccabe): 1, plus 1 per
    ``if``, ``elif``, conditional expression, ``assert`` and loop (and its ``else``),
    per ``except`` and ``try``'s ``else``, per extra operand of ``and``/``or``, per
    comprehension ``for`` and ``if``, per ``case`` but a catch-all. The body of a
    nested function or class counts for that one, not for ``function``."""
    count = 1
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Assert):
            count += 1
            continue    # radon does not look inside an assert
        if isinstance(node, ast.If | ast.IfExp):
            count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif isinstance(node, ast.Try):
            count += len(node.handlers) + bool(node.orelse)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.While):
            count += 1 + bool(node.orelse)
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        elif isinstance(node, ast.Match):
            count += max(0, len(node.cases) - any(
                getattr(case.pattern, "pattern", False) is None for case in node.cases))
        todo.extend(ast.iter_child_nodes(node))
    return count


def complex_functions(path: Path, limit: int) -> list[str]:
    """``file:line name (N)`` for each function of ``path`` above complexity ``limit``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{where}:{node.lineno} {node.name} ({complexity(node)})"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and complexity(node) > limit]


needs_ruff = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff is not installed")


@needs_ruff
def test_no_function_is_over_complexity_20() -> None:
    done = _ruff_c901(PACKAGE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_function_is_over_complexity_15() -> None:
    paths = _sources()
    assert PACKAGE / "core" / "enqueue.py" in paths and PACKAGE / "runtime" / "loop.py" in paths
    found = [hit for path in paths for hit in complex_functions(path, MAX_RADON_COMPLEXITY)]
    assert found == [], "\n".join(found)


def test_the_count_is_radons(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def tangled(x, y):\n"                                 # 1
        "    assert x\n"                                       # 1
        "    if x and y or x:\n"                               # 1 + 2
        "        return [i for i in x if i]\n"                 # 2
        "    elif y:\n"                                        # 1
        "        return 1 if x else 2\n"                       # 1
        "    for i in x:\n"                                    # 1 + 1 (else)
        "        pass\n"
        "    else:\n"
        "        pass\n"
        "    try:\n"
        "        pass\n"
        "    except ValueError:\n"                             # 1
        "        pass\n"
        "    except KeyError:\n"                               # 1
        "        pass\n"
        "    match x:\n"
        "        case 1: pass\n"                               # 1
        "        case _: pass\n"
        "    def inner():\n"                                   # its own
        "        if x: pass\n"
        "    with open(x): pass\n"                             # 0
        "    return 0\n")
    assert complex_functions(probe, 1) == ["probe.py:1 tangled (14)", "probe.py:20 inner (2)"]
    assert complex_functions(probe, 14) == []


@needs_ruff
def test_the_complexity_check_finds_a_complex_function(tmp_path: Path) -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(MAX_COMPLEXITY))
    probe = tmp_path / "probe.py"
    probe.write_text(f"def tangled(x):\n{branches}\n    return -1\n")
    done = _ruff_c901(probe)
    assert done.returncode == 1 and "tangled" in done.stdout, done.stdout + done.stderr
