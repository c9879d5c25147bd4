#!/usr/bin/env bash
# Install pytest-gym and NeMo Gym, then run the example eval suite (examples/mcqa) against a
# real Gym with the built-in scripted policy as the model: no credentials needed.
#
# The policy answers \boxed{E}; the 5 rows expect B, C, I, E, E, so with 2 repeats 4 trials pass
# and 6 fail, which is the demo's point: pytest's exit code 1 ("some tests failed") is the expected
# outcome and this script then exits 0. Any other failure (usage, Gym not starting) exits non-zero.
# Usage: bash scripts/demo.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE  # the venvs' bytecode is cached on first import (scripts/test.sh says why)
GYM_CLI=$(bash scripts/setup-dev.sh | tail -n 1)
cd examples/mcqa
set +e
../../scripts/netns-run ../../.venvs/dev/bin/pytest "--gym-cli=$GYM_CLI" --junitxml report.xml -rA -p no:randomly "$@"
status=$?
set -e
if [ "$status" -eq 0 ] || [ "$status" -eq 1 ]; then
  echo "demo: finished (pytest exit code $status); JUnit: examples/mcqa/report.xml, run folders (each with report.html): examples/mcqa/.pytest_gym/runs/"
  exit 0
fi
exit "$status"
