"""``@job`` on a function of a script run as ``__main__``: one line saying why (the worker
imports a job's function by module name) and what to do, not "not module-level"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_job_in_a_script_run_as_main_is_explained(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("from fusionworker import job\n\n@job\ndef send():\n    return 1\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "defined in the script being run (__main__)" in last and "python -m" in last
