"""Models loaded once (issue 34): a module named with ``--import`` is imported by the
worker's fork server before the first horse, fresh horses included; the horses share the
server's copy (copy-on-write, the server's heap frozen for the collector) and never
import it again, and the worker process itself never imports it (a short-lived child
tells it what the module registers: runtime/imports.py)."""

from __future__ import annotations

import time

import psutil

from tests.waiting import wait_for

MIB = 1 << 20
SIZE = 300         # MiB of weights: the model; sane on a shared machine (22 GiB)


def _tree(root: int) -> set[int]:
    return {root, *(p.pid for p in psutil.Process(root).children(recursive=True))}


def _memory(root: int) -> tuple[float, dict[int, float]]:
    """PSS in MiB of ``root`` and every process under it, and each one's USS (its own
    pages: a copy of the model made or imported in it would be there) by pid. Measured
    again until no process came or went meanwhile (the fork server forks ready horses
    ahead: one forked during the reading would share the model's pages unseen)."""
    measured: dict[int, psutil.pfullmem] = {}

    def steady() -> bool:
        pids = _tree(root)
        measured.clear()
        for pid in pids:
            try:
                measured[pid] = psutil.Process(pid).memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return False
        return _tree(root) == pids

    wait_for(steady, timeout=30)
    pss = sum(info.pss for info in measured.values()) / MIB
    return pss, {pid: info.uss / MIB for pid, info in measured.items()}


# not serial: four jobs, memory asserted (PSS/USS of one worker's processes), no deadline
def test_four_fresh_horses_share_the_imported_model_and_never_import_it(
        processes, queue, r, settings, tmp_path):
    log = tmp_path / "imports.log"
    env = {"FW_TEST_MODEL_MIB": str(SIZE), "FW_TEST_MODEL_LOG": str(log)}
    q = queue()
    key = f"{settings.prefix}:arrived"
    w = processes.worker("--customq", "default", "--concurrency", "4",
                         "--import", "tests.model_module", env=env)
    jobs = [q.enqueue("tests.model_module:infer", settings.redis_url, key) for _ in range(4)]
    wait_for(lambda: r.llen(key) == 4, timeout=60)       # four horses hold it at once
    pss, uss = _memory(w.pid)
    r.set(f"{key}:go", 1)
    done = [wait_for(lambda j=j: (f := q.fetch_job(j.id)).status == "finished" and f)
            for j in jobs]
    horses = {d.result[0] for d in done}
    importers = [int(line) for line in log.read_text().split()]
    print(f"PSS of the worker's {len(uss)} processes with 4 jobs running: {pss:.0f} MiB "
          f"({pss / SIZE:.2f} x the {SIZE} MiB model); imported by {len(importers)} "
          f"processes; the horses' own memory: {[round(uss[h]) for h in horses]} MiB")
    assert len(horses) == 4 and not horses & set(importers)   # no horse imported it
    # its fork server, and the short-lived child the worker learnt the registered jobs
    # from (gone by now); not the worker itself
    assert len(importers) == 2 and w.pid not in importers, importers
    assert sum(pid in uss for pid in importers) == 1       # the fork server, running
    assert all(uss[h] < SIZE / 4 for h in horses)          # and none holds a copy of its own
    assert uss[w.pid] < SIZE * 3 / 4                       # nor does the worker
    # the model once plus ten interpreters (~96 MiB: 396 MiB measured, 1.32 x; 696 MiB
    # when the worker held a copy of its own, 2.32 x; the issue asks < 1.6 x)
    assert pss < 1.4 * SIZE, pss


def test_a_memory_ceiling_below_the_model_fails_no_job_and_retires_no_horse(
        processes, queue, r, settings, tmp_path):
    """``--max-horse-memory`` judges a horse's own memory, not the model it shares with
    the fork server (an ML user's 100 MiB ceiling beside a 246 MiB model killed every
    job). Three jobs on a warm horse, the first one running past a horse tick: all
    finish, in the same horse."""
    env = {"FW_TEST_MODEL_MIB": "150", "FW_TEST_MODEL_LOG": str(tmp_path / "imports.log")}
    q = queue()
    key = f"{settings.prefix}:ceiling"
    w = processes.worker("--customq", "default", "--horse-jobs", "3",
                         "--max-horse-memory", "60", "--import", "tests.model_module", env=env)
    jobs = [q.enqueue("tests.model_module:infer", settings.redis_url, key) for _ in range(3)]
    wait_for(lambda: r.llen(key) >= 1, timeout=60)
    time.sleep(1.5)                      # the first job runs past a horse tick (~1 s)
    r.set(f"{key}:go", 1)
    done = [wait_for(lambda j=j: (f := q.fetch_job(j.id)).status in ("finished", "failed")
                     and f) for j in jobs]
    assert [d.status for d in done] == ["finished"] * 3, [d.error_message for d in done]
    assert len({d.result[0] for d in done}) == 1      # one warm horse: never retired
    assert "killing it" not in processes.output(w)
