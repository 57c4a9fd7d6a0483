"""The systemd units: `systemd-analyze verify` clean, and the settings the worker relies on.

`systemd-analyze verify` checks that every ExecStart= binary exists, so the
units are verified as installed except for one substitution: ExecStart=
points to a stub `fusionworker` executable in a temp dir. Everything else
(keys, values, specifiers, hardening options) is verified as shipped, and
any warning — `verify` only warns, exit code 0, about an unknown key or a
bad value — fails the test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fusionworker.core.config import SETTINGS

SYSTEMD_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNITS = sorted(p for p in SYSTEMD_DIR.iterdir() if p.suffix in (".service", ".target"))
INSTALLED_BINARY = "/usr/local/bin/fusionworker"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or (
    "/usr/bin/systemd-analyze" if Path("/usr/bin/systemd-analyze").exists() else None
)
needs_analyze = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")


def verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", "--generators=no", *map(str, paths)],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.fixture
def unit_dir(tmp_path: Path) -> Path:
    """The units, copied, with ExecStart= pointing at an existing stub executable."""
    stub = tmp_path / "bin" / "fusionworker"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    out = tmp_path / "units"
    out.mkdir()
    for unit in UNITS:
        text = unit.read_text()
        (out / unit.name).write_text(text.replace(INSTALLED_BINARY, str(stub)))
    return out


def test_there_are_units() -> None:
    names = {p.name for p in UNITS}
    assert {"fusionworker@.service", "fusionworker.target"} <= names


@needs_analyze
@pytest.mark.parametrize("name", [p.name for p in UNITS])
def test_unit_verifies_without_any_warning(unit_dir: Path, name: str) -> None:
    result = verify(unit_dir / name)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


@needs_analyze
@pytest.mark.parametrize("instance", ["sms", r"sms\x2cemail", r"sms\x2cemail\x2cpush-v2.eu"])
def test_instances_verify(unit_dir: Path, instance: str) -> None:
    # How systemctl names `fusionworker@sms,email` (a comma is escaped as \x2c).
    # (Weighted specs such as sms:3,email:1 are valid unit names too, but
    # systemd-analyze 252 cannot verify a file whose name holds a colon.)
    unit = unit_dir / f"fusionworker@{instance}.service"
    shutil.copy(unit_dir / "fusionworker@.service", unit)
    result = verify(unit, unit_dir / "fusionworker.target")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


@needs_analyze
def test_verify_catches_a_broken_unit(unit_dir: Path) -> None:
    """Guard: the check above would notice a typo (verify only warns about it)."""
    unit = unit_dir / "fusionworker@.service"
    unit.write_text(unit.read_text().replace("KillMode=mixed", "KillMode=bogus"))
    assert "kill mode" in verify(unit).stderr


@needs_analyze
def test_only_the_binary_path_was_substituted() -> None:
    """The shipped unit, unmodified, fails at most on the not-yet-installed binary."""
    result = verify(SYSTEMD_DIR / "fusionworker@.service")
    if Path(INSTALLED_BINARY).exists():
        assert result.stderr.strip() == "", result.stderr
        return
    problems = [line for line in result.stderr.splitlines() if line.strip()]
    assert problems and all(INSTALLED_BINARY in line for line in problems), result.stderr


def escaped_instance(queues: str) -> str:
    """The instance part of the unit name systemd uses for a queue spec."""
    if shutil.which("systemd-escape") is None:
        pytest.skip("systemd-escape is not installed")
    out = subprocess.run(["systemd-escape", "--template", "fusionworker@.service", queues],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out.removeprefix("fusionworker@").removesuffix(".service")


def test_comma_instance_unescapes_to_the_queue_spec() -> None:
    escaped = escaped_instance("sms,email")
    assert escaped == r"sms\x2cemail"
    back = subprocess.run(["systemd-escape", "--unescape", escaped],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert back == "sms,email"  # what %I gives the worker


# ---------------------------------------------------------------- the settings themselves


def directives(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` -> values (systemd allows a key several times)."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


SERVICE = directives(SYSTEMD_DIR / "fusionworker@.service")


def one(key: str) -> str:
    values = SERVICE.get(f"Service.{key}") or SERVICE.get(f"Unit.{key}") or SERVICE.get(f"Install.{key}")
    assert values, f"{key}= is missing"
    return values[-1]


def test_exec_start_runs_the_instance_queues() -> None:
    exec_start = one("ExecStart")
    # -c the instance file as well: `systemctl reload` (SIGHUP) re-reads it
    assert exec_start.startswith(f"{INSTALLED_BINARY} -c /etc/fusionworker/%I.env worker ")
    assert one("ExecReload") == "/bin/kill -HUP $MAINPID"
    assert "--customq %I" in exec_start  # %I: unescaped, so sms\x2cemail -> sms,email
    assert "--processes ${FUSIONWORKER_PROCESSES}" in exec_start
    assert "FUSIONWORKER_PROCESSES=1" in SERVICE["Service.Environment"]  # default if unset
    assert "/etc/fusionworker/%I.env" in SERVICE["Service.EnvironmentFile"]


@pytest.mark.parametrize(("key", "value"), [
    ("Type", "notify"), ("NotifyAccess", "all"), ("WatchdogSec", "60"),
    ("KillSignal", "SIGTERM"), ("KillMode", "mixed"), ("Restart", "on-failure"),
    ("User", "fusionworker"), ("StateDirectory", "fusionworker"), ("OOMPolicy", "continue"),
    ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
    ("ProtectHome", "yes"), ("ProtectKernelTunables", "yes"), ("ProtectControlGroups", "yes"),
    ("RestrictSUIDSGID", "yes"), ("LockPersonality", "yes"),
    ("PartOf", "fusionworker.target"), ("WantedBy", "fusionworker.target"),
])
def test_service_setting(key: str, value: str) -> None:
    assert one(key) == value


def test_stop_timeout_covers_the_longest_default_job() -> None:
    defaults = {s.name: s.default for s in SETTINGS}
    assert int(one("TimeoutStopSec")) >= defaults["job_timeout"] + defaults["kill_grace"] + 30


def test_nothing_forbids_fork() -> None:
    assert "Service.MemoryDenyWriteExecute" not in SERVICE
    for value in SERVICE.get("Service.SystemCallFilter", []):
        if value.startswith("~"):  # a deny-list must not deny process management
            denied = value[1:].split()
            assert not {"@process", "@signal", "@basic-io", "@ipc"} & set(denied), value
        else:
            assert "@process" in value or "@system-service" in value, value


def test_env_example_names_only_known_settings() -> None:
    known = {s.env for s in SETTINGS} | {"FUSIONWORKER_PROCESSES"}  # the latter: unit only
    names = set()
    for line in (SYSTEMD_DIR / "fusionworker.env.example").read_text().splitlines():
        match = re.match(r"^#?([A-Z][A-Z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    assert names - known == set()
    assert {"REDIS_URL", "FUSIONWORKER_ALLOWED_MODULES", "FUSIONWORKER_PROCESSES",
            "ELASTICSEARCH_URL", "MEMORY_THROTTLE_THRESHOLD"} <= names


def test_cli_accepts_every_flag_of_exec_start() -> None:
    """The unit's command line must be one the CLI accepts."""
    from fusionworker.cli import main

    worker = main.commands["worker"]
    options = {opt for param in worker.params for opt in getattr(param, "opts", [])}
    flags = set(re.findall(r"(--[a-z-]+)", one("ExecStart")))
    assert flags - options == set(), f"`fusionworker worker` lacks {sorted(flags - options)}"
