"""Models loaded once (issue 34): a module named with ``--import`` is imported by the
worker and its fork server before the first horse, fresh horses included; the horses
share the server's copy (copy-on-write, the server's heap frozen for the collector) and
never import it again."""

from __future__ import annotations

import psutil
import pytest

from tests.waiting import wait_for

MIB = 1 << 20
SIZE = 96          # MiB of weights: enough to tell copies apart, sane on a shared machine


def _memory(root: int) -> tuple[float, dict[int, float]]:
    """PSS in MiB of ``root`` and every process under it, and each one's USS (its own
    pages: a copy of the model made or imported in it would be there) by pid."""
    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    pss, uss = 0, {}
    for p in procs:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss += info.pss
        uss[p.pid] = info.uss / MIB
    return pss / MIB, uss


@pytest.mark.serial
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
    assert len(importers) == 2 and w.pid in importers      # the worker and its fork server
    assert all(uss[h] < SIZE / 4 for h in horses)          # and none holds a copy of its own
