#!/usr/bin/env bash
# Create .venvs/dev with pytest-gym (editable) and its test tools, and install Gym into
# .venvs/gym. Prints the gym executable's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venvs/dev/bin/python ]; then
  python3 -m venv .venvs/dev
fi
.venvs/dev/bin/python -m pip install -q --upgrade pip
.venvs/dev/bin/python -m pip install -q -e '.[test]'
bash scripts/install-gym.sh .venvs/gym | tail -n 1
