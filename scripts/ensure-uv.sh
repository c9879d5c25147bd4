#!/usr/bin/env bash
# Print the path of uv, installing it from the package registry into .venvs/tools (or $GYM_TOOLS_VENV)
# first if it is not there. uv installs in seconds what pip installs in minutes.
set -euo pipefail
TOOLS="${GYM_TOOLS_VENV:-.venvs/tools}"
if [ ! -x "$TOOLS/bin/uv" ]; then
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q uv >&2
fi
echo "$(cd "$TOOLS/bin" && pwd)/uv"
