#!/usr/bin/env bash
# Install pytest-gym and NeMo Gym, then run the example eval suite (examples/mcqa) against a
# real Gym with the built-in scripted policy as the model: no credentials needed.
# Usage: bash scripts/demo.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
GYM_CLI=$(bash scripts/setup-dev.sh | tail -n 1)
cd examples/mcqa
exec ../../scripts/netns-run ../../.venvs/dev/bin/pytest "--gym-cli=$GYM_CLI" --junitxml report.xml "$@"
