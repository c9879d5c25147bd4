#!/usr/bin/env bash
# Install NeMo Gym 0.7.0 into its own Python 3.13 venv (Gym needs 3.13; the plugin does not).
#
# Usage: scripts/install-gym.sh [VENV_DIR]     (default: .venvs/gym)
# Prints the path of the `gym` executable on its last line.
# Offline-friendly: only the package registry is used; uv never downloads an interpreter.
set -euo pipefail

GYM_VERSION="${GYM_VERSION:-0.7.0}"
VENV="${1:-.venvs/gym}"
export UV_PYTHON_DOWNLOADS=never
HERE="$(cd "$(dirname "$0")" && pwd)"

if [ -x "$VENV/bin/gym" ] && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('nemo-gym') != '$GYM_VERSION')" 2>/dev/null; then
  echo "install-gym: nemo-gym $GYM_VERSION already in $VENV" >&2
else
  PY313=${GYM_PYTHON:-$(bash "$HERE/find-python.sh" 3.13)}
  UV=$(bash "$HERE/ensure-uv.sh")
  "$PY313" -m venv "$VENV"
  # Gym 0.5+ declares Requires-Python >=3.13.14, a packaging floor only: resolve as 3.13.14.
  # No --compile-bytecode: Python caches what Gym imports on its first import (with PYTHONDONTWRITEBYTECODE
  # unset, as scripts/test.sh and demo.sh run it); compiling all 19,000 modules took more CPU than the tests' Gyms.
  "$UV" pip install -q --python "$VENV/bin/python" \
    --python-version 3.13.14 "nemo-gym==$GYM_VERSION"
fi
echo "$(cd "$VENV/bin" && pwd)/gym"
