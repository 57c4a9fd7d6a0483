"""``python -m fusionworker``: the ``fusionworker`` command (the same CLI)."""

from .cli import run

if __name__ == "__main__":  # pragma: no cover - the module is run, not imported
    run()
