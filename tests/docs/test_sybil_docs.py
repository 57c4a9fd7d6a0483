"""The rules by which the docs' blocks are checked (tests/docs/sybil_docs.py) can fail."""

from __future__ import annotations

import socket

from tests.docs.sybil_docs import MACHINE_CHANGES, same_output

SHOWN = """\
fusionworker 0.1.0 on redis://127.0.0.1:6379/0 (prefix fw) at 2026-11-22 00:10:23 UTC
QUEUE  PENDING  OLDEST
sms          6   11.0s
WORKER   HOST  PID   STATE  JOB
vm.4061  vm    4061  idle   -
vm.4061  vm    4061  busy   8878499f9e5745e5a2e7f79d9441e28d (sms)
1 job 7f3c…"""


def actual(pending: int = 6, rows: tuple[str, str] = ("idle", "busy")) -> str:
    host = socket.gethostname()
    lines = {"idle": f"{host}.77  {host}  77  idle  -",
             "busy": f"{host}.78  {host}  78  busy  0123456789abcdef0123456789abcdef (sms)"}
    return "\n".join([
        "fusionworker 0.2.1 on redis://127.0.0.1:6379/0 (prefix doc42) at 2027-01-02 03:04:05 UTC",
        "QUEUE  PENDING  OLDEST", f"sms  {pending}  3.5m", "WORKER  HOST  PID  STATE  JOB",
        lines[rows[0]], lines[rows[1]], "1 job 7f3c0000"])


def test_times_ages_ids_versions_hosts_and_the_prefix_may_differ():
    assert same_output(SHOWN, actual(), prefix="doc42")


def test_rows_of_one_table_may_come_in_any_order():
    assert same_output(SHOWN, actual(rows=("busy", "idle")), prefix="doc42")


def test_a_count_a_missing_line_or_another_prefix_does_not_match():
    assert not same_output(SHOWN, actual(pending=7), prefix="doc42")
    assert not same_output(SHOWN, actual().rsplit("\n", 1)[0], prefix="doc42")
    assert not same_output(SHOWN, actual(), prefix="other")
    assert not same_output(SHOWN, actual(rows=("busy", "busy")), prefix="doc42")


def test_blocks_that_change_the_machine_are_not_run():
    for text in ("sudo useradd x", "pip install -e .", "x && pip3 install y",
                 "systemctl enable --now fusionworker@sms", "apt-get install redis"):
        assert MACHINE_CHANGES.search(text), text
    for text in ("fusionworker worker --burst", "systemctl status fusionworker@sms",
                 "python -m pip list"):
        assert not MACHINE_CHANGES.search(text), text


def test_another_test_redis_url_is_the_default_one_the_docs_show():
    shown = "fusionworker 0.1.0 on redis://127.0.0.1:6379/0 (prefix fw) at 2026-11-22 00:10:23 UTC"
    got = "fusionworker 0.1.0 on redis://10.1.2.3:6380/4 (prefix fw) at 2027-01-02 03:04:05 UTC"
    assert same_output(shown, got, redis_url="redis://10.1.2.3:6380/4")
    assert not same_output(shown, got, redis_url="redis://127.0.0.1:6379/0")


def test_python_in_the_docs_commands_keeps_the_virtualenv(tmp_path):
    """Run from a virtualenv, the commands' ``python`` is that venv's (its packages): a
    symlink elsewhere to the venv's python would start the base interpreter."""
    import subprocess
    import venv
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    venv.create(tmp_path / "venv", system_site_packages=True, with_pip=False)
    probe = ("from tests.docs.sybil_docs import DocEnv; import subprocess; e = DocEnv(); "
             "print(subprocess.run(['python', '-c', 'import sys; print(sys.prefix)'], "
             "env=e.env(), capture_output=True, text=True).stdout.strip()); e.close()")
    done = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", probe],
                          cwd=str(root), capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "venv")
