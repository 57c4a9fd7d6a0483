"""Issue 30, item 4: values typed on the command line that used to succeed wrongly (or end
in "unexpected error") are refused in one line, and nothing is written for them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fusionworker.cli import main

HASH_OK = "pbkdf2_sha256$1$salt$" + "A" * 43 + "="


@pytest.fixture
def run(settings, r, prefix):
    """``run(*args, env=...)``: the CLI on the test's prefix; returns (exit code, output)
    after checking that no key was written and no "unexpected error" was said."""
    def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        base = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": prefix,
                "FUSIONWORKER_ALLOWED_MODULES": "tests", "FUSIONWORKER_LOG_LEVEL": "WARNING"}
        result = CliRunner().invoke(main, list(args), env={**base, **(env or {})})
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception)
        assert "unexpected error" not in result.output and "Traceback" not in result.output
        assert sorted(r.scan_iter(match=f"{prefix}:*")) == [], args
        return result.exit_code, result.output
    return invoke


@pytest.mark.parametrize(("args", "said"), [
    (["worker", "--restart-window", "nan", "--burst"], "'nan' is not a finite number"),
    (["worker", "--restart-window", "inf", "--burst"], "'inf' is not a finite number"),
    (["enqueue", "default", "tests.jobs:add", "--timeout", "nan"], "not a finite number"),
    (["enqueue", "default", "tests.jobs:add", "--in", "inf"], "not a finite number"),
    (["enqueue", "default", "tests.jobs:add", "--retry-delay", "nan"], "not a finite number"),
    (["worker", "--metrics-bind", "not an address", "--burst"],
     "FUSIONWORKER_METRICS_BIND='not an address': not an IP address nor a host name"),
    (["worker", "--name", "web\nworker", "--burst"], "must not contain control characters"),
    (["worker", "--name", "a/b", "--burst"], "cannot be addressed by URL"),
    (["worker", "--name", "", "--burst"], "give 1-200 characters"),
    (["worker", "--name", "w" * 201, "--burst"], "give 1-200 characters"),
    (["worker", "--name", "w" * 199, "--processes", "2", "--burst"], "give 1-200 characters"),
    (["suspend", "--duration", "nan"], "'nan' is not a finite number"),
    (["info", "--interval", "inf"], "'inf' is not a finite number"),
    (["health", "--timeout", "nan"], "'nan' is not a finite number"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--group", ""],
     "group must be a non-empty string"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--unique-key", ""],
     "unique_key must be a non-empty string"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--job-id", "a/b"],
     "job_id 'a/b' cannot be addressed by URL"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--job-id", ".."],
     "cannot be addressed by URL"),
    (["cron", "add", "reports/daily", "* * * * *", "tests.jobs:noop"],
     "cron entry name 'reports/daily' cannot be addressed by URL"),
    (["enqueue", "default", "tests.jobs:echo", "[" * 150 + "]" * 150],
     "nested deeper than 100"),
])
def test_a_value_that_succeeded_wrongly_is_refused_in_one_line(run, args, said):
    code, output = run(*args)
    assert code != 0 and said in output, output


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/abc", "redis://127.0.0.1:6379/1.5",
                                 "redis://127.0.0.1:6379/0/extra"])
def test_a_redis_url_with_a_database_that_is_no_integer_is_refused(run, url):
    """redis-py took db 0 for these, and jobs were written there."""
    code, output = run("-u", url, "enqueue", "default", "tests.jobs:add", "1", "2")
    assert code == 1 and "bad database" in output, output


def test_a_garbage_password_hash_is_refused_and_never_shown(run):
    code, output = run("info", env={"FUSIONWORKER_WEB_USER": "ops",
                                    "FUSIONWORKER_WEB_PASSWORD_HASH": "not-a-hash-secret"})
    assert code == 1 and "FUSIONWORKER_WEB_PASSWORD_HASH=***: not a password hash" in output
    assert "not-a-hash-secret" not in output
    code, output = run("queue", "list", env={"FUSIONWORKER_WEB_PASSWORD_HASH": HASH_OK})
    assert code == 0, output


@pytest.mark.parametrize(("job_id", "said"), [
    ("", "job_id must be a non-empty string"),
    ("a b", "job_id must not contain whitespace"),
    ("x" * 201, "job_id must be a non-empty string of at most 200 characters"),
])
def test_a_value_the_api_refuses_is_one_line_without_unexpected_error(run, job_id, said):
    """The API's ValueError/TypeError for a typed value is its own message, not
    "unexpected error: ValueError: ..." (as on main for these ids)."""
    code, output = run("enqueue", "default", "tests.jobs:add", "1", "2", "--job-id", job_id)
    assert code == 1 and output.startswith(f"Error: {said}"), output
    assert len(output.strip().splitlines()) == 1, output
