"""``config.Settings``: one typed attribute per row of the settings table."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from fusionworker.core import config
from fusionworker.core.config import SETTINGS, ConfigError, Settings, load_settings

HINTS = typing.get_type_hints(Settings)


def _is(value: object, hint: object) -> bool:
    if hint == tuple[str, ...]:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if hint is float:           # an int default of a float setting would print "180", not 180.0
        return type(value) is float
    if hint is int:
        return type(value) is int
    assert isinstance(hint, type)
    return isinstance(value, hint)


def test_the_dataclass_declares_the_table_in_its_order():
    fields = [f.name for f in dataclasses.fields(Settings) if f.name not in ("values", "explicit")]
    assert fields == [s.name for s in SETTINGS]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_attribute_has_the_type_of_its_default_and_of_its_parsed_value(setting):
    hint = HINTS[setting.name]
    assert _is(getattr(Settings(), setting.name), hint)
    assert getattr(Settings(), setting.name) == setting.default
    raw = ",".join(setting.default) if isinstance(setting.default, tuple) else (
        {True: "1", False: "0"}[setting.default] if isinstance(setting.default, bool)
        else str(setting.default))
    parsed = load_settings(environ={setting.env: raw})
    assert _is(getattr(parsed, setting.name), hint), (setting.env, raw)
    assert parsed.is_explicit(setting.name) is bool(raw)    # an empty value is unset


def test_resolution_order_and_explicit_names(tmp_path):
    file = tmp_path / "fw.env"
    file.write_text("FUSIONWORKER_CONCURRENCY=3\nFUSIONWORKER_PREFIX=file\n")
    s = load_settings(str(file), environ={"FUSIONWORKER_PREFIX": "env"}, lease=12.0)
    assert (s.concurrency, s.prefix, s.lease, s.job_timeout) == (3, "env", 12.0, 180.0)
    assert s.explicit == {"concurrency", "prefix", "lease"}
    assert s.values == {"concurrency": 3, "prefix": "env", "lease": 12.0}
    again = s.replace(prefix="other", lease=None)
    assert (again.prefix, again.lease) == ("other", 12.0) and s.prefix == "env"
    with pytest.raises(ConfigError, match="unknown settings: nope"):
        s.replace(nope=1)
    with pytest.raises(ConfigError, match="must be >= 1"):
        s.replace(concurrency=0)
    with pytest.raises(AttributeError):
        s.no_such_setting  # noqa: B018 - the attribute access is the test


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_an_empty_value_is_unset(setting, tmp_path):
    """``KEY=`` (a compose file, an EnvironmentFile) is unset: the default, or the config
    file's value under an empty environment variable. An empty on/off setting read as
    off (the event log and the kill of a job's children turned off), an empty prefix
    was the prefix '' (workers and producers split), an empty number an error."""
    for empty in ("", "  "):
        assert getattr(load_settings(environ={setting.env: empty}),
                       setting.name) == getattr(Settings(), setting.name)
    if isinstance(setting.default, bool):
        config = tmp_path / "fw.conf"
        config.write_text(f"{setting.env}={'0' if setting.default else '1'}\n")
        under = load_settings(str(config), environ={setting.env: ""})
        assert getattr(under, setting.name) is (not setting.default)   # the file's


@pytest.mark.parametrize("setting", [s for s in SETTINGS if isinstance(s.default, bool)],
                         ids=lambda s: s.name)
def test_a_boolean_takes_its_words_and_refuses_others(setting):
    assert getattr(load_settings(environ={setting.env: "off"}), setting.name) is False
    assert getattr(load_settings(environ={setting.env: "Yes"}), setting.name) is True
    with pytest.raises(ConfigError, match=setting.env):
        load_settings(environ={setting.env: "maybe"})


def test_the_constructor_of_before_still_works():
    s = Settings(values={"redis_url": "redis://127.0.0.1:1/0", "concurrency": 4})
    assert (s.redis_url, s.concurrency, s.lease) == ("redis://127.0.0.1:1/0", 4, 30.0)
    assert s.explicit == frozenset() and s.values == {"redis_url": "redis://127.0.0.1:1/0",
                                                      "concurrency": 4}
    assert Settings(values={"prefix": "x"}, explicit={"prefix"}).is_explicit("prefix")
    with pytest.raises(ConfigError, match="unknown settings: nope"):
        Settings(values={"nope": 1})


def test_repr_never_shows_a_secret():
    s = load_settings(environ={
        "REDIS_URL": "redis://user:hunter2@db:6379/0", "FUSIONWORKER_WEB_TOKEN": "tok-secret",
        "ELASTICSEARCH_PASSWORD": "es-secret", "ELASTICSEARCH_API_KEY": "key-secret",
        "FUSIONWORKER_WEB_PASSWORD_HASH": "pbkdf2_sha256$1$hash-secret$" + "A" * 43 + "=",
        "ELASTICSEARCH_URL": "https://elastic:url-secret@es:9200",
        "FAILURE_WEBHOOK_URL": "https://hooks.example.org/services/T0/B0/path-secret?t=q-secret"})
    text = repr(s)
    for secret in ("hunter2", "tok-secret", "es-secret", "key-secret", "hash-secret",
                   "url-secret", "path-secret", "q-secret"):
        assert secret not in text
    assert "redis://user:***@db:6379/0" in text and "https://elastic:***@es:9200" in text
    assert config.SECRETS <= {s.name for s in SETTINGS}


@pytest.mark.parametrize(("env", "value", "said"), [
    ("ELASTICSEARCH_URL", "http://esuser:es-s3cret@127.0.0.1:99999/path",
     "'http://esuser:***@127.0.0.1:99999/path': not a URL an HTTP client can use"),
    ("ELASTICSEARCH_URL", "es.example:9200", "must be an http:// or https:// URL"),
    ("FAILURE_WEBHOOK_URL", "ftp://hook:hook-s3cret@example.org/x?t=tok-s3cret",
     "FAILURE_WEBHOOK_URL=***: must be an http:// or https:// URL"),
    ("FAILURE_WEBHOOK_URL", "https://example.org:0x50/hook-s3cret", "FAILURE_WEBHOOK_URL=***"),
])
def test_a_url_no_http_client_can_use_is_refused_at_load_its_secrets_masked(env, value, said):
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={env: value})
    assert said in str(refused.value), str(refused.value)
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize("prefix", ["ops5 # staging", "app{x}", "a b", "x" * 65])
def test_a_prefix_that_is_no_plain_key_prefix_is_refused(prefix):
    """An inline comment of a settings file would become part of the prefix (systemd keeps
    it), and a brace would break the queues' hash tags: refused in one line."""
    with pytest.raises(ConfigError, match="FUSIONWORKER_PREFIX=.*use 1-64 characters"):
        load_settings(environ={"FUSIONWORKER_PREFIX": prefix})
    with pytest.raises(ConfigError):
        Settings().replace(prefix=prefix)
    assert load_settings(environ={"FUSIONWORKER_PREFIX": "app:fw-2.x_y"}).prefix == "app:fw-2.x_y"


def test_a_settings_files_typos_are_named_with_the_nearest_setting():
    said = config.unknown_keys({"FUSIONWORKER_JOB_TIMEOUTT": "30", "MEMORY_THROTLE_THRESHOLD": "5",
                                "FUSIONWORKER_NOPE": "1", "PYTHONPATH": "/x", "REDIS_URL": "u",
                                "FUSIONWORKER_PROCESSES": "2", "FUSIONWORKER_PREFIX": "fw"})
    assert said == [
        "FUSIONWORKER_JOB_TIMEOUTT is no setting of fusionworker (did you mean "
        "FUSIONWORKER_JOB_TIMEOUT?): ignored",
        "MEMORY_THROTLE_THRESHOLD is no setting of fusionworker (did you mean "
        "MEMORY_THROTTLE_THRESHOLD?): ignored",
        "FUSIONWORKER_NOPE is no setting of fusionworker: ignored"]


def test_typos_of_the_environment_are_named_and_env_only_variables_are_said_so():
    """A FUSIONWORKER_ variable no setting has was silently ignored in the environment
    (where a settings file's was said); FUSIONWORKER_DEBUG in a file read as "no setting"
    (found by a trial)."""
    said = config.unknown_environment({"FUSIONWORKER_CONCURENCY": "3", "PATH": "/bin",
                                       "REDIS_URI": "x", "FUSIONWORKER_DEBUG": "1",
                                       "FUSIONWORKER_PROCESSES": "2"})
    assert said == ["FUSIONWORKER_CONCURENCY is no setting of fusionworker (did you mean "
                    "FUSIONWORKER_CONCURRENCY?): ignored"]
    assert config.unknown_keys({"FUSIONWORKER_DEBUG": "1"}) == [
        "FUSIONWORKER_DEBUG is read from the environment only, not from a settings file: "
        "ignored"]
