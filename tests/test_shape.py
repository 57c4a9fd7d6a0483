"""The package's shape: no function over 80 lines, none over complexity 20
(ruff's mccabe check, C901), no file over 600 lines. ``create_app`` counts like
any other function: the dashboard's endpoints are module-level functions that
read ``request.app.state``."""

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


needs_ruff = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff is not installed")


@needs_ruff
def test_no_function_is_over_complexity_20() -> None:
    done = _ruff_c901(PACKAGE)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_ruff
def test_the_complexity_check_finds_a_complex_function(tmp_path: Path) -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(MAX_COMPLEXITY))
    probe = tmp_path / "probe.py"
    probe.write_text(f"def tangled(x):\n{branches}\n    return -1\n")
    done = _ruff_c901(probe)
    assert done.returncode == 1 and "tangled" in done.stdout, done.stdout + done.stderr
