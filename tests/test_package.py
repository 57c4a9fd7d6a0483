"""The package's face: lazy public names (PEP 562), the documented module paths."""

from __future__ import annotations

import json
import subprocess
import sys

import fusionworker


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet); its stdout."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout


def test_importing_the_package_imports_neither_the_worker_nor_redis():
    loaded = json.loads(_fresh("import json, sys, fusionworker; print(json.dumps(sorted(sys.modules)))"))
    ours = {m for m in loaded if m.startswith("fusionworker")}
    assert "fusionworker.worker" not in ours and "redis" not in loaded and "click" not in loaded
    # what it does import: the documented fusionworker.job path and what the job module needs
    # (job_habits: the RQ names of Job, a part of the class; vocabulary: its enums; record:
    # its schema, whose timeout default is config's, and config_file, which config
    # imports, with base_error, its ConfigError's base; exceptions: retry, the policy RQ's
    # Retry(max=) carries; derived: the is_<status> names; job_view: the type the exceptions
    # name a job by), and the producer's port to the event log and the core's port
    # to the Queue class, which the package root installs
    assert ours == {"fusionworker", "fusionworker.core", "fusionworker.core.codec",
                    "fusionworker.core.emitting", "fusionworker.core.config",
                    "fusionworker.core.config_file", "fusionworker.core.base_error",
                    "fusionworker.core.queue_port",
                    "fusionworker.core.record", "fusionworker.core.retry",
                    "fusionworker.core.job", "fusionworker.core.job_habits",
                    "fusionworker.core.derived", "fusionworker.core.job_view",
                    "fusionworker.core.vocabulary", "fusionworker.exceptions",
                    "fusionworker.job"}


def test_every_public_name_resolves_and_is_listed():
    for name in fusionworker.__all__:
        assert getattr(fusionworker, name) is not None, name
    assert set(fusionworker.__all__) == {"__version__", *fusionworker._PUBLIC}
    assert set(fusionworker.__all__) <= set(dir(fusionworker))
    assert {"admin", "codec", "health", "otel"} <= set(dir(fusionworker))


def test_a_public_name_imports_only_its_own_module():
    out = _fresh("import sys; from fusionworker import Retry; "
                 "print('fusionworker.worker' in sys.modules, 'redis' in sys.modules)")
    assert out.split() == ["False", "False"]


def test_today_public_imports_keep_working():
    from fusionworker import (  # noqa: F401
        Batch,
        FunctionNotAllowed,
        Job,
        JobCanceled,
        JobFailed,
        JobFunction,
        JobTimeoutError,
        JobWaitTimeout,
        NoSuchJob,
        Queue,
        Retry,
        UnsupportedType,
        Worker,
        __version__,
        job,
        register,
    )
    from fusionworker.worker import Worker as WorkerClass

    assert Worker is WorkerClass and callable(job) and isinstance(__version__, str)
    assert fusionworker.job is job                     # the attribute is the decorator


def test_an_unknown_name_is_an_attribute_error():
    try:
        fusionworker.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_the_documented_module_paths_are_the_core_modules():
    out = _fresh(
        "import fusionworker, fusionworker.config as a, fusionworker.core.config as b\n"
        "from fusionworker.connection import connect, decoding, shared_client, refresh_master\n"
        "from fusionworker.connection import FollowSentinelMaster\n"
        "import fusionworker.connection as c, fusionworker.core.connection as d\n"
        "from fusionworker.job import Job\n"
        "import fusionworker.core.job as j\n"
        "from fusionworker import admin, codec, health, otel\n"
        "print(a is b, c is d, Job is j.Job, fusionworker.job is not j, a.__spec__.name,\n"
        "      admin.__name__, codec.__name__, health.__name__, otel.__name__)")
    assert out.split() == ["True", "True", "True", "True", "fusionworker.core.config",
                           "fusionworker.core.admin", "fusionworker.core.codec",
                           "fusionworker.ops.health", "fusionworker.middleware.otel"]


def test_python_m_fusionworker_config_prints_the_settings_table():
    out = subprocess.run([sys.executable, "-m", "fusionworker.config"], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("| env / config key |") and "`REDIS_URL`" in out
