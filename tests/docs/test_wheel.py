"""A wheel a user can install: ``python -m build`` makes an sdist and a wheel that
carry the Lua scripts, the dashboard's templates and static files; the wheel
installs in a fresh virtualenv and runs the CLI, the dashboard and the demo.

``python -m build`` makes the wheel from the sdist, so a file missing from the
sdist is missing from the wheel too. Nothing is downloaded: the build uses the installed setuptools (``--no-isolation``)
and the virtualenv sees the installed dependencies (``--system-site-packages``);
only the wheel itself is installed into it (``--no-deps``). The checkout is copied
first, so no ``build/``, ``dist/`` or ``*.egg-info`` is left in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import uuid
import zipfile
from pathlib import Path

import pytest
import redis

pytest.importorskip("build")

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("FUSIONWORKER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PACKAGE_DATA = ("fusionworker/core/scripts/claim.lua", "fusionworker/core/scripts/_lib.lua",
                "fusionworker/web/templates/base.html", "fusionworker/web/static/app.css",
                "fusionworker/web/static/app.js", "fusionworker/py.typed")

CHECK_INSTALLED = """
import sys
from importlib import resources
from pathlib import Path

import fusionworker
from starlette.testclient import TestClient

from fusionworker.config import load_settings
from fusionworker.web.app import create_app

where = Path(fusionworker.__file__).resolve()
assert where.is_relative_to(Path(sys.prefix).resolve()), where   # the venv's copy
pkg = resources.files("fusionworker")
lua = sorted(p.name for p in pkg.joinpath("core/scripts").iterdir() if p.name.endswith(".lua"))
assert "claim.lua" in lua and "enqueue.lua" in lua, lua
app = create_app(load_settings(web_token="t0ken-for-the-test"))
with TestClient(app) as client:
    page = client.get("/login")
    assert page.status_code == 200 and "<form" in page.text, page.status_code
    assert client.get("/static/app.css").status_code == 200
print("installed at", where.parent, "with", len(lua), "scripts")
"""


def _copy_checkout(dest: Path) -> Path:
    src = dest / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "dist", "*.egg-info", ".venv", ".pytest_cache",
        ".ruff_cache", ".mypy_cache", "var"))
    return src


# a build, a virtualenv and a demo run: ~10 s on one core. Not serial: nothing in it has a
# deadline (its bounds are minutes), so it runs beside the others
@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    src = _copy_checkout(tmp_path)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                    str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = dist.glob("fusionworker-*-py3-none-any.whl")
    [sdist] = dist.glob("fusionworker-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(PACKAGE_DATA) <= names, set(PACKAGE_DATA) - names
    assert not any(n.startswith(("tests/", "examples/", "bench/")) for n in names)
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert set(PACKAGE_DATA) <= members, set(PACKAGE_DATA) - members

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, env=env, timeout=300, cwd=str(tmp_path))
    run = dict(env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)

    helped = subprocess.run([python, "-m", "fusionworker", "--help"], **run)  # type: ignore[call-overload]
    assert helped.returncode == 0 and "Usage: fusionworker" in helped.stdout, helped.stderr
    script = subprocess.run([str(venv / "bin" / "fusionworker"), "--version"], **run)  # type: ignore[call-overload]
    assert script.stdout.startswith("fusionworker, version"), script.stderr
    checked = subprocess.run([python, "-c", CHECK_INSTALLED], **run)  # type: ignore[call-overload]
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert str(venv) in checked.stdout

    prefix = f"wheel{uuid.uuid4().hex[:8]}"
    try:
        demo = subprocess.run(
            [python, "-m", "fusionworker", "demo", "--jobs", "3", "--workers", "1"],
            env={**env, "REDIS_URL": REDIS_URL, "FUSIONWORKER_PREFIX": prefix},
            cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert f"(prefix {prefix}:demo)" in demo.stdout
        assert "3 queue(s): 0 pending, 0 started" in demo.stdout
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
