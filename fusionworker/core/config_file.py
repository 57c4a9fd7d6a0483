"""The ``-c FILE`` settings file: ``KEY=VALUE`` lines (systemd's EnvironmentFile
format), and what in it looks like a setting but is none."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence

from .base_error import FusionWorkerError

#: Set by ``worker --processes N`` in its children's environment to the settings file
#: it read: the supervisor said that file's typos once, so its children do not say them
#: again (each child reads the same file; N + 1 copies of a warning is noise).
CHECKED_BY_PARENT = "FUSIONWORKER_CONFIG_CHECKED"


class ConfigError(FusionWorkerError, ValueError):
    """A setting has a value that cannot be used (``config.ConfigError``: defined here,
    where the settings file is read, so that config.py can import this module); a
    ``FusionWorkerError`` and a ``ValueError``."""


def read_config_file(path: str) -> dict[str, str]:
    """Read ``KEY=VALUE`` lines. ``-c instance`` also finds ``instance.env``."""
    candidates = [path] if os.path.splitext(path)[1] else [path, path + ".env"]
    for candidate in candidates:
        if os.path.isfile(candidate):
            break
    else:
        raise ConfigError(f"config file not found: {path}")
    values: dict[str, str] = {}
    with open(candidate, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("export "):
                line = line[len("export "):]
            key, sep, value = line.partition("=")
            if not sep:
                raise ConfigError(f"{candidate}:{lineno}: expected KEY=VALUE, got {raw.strip()!r}")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[key.strip()] = value
    return values


def unknown_keys(values: Mapping[str, str], known: Sequence[str]) -> list[str]:
    """What a settings file's keys look like but are not: a ``FUSIONWORKER_`` key no
    setting has, or another key close to a setting's name (a typo), each with the
    nearest name. Other keys (``PATH``, a key of another program) are not ours to judge."""
    # compared without the shared prefix (else every FUSIONWORKER_ key is "close")
    bare = {name.removeprefix("FUSIONWORKER_"): name for name in known}
    said = []
    for key in values:
        if key in known:
            continue
        near = [bare[n] for n in difflib.get_close_matches(
            key.removeprefix("FUSIONWORKER_"), bare, n=1, cutoff=0.8)]
        if near or key.startswith("FUSIONWORKER_"):
            hint = f" (did you mean {near[0]}?)" if near else ""
            said.append(f"{key} is no setting of fusionworker{hint}: ignored")
    return said
