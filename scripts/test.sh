#!/usr/bin/env bash
# Install everything (plugin, test tools, NeMo Gym) and run lint, types and the whole test
# suite, the Gym tests included, inside a loopback-only network namespace.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
GYM_CLI=$(bash scripts/setup-dev.sh | tail -n 1)
export PYTEST_GYM_CLI="$GYM_CLI"
.venvs/dev/bin/ruff check pytest_gym tests conftest.py benchmarks
.venvs/dev/bin/mypy
exec scripts/netns-run .venvs/dev/bin/pytest -p no:cacheprovider -q -ra "$@"
