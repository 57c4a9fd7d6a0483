"""A GPU per slot (issue 34, ``worker --gpus``): each slot of a worker owns a device, its
jobs see only that one (``CUDA_VISIBLE_DEVICES``), warm horses keep theirs, ``auto``
counts the devices through NVML (the fake NVML of test_governor: no GPU here), and the
GPU governor judges the worker's own devices only."""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

import pytest

from fusionworker.core.config import ConfigError, load_settings
from fusionworker.core.keys import Keys
from fusionworker.middleware.governor import NVML_LIBRARY, Governor
from fusionworker.runtime.gpus import device_of, resolve_devices
from tests.conftest import ROOT
from tests.middleware.test_governor import FakeNVMLError, fake_nvml
from tests.waiting import wait_for


def test_two_slots_on_two_gpus_run_concurrent_jobs_on_different_devices(processes, queue,
                                                                         settings):
    q = queue()
    key = f"{settings.prefix}:gate"
    processes.worker("--customq", "default", "--concurrency", "2", "--gpus", "0,1")
    jobs = [q.enqueue("tests.jobs:device_at_barrier", settings.redis_url, key, 2)
            for _ in range(2)]
    done = [wait_for(lambda j=j: (f := q.fetch_job(j.id)).status == "finished" and f,
                     timeout=60) for j in jobs]
    devices = sorted(d.result[0] for d in done)
    assert devices == ["0", "1"]                 # both at once, each on its own device


def test_warm_horses_keep_their_device(processes, queue):
    q = queue()
    processes.worker("--customq", "default", "--gpus", "3,5", "--horse-jobs", "50")
    ids = [q.enqueue("tests.jobs:device_of_horse").id for _ in range(12)]
    wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in ids), timeout=60)
    by_pid: dict[int, set[str]] = {}
    for i in ids:
        device, pid = q.fetch_job(i).result
        by_pid.setdefault(pid, set()).add(device)
    assert all(len(devices) == 1 for devices in by_pid.values()), by_pid
    assert set().union(*by_pid.values()) <= {"3", "5"}


def test_auto_counts_the_devices_with_nvml_and_refuses_without_any():
    nvml, calls, _ = fake_nvml(devices=((1000, 10), (1000, 20), (1000, 30)))
    assert resolve_devices(("auto",), nvml=nvml) == ("0", "1", "2")
    assert resolve_devices(("2", "0")) == ("2", "0")
    none, _, _ = fake_nvml(devices=())
    with pytest.raises(ValueError, match="no GPU found"):
        resolve_devices(("auto",), nvml=none)
    broken, _, _ = fake_nvml(init_error=FakeNVMLError("Driver Not Loaded"))
    with pytest.raises(ValueError, match="NVML cannot count"):
        resolve_devices(("auto",), nvml=broken)
    assert [device_of(e, ("0", "1")) for e in (0, 1, 2, -1)] == ["0", "1", "0", None]
    with pytest.raises(ConfigError, match="not a GPU index"):
        load_settings(environ={"FUSIONWORKER_GPUS": "0,x"})


def test_the_gpu_governor_judges_the_workers_own_devices_only():
    settings = load_settings(environ={"FUSIONWORKER_GPUS": "1"})
    gov = Governor(settings, ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=lambda: [(0, 99.0), (1, 20.0)], cpu_reader=lambda: 0.0)
    assert gov.check() is None                   # GPU0 is full: another worker's device
    hot = Governor(settings, ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=lambda: [(0, 10.0), (1, 99.0)], cpu_reader=lambda: 0.0)
    assert hot.check() == "GPU1 at 99.0% (throttle 85%)"


#: the fake NVML as the ``pynvml`` module of a real worker process: two devices of 100
#: units, each one's use read from the file gpu<i> beside it (the test turns it hot)
FAKE_PYNVML = """
import pathlib

HERE = pathlib.Path(__file__).parent


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 2


def nvmlDeviceGetHandleByIndex(i):
    return i


class _Info:
    def __init__(self, used):
        self.total, self.used, self.free = 100, used, 100 - used


def nvmlDeviceGetMemoryInfo(handle):
    return _Info(float((HERE / f"gpu{handle}").read_text()))
"""


def _fake_nvml(tmp_path: Path) -> Path:
    """A directory holding the fake NVML: FAKE_PYNVML as ``pynvml``, and a library
    named ``libnvidia-ml.so.1`` (a link to this process's libm), so the governor's probe
    (``nvml_library_loads``: is the driver here?) finds a host with the driver."""
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "pynvml.py").write_text(FAKE_PYNVML)
    with open("/proc/self/maps") as maps:
        libm = next(line.split()[-1] for line in maps if "/libm." in line or "/libm-" in line)
    (nvml / NVML_LIBRARY).symlink_to(libm)
    return nvml


def _on_path(nvml: Path) -> dict[str, str]:
    """A worker's environment that imports the fake ``pynvml`` and loads its library."""
    return {"PYTHONPATH": f"{nvml}{os.pathsep}{ROOT}", "LD_LIBRARY_PATH": str(nvml)}


def test_a_hot_device_holds_its_own_slot_only_until_it_cools(processes, queue, r, settings,
                                                             tmp_path):
    nvml = _fake_nvml(tmp_path)
    (nvml / "gpu0").write_text("95")             # over GPU_THROTTLE_THRESHOLD (85)
    (nvml / "gpu1").write_text("10")
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "2", "--gpus", "0,1",
                         env={**_on_path(nvml), "MEMORY_CHECK_INTERVAL": "0.2"})
    hb = Keys(settings.prefix).worker(f"{socket.gethostname()}.{w.pid}")
    ids = [q.enqueue("tests.jobs:device_of_horse").id for _ in range(4)]
    wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in ids), timeout=60)
    assert {q.fetch_job(i).result[0] for i in ids} == {"1"}    # the cool device's slot ran all
    assert wait_for(lambda: r.hget(hb, "gpus_held")) == "0"   # and says which is held
    assert r.hget(hb, "throttle") == ""                        # not the whole worker
    (nvml / "gpu0").write_text("10")             # under GPU_RESUME_THRESHOLD (75)
    wait_for(lambda: r.hget(hb, "gpus_held") == "", what="GPU0 released")
    key = f"{settings.prefix}:gate"
    both = [q.enqueue("tests.jobs:device_at_barrier", settings.redis_url, key, 2)
            for _ in range(2)]
    done = [wait_for(lambda j=j: (f := q.fetch_job(j.id)).status == "finished" and f,
                     timeout=60) for j in both]
    assert sorted(d.result[0] for d in done) == ["0", "1"]     # its slot claims again


def test_a_worker_held_by_the_governor_claims_once_it_cools_not_at_its_next_poll(
        processes, queue, r, settings, tmp_path):
    """A claim refused by the governor was asked again at the next poll (30 s here), not
    at its next sample (MEMORY_CHECK_INTERVAL): a job waited 22 s after the pressure
    ended (found by a trial)."""
    nvml = _fake_nvml(tmp_path)
    (nvml / "gpu0").write_text("95")             # over GPU_THROTTLE_THRESHOLD
    (nvml / "gpu1").write_text("10")
    q = queue()
    w = processes.worker("--customq", "default",
                         env={**_on_path(nvml),
                              "GPU_THROTTLE_THRESHOLD": "85", "MEMORY_CHECK_INTERVAL": "0.3",
                              "FUSIONWORKER_POLL_INTERVAL": "30"})
    hb = Keys(settings.prefix).worker(f"{socket.gethostname()}.{w.pid}")
    job = q.enqueue("tests.jobs:noop")
    wait_for(lambda: (r.hget(hb, "throttle") or "").startswith("GPU0"), what="held")
    assert q.fetch_job(job.id).status == "queued"
    (nvml / "gpu0").write_text("10")             # under GPU_RESUME_THRESHOLD
    cooled = time.time()
    done = wait_for(lambda: (j := q.fetch_job(job.id)).status == "finished" and j, timeout=60)
    assert done.started_at - cooled < 5.0    # a sample or two after it cooled, not 30 s


def test_per_slot_the_governor_holds_a_hot_device_and_the_worker_when_all_are():
    settings = load_settings(environ={"FUSIONWORKER_GPUS": "0,1"})
    use = {0: 95.0, 1: 10.0}
    gov = Governor(settings, ram_reader=lambda: 10.0, swap_reader=lambda: 0.0,
                   gpu_reader=lambda: list(use.items()), cpu_reader=lambda: 0.0,
                   clock=itertools.count(step=60).__next__)     # each check samples
    gov.judge_per_slot()
    assert gov.check() is None and gov.hot_devices == {0}
    assert gov.describe()["gpus_held"] == "0"
    use[0] = 80.0                                # under the throttle, over the resume level
    assert gov.check() is None and gov.hot_devices == {0}
    use[1] = 90.0                                # every device: the worker is held
    assert gov.check() == "GPU1 at 90.0% (throttle 85%)"
    use[1] = 50.0
    assert gov.check() is None and gov.hot_devices == {0}
    use[0] = 70.0
    assert gov.check() is None and gov.hot_devices == frozenset()
