"""The base class of fusionworker's own errors, re-exported by ``fusionworker.exceptions``.

It lives here, under every other module, so that the errors of modules that
``fusionworker.exceptions`` itself imports (``config_file.ConfigError``) derive from it
too: ``except FusionWorkerError`` catches every error fusionworker raises for a bad
call, a bad setting included.
"""

from __future__ import annotations


class FusionWorkerError(Exception):
    """Base class of fusionworker's own errors."""

    __module__ = "fusionworker.exceptions"   # where users import it from (and pickle finds it)
