"""``worker --processes N``: real supervisor and worker processes on the real Redis."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusionworker.core import admin
from fusionworker.middleware.notify import SystemdNotifier
from fusionworker.runtime.supervisor import Supervisor, child_env
from tests.waiting import wait_for


def live(r: Any, prefix: str) -> dict[str, int]:
    """name -> pid of the registered workers."""
    return {w["name"]: int(w["pid"]) for w in admin.workers(r, prefix)}


@pytest.mark.slow
def test_sigkilled_child_is_restarted_and_sigterm_finishes_every_job(
        processes: Any, r: Any, prefix: str, queue: Any, redis_url: str) -> None:
    sup = processes.worker("--customq", "default", "--processes", "3", "--name", "pool")
    names = wait_for(lambda: (w := live(r, prefix)) and len(w) == 3 and w, timeout=20)
    assert set(names) == {"pool.0", "pool.1", "pool.2"}

    os.kill(names["pool.1"], signal.SIGKILL)
    wait_for(lambda: live(r, prefix).get("pool.1") not in (None, names["pool.1"]), timeout=20)
    assert set(live(r, prefix)) == {"pool.0", "pool.1", "pool.2"}

    q = queue("default")
    key = f"{prefix}:spans"
    ids = [q.enqueue("tests.jobs:record_span", redis_url, key, i, 1.5).id for i in range(3)]
    # running inside their horses, not merely claimed: a job claimed as the shutdown
    # begins is given back unstarted (recorder.give_back), which is not this test's point
    wait_for(lambda: sum(x.startswith("start:") for x in r.lrange(key, 0, -1)) == 3)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(20) == 0
    ended = sorted(x.split(":")[1] for x in r.lrange(key, 0, -1) if x.startswith("end:"))
    assert ended == ["0", "1", "2"], processes.output(sup)
    assert all(q.fetch_job(i).status == "finished" for i in ids)
    assert live(r, prefix) == {}
    out = processes.output(sup)
    assert "killed by SIGKILL; restarting it" in out and "exit 0" in out


def test_second_sigterm_is_a_cold_shutdown(processes: Any, r: Any, prefix: str,
                                           queue: Any) -> None:
    sup = processes.worker("--customq", "default", "--processes", "2")
    wait_for(lambda: len(live(r, prefix)) == 2, timeout=20)
    q = queue("default")
    for _ in range(2):
        q.enqueue("tests.jobs:sleep", 60)
    wait_for(lambda: q.stats()["started"] == 2, timeout=10)
    sup.send_signal(signal.SIGTERM)
    # both children took the first SIGTERM (warm) before the second one (cold) is sent
    wait_for(lambda: processes.output(sup).count("warm shutdown (finishing") == 2)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0
    assert q.count == 2 and q.stats()["started"] == 0  # both jobs given back
    assert live(r, prefix) == {}


def test_burst_pool_exits_when_the_queue_is_empty(processes: Any, queue: Any,
                                                  r: Any, prefix: str) -> None:
    q = queue("default")
    ids = [q.enqueue("tests.jobs:add", i, 1).id for i in range(6)]
    sup = processes.worker("--customq", "default", "--processes", "2", "--burst")
    assert sup.wait(30) == 0
    assert all(q.fetch_job(i).status == "finished" for i in ids)
    assert "restarting" not in processes.output(sup)


def test_the_settings_files_processes_start_a_pool_and_its_typos_are_named(
        processes: Any, queue: Any, tmp_path: Path) -> None:
    """FUSIONWORKER_PROCESSES in a ``-c`` file (the shipped example sets it) starts that
    many processes, as systemd's EnvironmentFile would; a misspelt key is said, with the
    nearest setting, where it was silently ignored."""
    q = queue("default")
    ids = [q.enqueue("tests.jobs:add", i, 1).id for i in range(4)]
    cfg = tmp_path / "pool.env"
    cfg.write_text("FUSIONWORKER_PROCESSES=2\nFUSIONWORKER_JOB_TIMEOUTT=30\n")
    sup = processes.start("-c", str(cfg), "worker", "--customq", "default", "--burst",
                          env={"FUSIONWORKER_CONCURENCY": "3"})
    assert sup.wait(30) == 0
    out = processes.output(sup)
    assert "started 2 worker process(es)" in out, out
    said = "FUSIONWORKER_JOB_TIMEOUTT is no setting of fusionworker (did you mean " \
           "FUSIONWORKER_JOB_TIMEOUT?)"
    assert out.count(said) == 1, out   # by the supervisor; its 2 children, reading the file, not again
    # a typo in the environment too (it was silently ignored), said once as well
    said = "environment: FUSIONWORKER_CONCURENCY is no setting of fusionworker (did you " \
           "mean FUSIONWORKER_CONCURRENCY?): ignored"
    assert out.count(said) == 1, out
    assert all(q.fetch_job(i).status == "finished" for i in ids)
    cfg.write_text("FUSIONWORKER_PROCESSES=two\n")
    bad = processes.start("-c", str(cfg), "worker", "--customq", "default", "--burst")
    assert bad.wait(30) == 2 and "FUSIONWORKER_PROCESSES='two'" in processes.output(bad)


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.setblocking(False)
    yield sock
    sock.close()


def _messages(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


@pytest.mark.slow
def test_only_the_supervisor_talks_to_systemd(processes: Any, r: Any, prefix: str,
                                              notify_socket: socket.socket) -> None:
    env = {"NOTIFY_SOCKET": notify_socket.getsockname(), "WATCHDOG_USEC": "1000000"}
    sup = processes.worker("--customq", "default", "--processes", "2", env=env)
    wait_for(lambda: len(live(r, prefix)) == 2, timeout=20)
    seen: list[str] = []
    wait_for(lambda: seen.extend(_messages(notify_socket)) or (
        seen.count("WATCHDOG=1") >= 2 and any(m.startswith("READY=1") for m in seen)))
    ready = [m for m in seen if m.startswith("READY=1")]
    assert len(ready) == 1 and "Supervisor: 2/2 worker processes running" in ready[0]
    assert not any("Worker " in m for m in seen)  # a child's STATUS= would name its worker
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0
    assert any(m.startswith("STOPPING=1") for m in _messages(notify_socket))


@pytest.mark.slow
def test_a_pool_says_ready_only_once_its_children_registered(
        processes: Any, notify_socket: socket.socket) -> None:
    """Redis does not answer: the children wait for it, the pool never says READY=1
    (systemd's start timeout restarts it, as it would a single worker)."""
    env = {"NOTIFY_SOCKET": notify_socket.getsockname(), "REDIS_URL": "redis://127.0.0.1:1/0"}
    sup = processes.worker("--customq", "default", "--processes", "2", env=env)
    seen: list[str] = []
    wait_for(lambda: seen.extend(_messages(notify_socket)) or "Redis did not take"
             in processes.output(sup), timeout=20)
    time.sleep(2.0)                   # the supervisor reads the heartbeats once a second
    seen += _messages(notify_socket)
    assert not any(m.startswith("READY=1") for m in seen), seen
    sup.send_signal(signal.SIGTERM)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(20) is not None


@pytest.mark.slow
def test_the_watchdog_of_a_pool_kills_and_restarts_a_hung_child(
        processes: Any, r: Any, prefix: str, notify_socket: socket.socket) -> None:
    """A child frozen whole (SIGSTOP) sends no heartbeat: past the watchdog's timeout
    (here 3 heartbeats of 0.5 s + 1 s) the supervisor SIGKILLs it and starts another;
    the other child is left alone and the pool keeps telling systemd it lives."""
    env = {"NOTIFY_SOCKET": notify_socket.getsockname(), "WATCHDOG_USEC": "1000000"}
    sup = processes.worker("--customq", "default", "--processes", "2", env=env)
    wait_for(lambda: len(live(r, prefix)) == 2, timeout=20)
    time.sleep(2.5)     # their loops beat (a child is judged once seen beating, not at start)
    before = live(r, prefix)
    frozen, other = sorted(before.values())
    os.kill(frozen, signal.SIGSTOP)
    try:
        wait_for(lambda: "its loop hangs; killed" in processes.output(sup), timeout=20)
        wait_for(lambda: len(live(r, prefix)) == 2 and frozen not in live(r, prefix).values(),
                 timeout=20)
    finally:
        try:
            os.kill(frozen, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert other in live(r, prefix).values()             # the live one was not touched
    assert "WATCHDOG=1" in _messages(notify_socket)
    # a child frozen while the pool shuts down is killed too: the shutdown ends
    # (the new child, once registered: a loaded machine may have restarted it meanwhile)
    again = wait_for(lambda: next((pid for pid in live(r, prefix).values() if pid != other),
                                  None), timeout=20)
    time.sleep(2.5)                                   # the new child is seen beating
    os.kill(again, signal.SIGSTOP)
    try:
        sup.send_signal(signal.SIGTERM)
        sup.wait(30)
    finally:
        try:
            os.kill(again, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert sup.returncode is not None


@pytest.mark.slow
def test_a_burst_pool_says_ready(processes: Any, notify_socket: socket.socket) -> None:
    """A --burst pool may end before every child registered: READY=1 at its start, as a
    single burst worker's (systemd fails a notify unit that exits without it)."""
    env = {"NOTIFY_SOCKET": notify_socket.getsockname()}
    sup = processes.worker("--customq", "nothing_here", "--processes", "2", "--burst", env=env)
    assert sup.wait(30) == 0
    assert any(m.startswith("READY=1") for m in _messages(notify_socket))


def test_child_env_drops_systemd_variables() -> None:
    env = child_env({"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2",
                     "REDIS_URL": "redis://h"})
    assert env == {"REDIS_URL": "redis://h"}


def test_restart_rate_limit_backs_off() -> None:
    sup = Supervisor(lambda place: ["true"], 1, max_restarts=3, restart_window=60,
                     notifier=SystemdNotifier(None))
    place = sup.places[0]
    now = time.monotonic()
    for _ in range(3):
        sup._schedule_restart(place, 1, 1)
        assert place.next_start is not None and place.next_start < now + 5
    sup._schedule_restart(place, 1, 1)
    assert place.next_start > now + 55  # the 4th restart within 60 s waits for the window


def test_a_child_dying_at_start_is_restarted_within_the_limit() -> None:
    starts: list[int] = []

    def command(place: int) -> list[str]:
        starts.append(place)
        return [sys.executable, "-c", "import sys; sys.exit(3)"]

    sup = Supervisor(command, 2, max_restarts=2, restart_window=60, restart_delay=0.05,
                     notifier=SystemdNotifier(None))

    def gave_up() -> bool:                # every place's third start died: its next
        later = time.monotonic() + 30     # start waits for the restart window
        return all(s.proc is None and s.next_start is not None and s.next_start > later
                   for s in sup.places)

    def stop_once_it_gave_up() -> None:   # SIGTERM ends that wait (exit 0)
        try:
            wait_for(gave_up)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=stop_once_it_gave_up, daemon=True).start()
    assert sup.run() == 0
    assert sorted(starts) == [0, 0, 0, 1, 1, 1]  # first start + 2 restarts per place
    assert all(s.last_code == 3 and s.proc is None for s in sup.places)


def test_workers_shut_down_when_the_supervisor_is_killed(processes: Any, r: Any,
                                                         prefix: str) -> None:
    sup = processes.worker("--customq", "default", "--processes", "2")
    pids = wait_for(lambda: (w := live(r, prefix)) and len(w) == 2 and w, timeout=20)
    sup.kill()
    sup.wait(5)
    wait_for(lambda: live(r, prefix) == {}, timeout=10)  # PDEATHSIG=SIGTERM: warm, deregistered
    for pid in pids.values():
        status = Path(f"/proc/{pid}/status")
        wait_for(lambda s=status: not s.exists() or "zombie" in s.read_text(), timeout=5)


def _two_free_ports() -> int:
    """PORT with PORT+1, both free, below the kernel's ephemeral range: a port that
    range gave (``free_port``) may be taken meanwhile by any client's connection of the
    tests running beside this one, before the pool's processes bind it."""
    import random

    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low - 2)
        try:
            for candidate in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise AssertionError("no two free ports below the ephemeral range")


def test_each_process_of_a_pool_serves_its_own_metrics_port(
        processes: Any, r: Any, prefix: str) -> None:
    import urllib.request

    port = _two_free_ports()
    sup = processes.worker("--customq", "default", "--processes", "2", "--name", "m",
                           "--metrics-port", str(port))
    wait_for(lambda: len(live(r, prefix)) == 2, timeout=20)

    def scrape(p: int) -> str:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=2).read().decode()
        except OSError:
            return ""
    for p in (port, port + 1):
        assert "fusionworker_" in wait_for(lambda p=p: scrape(p), timeout=10)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(20) == 0


@pytest.mark.slow
def test_sighup_to_a_pool_applies_the_files_log_level_to_its_children(
        processes: Any, r: Any, prefix: str, queue: Any, tmp_path: Path) -> None:
    """The children read the settings file themselves (no --log-level of the start's
    value on their command line), so a SIGHUP to the supervisor changes their level."""
    import psutil

    cfg = tmp_path / "pool.env"
    cfg.write_text("FUSIONWORKER_LOG_LEVEL=INFO\n")
    sup = processes.start("-c", str(cfg), "worker", "--customq", "default", "--processes", "2",
                          "--name", "pool")
    names = wait_for(lambda: (w := live(r, prefix)) and len(w) == 2 and w, timeout=20)
    for pid in names.values():
        assert "--log-level" not in psutil.Process(pid).cmdline()
    q = queue("default")
    loud = q.enqueue("tests.jobs:add", 1, 2)
    assert loud.wait(timeout=20).result == 3
    wait_for(lambda: f"pulled job {loud.id}" in processes.output(sup), timeout=10)
    cfg.write_text("FUSIONWORKER_LOG_LEVEL=WARNING\n")
    sup.send_signal(signal.SIGHUP)      # (its "reloaded" line is INFO: no longer shown)

    def a_quiet_round() -> bool:
        jobs = [q.enqueue("tests.jobs:add", i, i) for i in range(4)]
        assert [j.wait(timeout=20).result for j in jobs] == [0, 2, 4, 6]
        out = processes.output(sup)
        return not any(f"pulled job {j.id}" in out for j in jobs)

    wait_for(a_quiet_round, timeout=20, interval=0.2, what="the children log at WARNING")
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(20) == 0
