#!/usr/bin/env bash
# Install NeMo Gym 0.7.0 into its own Python 3.13 venv (Gym needs 3.13; the plugin does not).
#
# Usage: scripts/install-gym.sh [VENV_DIR]     (default: .venvs/gym)
# Prints the path of the `gym` executable on its last line.
# Offline-friendly: only the package registry is used; uv never downloads an interpreter.
set -euo pipefail

GYM_VERSION="${GYM_VERSION:-0.7.0}"
VENV="${1:-.venvs/gym}"
TOOLS="${GYM_TOOLS_VENV:-.venvs/tools}"
export UV_PYTHON_DOWNLOADS=never

find_py313() {
  if [ -n "${GYM_PYTHON:-}" ]; then echo "$GYM_PYTHON"; return; fi
  if command -v pyenv >/dev/null 2>&1; then
    local v
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.|$)' | sort -V | tail -n1 || true)
    if [ -n "$v" ]; then PYENV_VERSION="$v" pyenv which python; return; fi
  fi
  command -v python3.13 || { echo "install-gym: no Python 3.13 found (set GYM_PYTHON)" >&2; exit 1; }
}

if [ -x "$VENV/bin/gym" ] && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('nemo-gym') != '$GYM_VERSION')" 2>/dev/null; then
  echo "install-gym: nemo-gym $GYM_VERSION already in $VENV" >&2
else
  PY313=$(find_py313)
  if [ ! -x "$TOOLS/bin/uv" ]; then
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q uv
  fi
  "$PY313" -m venv "$VENV"
  # Gym 0.5+ declares Requires-Python >=3.13.14, a packaging floor only: resolve as 3.13.14.
  "$TOOLS/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" \
    --python-version 3.13.14 "nemo-gym==$GYM_VERSION"
fi
echo "$(cd "$VENV/bin" && pwd)/gym"
