"""A command whose optional extra is not installed says which extra and how to install
it from a checkout, in one line (no "unexpected error")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def without(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment in which ``module`` cannot be imported (as if not installed)."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / f"{module}.py").write_text(f'raise ImportError("No module named {module!r}")\n')
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
            "PYTHONPATH": f"{hidden}:{ROOT}", "FUSIONWORKER_WEB_TOKEN": "t"}


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
@pytest.mark.parametrize("args", [["web"], ["web", "--hash-password"]])
def test_web_without_the_web_extra_names_it(tmp_path, args):
    proc = subprocess.run([sys.executable, "-m", "fusionworker", *args], input="pw\npw\n",
                          env=without(tmp_path, "starlette"), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "Error: the dashboard needs the web extra (pip install 'fusionworker[web]'; from a "
        "checkout: pip install -e '.[web]'): No module named 'starlette'"]
