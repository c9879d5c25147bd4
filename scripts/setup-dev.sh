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
# No bytecode compiled here (compiling every module of these venvs took most of the installs' CPU): the scripts that
# run the venvs (test.sh, demo.sh) let Python cache the bytecode of what is imported, on its first import.
"$UV" pip install -q --python .venvs/dev/bin/python --upgrade -e '.[test]' >&2
echo "$GYM_CLI"
