"""Issue 30, item 4: values typed on the command line that used to succeed wrongly (or end
in "unexpected error") are refused in one line, and nothing is written for them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.core.config import load_settings

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
     "--metrics-bind='not an address': not an IP address nor a host name"),
    (["worker", "--metrics-bind", "[::1]", "--burst"], "not an IP address nor a host name"),
    (["web", "--bind", "not an address", "--port", "19181"],
     "'not an address': not an IP address nor a host name"),
    (["exporter", "--bind", "not an address", "--port", "19182"],
     "'not an address': not an IP address nor a host name"),
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
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--unique-key", " "],
     "unique_key must be a non-empty string"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--group", "a\nb"],
     "group must be a non-empty string without control characters"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--timeout", "1e308"],
     "timeout=1e+308: must be <= 3.1536e+08"),
    (["cron", "add", "n", "* * * * *", "tests.jobs:noop", "--timeout", "1e12"],
     "must be <= 3.1536e+08"),
    (["suspend", "--duration", "1e308"], "not in the range"),
    (["health", "--timeout", "1e308"], "not in the range"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--job-id", "a/b"],
     "job_id 'a/b' cannot be addressed by URL"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--job-id", ".."],
     "cannot be addressed by URL"),
    (["cron", "add", "reports/daily", "* * * * *", "tests.jobs:noop"],
     "cron entry name 'reports/daily' cannot be addressed by URL"),
    (["enqueue", "default", "tests.jobs:echo", "[" * 150 + "]" * 150],
     "nested deeper than 100"),
    (["enqueue", "default", "tests.jobs:add", "1", "2", "--in", "1e12"],
     "past the year 9999"),
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


def test_a_metrics_bind_in_the_environment_is_checked_and_named(run):
    code, output = run("worker", "--burst", env={"FUSIONWORKER_METRICS_BIND": "a b"})
    assert code == 1 and "FUSIONWORKER_METRICS_BIND='a b': not an IP address" in output


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


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost",
                                     "metrics.internal.example"])
def test_addresses_to_listen_on_are_still_taken(address):
    assert load_settings(environ={"FUSIONWORKER_METRICS_BIND": address}).metrics_bind == address


def test_a_hash_of_hash_password_is_taken():
    pytest.importorskip("starlette")   # fusionworker.web needs the [web] extra
    from fusionworker.web.auth import hash_password

    encoded = hash_password("s3cret", iterations=1)
    assert load_settings(environ={"FUSIONWORKER_WEB_PASSWORD_HASH": encoded}) \
        .web_password_hash == encoded
