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
  # Bytecode: not all 19,000 modules (--compile-bytecode took most of the install's CPU), only what a Gym start
  # imports (about 4,000; 26 CPU-s), compiled once here even where PYTHONDONTWRITEBYTECODE is set, so that no Gym
  # process compiles it again at each start, nor the first processes of a start all at once.
  "$UV" pip install -q --python "$VENV/bin/python" \
    --python-version 3.13.14 "nemo-gym==$GYM_VERSION"
  env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c "import nemo_gym.cli.main, ray, fastapi, uvicorn, openai
import resources_servers.mcqa.app, responses_api_agents.simple_agent.app, responses_api_models.openai_model.app
import environment_servers.legacy_agent.app" >/dev/null 2>&1 ||
    echo "install-gym: compiling the bytecode of a Gym start failed; Python compiles it on import instead" >&2
fi
echo "$(cd "$VENV/bin" && pwd)/gym"
