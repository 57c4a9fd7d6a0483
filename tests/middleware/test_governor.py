"""Resource governor: thresholds, hysteresis, sampling, GPU probing, horse RSS ceiling.

Readers and the clock are fakes, so every governor test runs in microseconds
and proves exact threshold behaviour; the horse ceiling is tested against real
forked processes, and the NVML reader once against the real ``pynvml``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import select
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from types import SimpleNamespace

import psutil
import pytest

from fusionworker.core.config import load_settings
from fusionworker.middleware import governor as governor_module
from fusionworker.middleware.governor import (
    MIB,
    CpuReader,
    Governor,
    HorseMemoryLimit,
    NvmlGpuReader,
    blocking_resources,
    build_governors,
    rss_mib,
)
from fusionworker.middleware.horse_memory import own_mib

LOGGER = "fusionworker.governor"


def settings(**overrides):
    """Settings from defaults only (no environment), plus overrides."""
    return load_settings(environ={}, **overrides)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Value:
    """A reader returning whatever ``value`` is set to, counting its calls."""

    def __init__(self, value):
        self.value = value
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.value


class Machine:
    """A governor wired to fake readers and a fake clock, sampling on every step."""

    def __init__(self, ram=10.0, swap=0.0, gpus=None, **overrides) -> None:
        self.ram, self.swap, self.gpus = Value(ram), Value(swap), Value(gpus)
        self.clock = Clock()
        overrides.setdefault("memory_check_interval", 5)
        self.gov = Governor(settings(**overrides), ram_reader=self.ram, swap_reader=self.swap,
                            gpu_reader=self.gpus, clock=self.clock)

    def step(self, ram=None, swap=None, gpus=None):
        """Set readings (those given), let the interval pass, and check."""
        if ram is not None:
            self.ram.value = ram
        if swap is not None:
            self.swap.value = swap
        if gpus is not None:
            self.gpus.value = gpus
        self.clock.advance(self.gov.interval)
        return self.gov.check()


# -- thresholds ---------------------------------------------------------------

def test_ram_throttles_at_threshold_not_below():
    m = Machine(ram=89.9)
    assert m.gov.check() is None
    assert not m.gov.throttled
    assert m.step(ram=90.0) == "RAM at 90.0% (throttle 90%)"
    assert m.gov.throttled


def test_reason_format_matches_brief():
    m = Machine(ram=93.1)
    assert m.gov.check() == "RAM at 93.1% (throttle 90%)"
    assert m.gov.reason == "RAM at 93.1% (throttle 90%)"
    assert m.gov.before_claim(worker=None) == "RAM at 93.1% (throttle 90%)"


def test_hysteresis_ram_stays_throttled_until_below_resume():
    m = Machine(ram=91.0)
    assert m.gov.check() is not None
    assert m.step(ram=85.0) == "RAM at 85.0% (resume below 80%)"
    assert m.gov.throttled
    assert m.step(ram=80.0) is not None  # resume needs strictly below
    assert m.step(ram=79.0) is None
    assert not m.gov.throttled
    # Not throttled again between the levels: 85 is below the throttle level.
    assert m.step(ram=85.0) is None


def test_swap_throttles_at_threshold_and_has_no_resume_level():
    m = Machine(swap=69.9)
    assert m.gov.check() is None
    assert m.step(swap=70.0) == "swap at 70.0% (throttle 70%)"
    assert m.step(swap=69.9) is None  # released just below throttle: no separate resume level


def test_swap_keeps_throttle_after_ram_recovers():
    m = Machine(ram=95.0, swap=75.0)
    assert m.gov.check() == "RAM at 95.0% (throttle 90%); swap at 75.0% (throttle 70%)"
    assert m.step(ram=50.0) == "swap at 75.0% (throttle 70%)"
    assert m.step(swap=10.0) is None


def test_any_gpu_throttles_and_every_gpu_must_resume():
    m = Machine(gpus=[(0, 10.0), (1, 84.9)])
    assert m.gov.check() is None
    assert m.step(gpus=[(0, 10.0), (1, 85.0)]) == "GPU1 at 85.0% (throttle 85%)"
    assert m.step(gpus=[(0, 80.0), (1, 74.0)]) == "GPU0 at 80.0% (resume below 75%)"
    assert m.step(gpus=[(0, 74.9), (1, 74.9)]) is None


def test_multiple_gpus_over_threshold_all_named():
    m = Machine(gpus=[(0, 90.0), (1, 20.0), (2, 99.5)])
    assert m.gov.check() == "GPU0 at 90.0% (throttle 85%); GPU2 at 99.5% (throttle 85%)"


def test_gpu_thresholds_from_settings():
    m = Machine(gpus=[(0, 60.0)], gpu_throttle_threshold=60, gpu_resume_threshold=50)
    assert m.gov.check() == "GPU0 at 60.0% (throttle 60%)"
    assert m.step(gpus=[(0, 55.0)]) is not None
    assert m.step(gpus=[(0, 49.0)]) is None


def test_gpu_disappearing_while_throttled_does_not_pin_the_throttle():
    m = Machine(gpus=[(0, 95.0)])
    assert m.gov.check() is not None
    m.gpus.value = None
    assert m.step() is None


def test_resume_above_throttle_is_clamped(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    m = Machine(ram=85.0, memory_throttle_threshold=80, memory_resume_threshold=90)
    assert m.gov.ram_resume == 80.0
    assert "MEMORY_RESUME_THRESHOLD=90% is above its throttle threshold 80%" in caplog.text
    assert m.gov.check() is not None
    assert m.step(ram=79.0) is None


def test_a_default_resume_level_above_a_lower_throttle_is_no_warning(caplog):
    """GPU_THROTTLE_THRESHOLD=50 alone warned of GPU_RESUME_THRESHOLD=75%, which the
    operator never set (its default): it resumes under 50 % without a word."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    m = Machine(gpu_throttle_threshold=50)
    assert m.gov.gpu_resume == 50.0 and "RESUME_THRESHOLD" not in caplog.text


# -- sampling -----------------------------------------------------------------

def test_samples_at_most_every_interval():
    m = Machine(ram=50.0)
    assert m.gov.check() is None  # the first call samples
    assert (m.ram.calls, m.swap.calls, m.gpus.calls) == (1, 1, 1)
    m.ram.value = 99.0
    m.clock.advance(4.9)
    assert m.gov.check() is None  # cached: the readers were not asked
    assert m.gov.before_claim(worker=None) is None
    assert (m.ram.calls, m.swap.calls, m.gpus.calls) == (1, 1, 1)
    assert m.gov.next_check_in() == pytest.approx(0.1)
    m.clock.advance(0.1)
    assert m.gov.next_check_in() == 0.0
    assert m.gov.check() == "RAM at 99.0% (throttle 90%)"
    assert (m.ram.calls, m.swap.calls, m.gpus.calls) == (2, 2, 2)


def test_last_reading_and_describe():
    m = Machine(ram=93.1, swap=2.0, gpus=[(0, 12.0)])
    assert m.gov.last_reading is None
    assert m.gov.next_check_in() == 0.0
    assert m.gov.describe() == {"throttle": ""}
    m.gov.check()
    reading = m.gov.last_reading
    assert (reading.ram, reading.swap, reading.gpus, reading.at) == (93.1, 2.0, ((0, 12.0),), 1000.0)
    assert m.gov.describe() == {"throttle": "RAM at 93.1% (throttle 90%)"}
    m.step(ram=10.0)
    assert m.gov.describe() == {"throttle": ""}


# -- log lines ----------------------------------------------------------------

def test_log_lines_exactly_once_each(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    m = Machine(ram=93.1, swap=2.0, gpus=[(0, 12.0)])
    m.gov.check()
    m.step(ram=95.0)
    m.step(ram=85.0)
    m.step(ram=78.0)
    m.step(ram=70.0)
    records = [(r.levelno, r.getMessage()) for r in caplog.records if "THROTTLE" in r.getMessage()]
    assert records == [
        (logging.WARNING, "MEMORY THROTTLE ACTIVE: RAM at 93.1%, swap at 2.0%, GPU0 at 12.0% "
                          "(throttle RAM 90%, swap 70%, GPU 85%)"),
        (logging.INFO, "MEMORY THROTTLE RELEASED: RAM at 78.0%, swap at 2.0%, GPU0 at 12.0% "
                       "(resume RAM 80%, swap 70%, GPU 75%)"),
    ]


def test_log_line_without_gpu(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    m = Machine(ram=91.0, swap=2.0, gpus=None)
    m.gov.check()
    assert caplog.messages == [
        "MEMORY THROTTLE ACTIVE: RAM at 91.0%, swap at 2.0% (throttle RAM 90%, swap 70%)"]


def test_a_second_throttle_episode_logs_again(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    m = Machine(ram=95.0)
    for ram in (95.0, 50.0, 95.0, 50.0):
        m.step(ram=ram)
    kinds = [msg.split(":")[0] for msg in caplog.messages]
    assert kinds == ["MEMORY THROTTLE ACTIVE", "MEMORY THROTTLE RELEASED"] * 2


def test_raising_gpu_reader_turns_gpu_check_off_once(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("driver gone")

    clock = Clock()
    gov = Governor(settings(), ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=broken, clock=clock)
    assert gov.check() is None
    clock.advance(10)
    assert gov.check() is None
    assert len(calls) == 1
    assert caplog.messages == ["GPU check off: RuntimeError: driver gone"]


def test_default_readers_on_this_machine():
    """Real psutil (and real pynvml, absent a GPU here): no error, a sane reading."""
    gov = Governor(settings())
    reason = gov.check()
    assert reason is None or "throttle" in reason
    reading = gov.last_reading
    assert 0.0 <= reading.ram <= 100.0
    assert 0.0 <= reading.swap <= 100.0


# -- NVML reader --------------------------------------------------------------

class FakeNVMLError(Exception):
    pass


def fake_nvml(devices=((1000, 250), (2000, 1900)), init_error=None):
    """A stand-in for the ``pynvml`` module; ``devices`` are (total, used) bytes."""
    calls: list[str] = []
    state = SimpleNamespace(devices=list(devices), read_error=None)

    def nvmlInit():  # noqa: N802 - pynvml's name
        calls.append("init")
        if init_error:
            raise init_error

    def nvmlShutdown():  # noqa: N802 - pynvml's name
        calls.append("shutdown")

    def nvmlDeviceGetCount():  # noqa: N802 - pynvml's name
        return len(state.devices)

    def nvmlDeviceGetHandleByIndex(i):  # noqa: N802 - pynvml's name
        return ("handle", i)

    def nvmlDeviceGetMemoryInfo(handle):  # noqa: N802 - pynvml's name
        calls.append("read")
        if state.read_error:
            raise state.read_error
        total, used = state.devices[handle[1]]
        return SimpleNamespace(total=total, used=used, free=total - used)

    module = SimpleNamespace(
        NVMLError=FakeNVMLError, nvmlInit=nvmlInit, nvmlShutdown=nvmlShutdown,
        nvmlDeviceGetCount=nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex=nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetMemoryInfo=nvmlDeviceGetMemoryInfo)
    return module, calls, state


def test_nvml_reader_initializes_lazily_and_reads_every_device():
    nvml, calls, _ = fake_nvml()
    reader = NvmlGpuReader(nvml=nvml)
    assert calls == []  # constructing costs nothing
    assert reader() == [(0, 25.0), (1, 95.0)]
    assert reader() == [(0, 25.0), (1, 95.0)]
    assert calls.count("init") == 1
    assert reader.off_reason is None
    reader.close()
    assert calls[-1] == "shutdown"


def test_nvml_init_error_turns_check_off_once(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)   # no GPU here: DEBUG, not INFO
    nvml, calls, _ = fake_nvml(init_error=FakeNVMLError("Driver Not Loaded"))
    reader = NvmlGpuReader(nvml=nvml)
    assert reader() is None
    assert reader() is None
    assert calls == ["init"]
    assert caplog.messages == ["GPU check off: NVML unavailable (Driver Not Loaded)"]
    assert [rec.levelno for rec in caplog.records] == [logging.DEBUG]


def test_no_gpu_is_an_info_line_when_gpu_thresholds_are_configured(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    nvml, _, _ = fake_nvml(init_error=FakeNVMLError("Driver Not Loaded"))
    reader = NvmlGpuReader(nvml=nvml, gpu_configured=True)
    assert reader() is None and reader() is None
    assert caplog.messages == ["GPU check off: NVML unavailable (Driver Not Loaded)"]
    assert [rec.levelno for rec in caplog.records] == [logging.INFO]


@pytest.mark.parametrize(("overrides", "configured"), [
    ({}, False), ({"gpu_throttle_threshold": 50.0}, True), ({"gpu_resume_threshold": 40.0}, True)])
def test_the_governor_tells_its_gpu_reader_whether_gpu_thresholds_were_set(overrides, configured):
    gov = Governor(settings(**overrides), ram_reader=lambda: 10.0, swap_reader=lambda: 0.0)
    assert gov._gpu_reader._gpu_configured is configured


def test_nvml_zero_devices_turns_check_off(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)   # no GPU here: DEBUG, not INFO
    nvml, calls, _ = fake_nvml(devices=())
    reader = NvmlGpuReader(nvml=nvml)
    assert reader() is None
    assert reader() is None
    assert calls == ["init", "shutdown"]
    assert caplog.messages == ["GPU check off: no NVIDIA GPU found"]


def test_nvml_error_mid_run_turns_check_off_once(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    nvml, calls, state = fake_nvml()
    reader = NvmlGpuReader(nvml=nvml)
    assert reader() == [(0, 25.0), (1, 95.0)]
    state.read_error = FakeNVMLError("GPU is lost")
    assert reader() is None
    assert reader() is None
    assert calls.count("read") == 3  # two good reads, one failed, then never again
    assert "shutdown" in calls
    assert caplog.messages == ["GPU check off: NVML read failed (GPU is lost)"]
    assert [rec.levelno for rec in caplog.records] == [logging.INFO]   # a GPU that fails


def test_governor_with_nvml_error_mid_run_keeps_working(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    nvml, _, state = fake_nvml(devices=((100, 90),))
    clock = Clock()
    gov = Governor(settings(), ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=NvmlGpuReader(nvml=nvml), clock=clock)
    assert gov.check() == "GPU0 at 90.0% (throttle 85%)"
    state.read_error = FakeNVMLError("Unknown Error")
    clock.advance(5)
    assert gov.check() is None  # GPU gone from the picture; RAM and swap are fine
    assert "GPU check off: NVML read failed (Unknown Error)" in caplog.messages
    assert sum("MEMORY THROTTLE RELEASED" in m for m in caplog.messages) == 1


def test_nvml_missing_package(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)   # no GPU here: DEBUG, not INFO
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    reader = NvmlGpuReader()
    assert reader() is None
    assert reader() is None
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("GPU check off: pynvml not installed")


def test_listed_gpus_without_nvml_say_so_at_warning(monkeypatch, caplog):
    """``--gpus 0,1`` on a host without NVML: the jobs still get the listed devices, and
    nothing said so (the check's end was a DEBUG line): a WARNING names both."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gov = Governor(settings(gpus=("0", "1")), ram_reader=lambda: 10.0,
                   swap_reader=lambda: 0.0)
    assert gov.check() is None
    warned = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warned) == 1 and "pynvml not installed" in warned[0].getMessage()
    assert "CUDA_VISIBLE_DEVICES" in warned[0].getMessage()
    caplog.clear()
    quiet = Governor(settings(), ram_reader=lambda: 10.0, swap_reader=lambda: 0.0)
    assert quiet.check() is None and not caplog.records    # no --gpus: DEBUG, as before


def test_real_pynvml_degrades_cleanly_without_gpu(caplog):
    pytest.importorskip("pynvml")
    caplog.set_level(logging.DEBUG, logger=LOGGER)   # no GPU here: DEBUG, not INFO
    reader = NvmlGpuReader()
    result = reader()
    if result is not None:  # pragma: no cover - only on a machine with a GPU
        assert all(0.0 <= used <= 100.0 for _, used in result)
        reader.close()
        return
    assert reader() is None
    assert reader.off_reason.startswith("NVML unavailable")
    assert caplog.messages == [f"GPU check off: {reader.off_reason}"]
    assert [rec.levelno for rec in caplog.records] == [logging.DEBUG]


def test_host_without_the_driver_never_imports_pynvml(monkeypatch, caplog):
    """No NVIDIA driver (this machine): the check ends before `import pynvml`, which would
    cost every worker 2.5 MiB of its own; the reason names the missing library."""
    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("pynvml is not installed here")
    if governor_module.nvml_library_loads():  # pragma: no cover - a host with the driver
        pytest.skip("this host has the NVIDIA driver")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    reader = NvmlGpuReader()
    assert reader() is None and reader() is None
    assert "pynvml" not in sys.modules
    assert reader.off_reason == "NVML unavailable (libnvidia-ml.so.1 not found: no NVIDIA driver)"
    assert [rec.levelno for rec in caplog.records] == [logging.DEBUG]
    # a pynvml imported already (a user's own, a stand-in without a module spec) is used
    # as it is: no probe, and find_spec (which raises on a spec-less module) is not asked
    stand_in = types.ModuleType("pynvml")
    monkeypatch.setitem(sys.modules, "pynvml", stand_in)
    stand_in.NVMLError = FakeNVMLError
    stand_in.nvmlInit = lambda: None
    stand_in.nvmlShutdown = lambda: None
    stand_in.nvmlDeviceGetCount = lambda: 0
    assert NvmlGpuReader()() is None   # no device: off, not an exception
    # the probe is a real load: a library this host has loads
    monkeypatch.setattr(governor_module, "NVML_LIBRARY", "libc.so.6")
    assert governor_module.nvml_library_loads()


# -- per-horse memory ceiling -------------------------------------------------

@contextlib.contextmanager
def forked_hog(mib: int, *, in_grandchild: bool = False) -> Iterator[int]:
    """Fork a process that holds ``mib`` MiB of touched memory (or whose child does).

    Yields the child's pid once the memory is allocated; kills the whole
    process group afterwards so no grandchild outlives the test.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.close(r)
            os.setpgid(0, 0)
            if in_grandchild and os.fork() != 0:
                time.sleep(60)  # the grandchild holds the memory
            else:
                hog = b"x" * (mib * MIB)  # bytes(...) * n writes every page: resident
                os.write(w, b"1")
                time.sleep(60)
                del hog
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 10)
        assert ready and os.read(r, 1) == b"1", "forked hog did not start"
        yield pid
    finally:
        os.close(r)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_horse_over_ceiling_returns_memory(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with forked_hog(60) as pid:
        used = rss_mib(pid)
        assert used >= 60
        assert HorseMemoryLimit.rss_mib(pid) == pytest.approx(used, abs=5)
        job = SimpleNamespace(id="job-1")
        assert HorseMemoryLimit(settings(max_horse_memory=30)).on_horse_tick(None, job, pid) == "memory"
        assert f"Horse {pid} of job job-1 holds" in caplog.text and "of its own" in caplog.text
        roomy = HorseMemoryLimit(settings(max_horse_memory=int(used) + 200))
        assert roomy.on_horse_tick(None, job, pid) is None
        assert HorseMemoryLimit(settings(max_horse_memory=0)).on_horse_tick(None, job, pid) is None


def test_horse_ceiling_does_not_count_the_pages_a_horse_shares_with_its_parent(caplog):
    """A model loaded once in the fork server: every horse maps it (its resident set
    holds it), none owns it. The ceiling judges what the horse holds of its own, so a
    ceiling below the model fails only a job that allocates past it (it killed every
    job: an ML user's 100 MiB ceiling beside a 246 MiB model)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    model = b"m" * (120 * MIB)       # written here, before the fork: the parent's pages
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            assert model[-1:] == b"m"     # read, never written: the pages stay shared
            os.write(w, b"1")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert select.select([r], [], [], 10)[0] and os.read(r, 1) == b"1"
        assert rss_mib(pid) >= 110               # mapped, so resident to the kernel
        assert own_mib(pid) < 30                 # but not its own
        job = SimpleNamespace(id="job-model")
        assert HorseMemoryLimit(settings(max_horse_memory=60)).on_horse_tick(
            None, job, pid) is None
        assert "job-model" not in caplog.text
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    del model
    with forked_hog(60) as pid:                  # memory of its own still counts
        assert own_mib(pid) >= 55


def test_horse_ceiling_counts_children():
    with forked_hog(60, in_grandchild=True) as pid:
        own = psutil.Process(pid).memory_info().rss / MIB
        assert rss_mib(pid) - own >= 55


def test_dead_horse_returns_none():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert rss_mib(pid) == 0.0
    assert HorseMemoryLimit(settings(max_horse_memory=1)).on_horse_tick(None, None, pid) is None


# -- wiring -------------------------------------------------------------------

def test_build_governors():
    plain = build_governors(settings())
    assert [type(m) for m in plain] == [Governor, HorseMemoryLimit]   # inert until reloaded
    assert not plain[1].enabled
    limited = build_governors(settings(max_horse_memory=512))
    assert [type(m) for m in limited] == [Governor, HorseMemoryLimit]
    assert limited[1].limit_mib == 512


# -- CPU (issue 34) -----------------------------------------------------------

def cpu_machine(cpu=10.0, **overrides):
    overrides.setdefault("memory_check_interval", 5)
    cpu_value, clock = Value(cpu), Clock()
    gov = Governor(settings(**overrides), ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=lambda: None, cpu_reader=cpu_value, clock=clock)
    return gov, cpu_value, clock


def test_cpu_throttles_with_hysteresis_when_configured(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    gov, cpu, clock = cpu_machine(cpu=94.9, cpu_throttle_threshold=95, cpu_resume_threshold=70)
    assert gov.check() is None
    cpu.value = 95.0
    clock.advance(5)
    assert gov.check() == "CPU at 95.0% (throttle 95%)"
    cpu.value = 80.0
    clock.advance(5)
    assert gov.check() == "CPU at 80.0% (resume below 70%)"
    assert gov.describe() == {"throttle": "CPU at 80.0% (resume below 70%)", "cpu_percent": 80.0}
    cpu.value = 69.0
    clock.advance(5)
    assert gov.check() is None
    assert [m for m in caplog.messages if "THROTTLE" in m] == [
        "CPU THROTTLE ACTIVE: RAM at 10.0%, swap at 0.0%, CPU at 95.0% "
        "(throttle RAM 90%, swap 70%, CPU 95%)",
        "CPU THROTTLE RELEASED: RAM at 10.0%, swap at 0.0%, CPU at 69.0% "
        "(resume RAM 80%, swap 70%, CPU 70%)"]


def test_cpu_check_is_off_by_default_and_never_reads():
    gov, cpu, clock = cpu_machine(cpu=100.0)
    assert gov.check() is None
    assert cpu.calls == 0 and gov.last_reading.cpu is None
    assert gov.describe() == {"throttle": ""}


def test_cpu_beside_memory_names_both():
    gov, cpu, clock = cpu_machine(cpu=99.0, cpu_throttle_threshold=90,
                                  memory_throttle_threshold=5)
    assert gov.check() == "RAM at 10.0% (throttle 5%); CPU at 99.0% (throttle 90%)"
    assert blocking_resources(gov.reason) == {"ram", "cpu"}
    assert blocking_resources("GPU1 at 90.0% (throttle 85%)") == {"gpu"}
    assert blocking_resources(None) == set()


def test_cpu_reader_measures_busy_time_of_real_processes():
    """The real reader: with every core spinning in real processes the reading is high;
    it is a percent of all cores."""
    reader = CpuReader()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(2 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)          # a window with the burners running (not a latency bound)
        busy = reader()
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert 90.0 <= busy <= 100.0
