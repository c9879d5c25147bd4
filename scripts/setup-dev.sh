#!/usr/bin/env bash
# Install NeMo Gym into .venvs/gym and create .venvs/dev with pytest-gym (editable) and its test tools,
# on Python 3.13 with the newest pytest (the newest supported setup; `scripts/test.sh --pythons` covers
# the oldest). $DEV_PYTHON picks another interpreter. Prints the gym executable's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
GYM_CLI=$(bash scripts/install-gym.sh .venvs/gym | tail -n 1)
UV=$(bash scripts/ensure-uv.sh)
PYTHON=${DEV_PYTHON:-$(bash scripts/find-python.sh 3.13)}
want=$("$PYTHON" -c 'import sys; print(sys.version_info[:2])')
if [ -x .venvs/dev/bin/python ] && [ "$(.venvs/dev/bin/python -c 'import sys; print(sys.version_info[:2])')" != "$want" ]; then
  rm -rf .venvs/dev  # made by an earlier version of this script with another Python
fi
[ -x .venvs/dev/bin/python ] || "$PYTHON" -m venv .venvs/dev
# Bytecode: not every module (--compile-bytecode took most of the install's CPU), only what every pytest run of
# the plugin imports, compiled once here even where PYTHONDONTWRITEBYTECODE is set; test.sh and demo.sh cache the rest.
"$UV" pip install -q --python .venvs/dev/bin/python --upgrade -e '.[test]' >&2
env -u PYTHONDONTWRITEBYTECODE .venvs/dev/bin/python -c "import pytest, xdist, pytest_gym.plugin" >&2
env -u PYTHONDONTWRITEBYTECODE .venvs/dev/bin/python -m compileall -q pytest_gym >&2  # the editable install's own sources
echo "$GYM_CLI"
