#!/usr/bin/env python3
"""Entry point: ``python run_worker.py <command>`` (same as the ``fusionworker`` command)."""

from fusionworker.cli import main

if __name__ == "__main__":
    main(prog_name="run_worker.py")
