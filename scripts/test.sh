#!/usr/bin/env bash
# Install everything (plugin, test tools, NeMo Gym) and run lint, types (beside the tests) and the whole test
# suite, the Gym tests included, inside a loopback-only network namespace.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
#        bash scripts/test.sh --pythons   the tests that need no Gym, on the oldest supported setup
#                                         (Python 3.10, pytest 8.0: tox.ini's pytest-min), in a venv made here
# The main run uses .venvs/dev: Python 3.13 and the newest pytest (the newest supported setup), 2 test
# processes (TEST_WORKERS=N to change; -p no:xdist or -n 0 after the command for one).
# The test order is shuffled (pytest-randomly): the seed is printed first; SEED=N repeats an order,
# -p no:randomly keeps file order. Each run ends with its 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python caches the bytecode of what it imports (the installs compile nothing): the tests start hundreds of
# Python processes (pytest runs, xdist workers, Gym's servers), and where PYTHONDONTWRITEBYTECODE is set (this
# machine kind sets it) each would compile all it imports again, about 0.2 s of CPU each.
unset PYTHONDONTWRITEBYTECODE

# ORDER: pytest's arguments for a shuffled order with a printed seed (none when "$@" turns pytest-randomly off).
ORDER=(-p randomly "--randomly-seed=${SEED:-$((RANDOM * 32768 + RANDOM))}")
for arg in "$@"; do
  [[ $arg == *no:randomly* ]] && ORDER=()
done
echo "test order: ${ORDER[*]:-as in the files}"

# Test processes: 2 (TEST_WORKERS=N to change). CI's run is CPU-bound as a whole: the real-Gym tests are mostly
# Gym starting, and the oldest setup's leg fills what the short tests leave idle. A third worker ran the main
# run no faster in a fresh-clone CI (855 s; with two: 851 s and 879 s), and the oldest leg beside it took
# 793 s instead of 345 s.
# worksteal: a worker that runs out of tests takes some from another's (a few real-Gym tests take minutes).
WORKERS=(-n "${TEST_WORKERS:-2}" --dist worksteal)
for arg in "$@"; do
  [[ $arg == *no:xdist* ]] && WORKERS=()
done

# run_on NAME VERSION PIP-REQUIREMENTS...: a venv .venvs/NAME with the plugin (editable), its test-core tools and
# the given pins, then the tests that need no Gym: tests/unit (every module on that Python) and tests/session (the
# plugin driven through that pytest, where pytest versions differ; most of the time), without what is the same
# under any pytest and Python (markers simulation, runtime, browser; pyproject.toml says why for each), and without
# the -n 2 twins of tests whose other case makes the same run without xdist (xdist_twin: the tests about xdist
# itself run here; every twin runs on the newest setup).
# tests/gym runs on the main setup only: Gym itself runs on its own Python 3.13 whatever runs pytest.
run_on() {
  local name=$1 version=$2 python venv=.venvs/$1 uv
  shift 2
  python=$(bash scripts/find-python.sh "$version")
  uv=$(bash scripts/ensure-uv.sh)
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$uv" pip install -q --python "$venv/bin/python" --upgrade -e '.[test-core]' "$@" >&2
  echo "== $name: $("$venv/bin/python" -c 'import platform, pluggy, pytest
print("Python", platform.python_version(), "pytest", pytest.__version__, "pluggy", pluggy.__version__)')"
  "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra --durations=15 -m "not gym and not simulation and not runtime and not browser and not xdist_twin" "${WORKERS[@]}" "${ORDER[@]}"
}

# The main run below is the newest setup (Python 3.13, the newest pytest); this is the oldest one.
if [ "${1:-}" = "--pythons" ]; then
  run_on py310-pytest-min 3.10 'pytest==8.0.*' 'pluggy==1.5.*'
  exit 0
fi

GYM_CLI=$(bash scripts/setup-dev.sh | tail -n 1)
export PYTEST_GYM_CLI="$GYM_CLI"
.venvs/dev/bin/ruff check pytest_gym tests conftest.py benchmarks
# Types are checked beside the tests (one process, about 25 s on a fresh clone), their verdict printed after the tests'.
types=$(mktemp)
.venvs/dev/bin/mypy >"$types" 2>&1 &
mypy=$!
trap 'kill $mypy 2>/dev/null || true; rm -f "$types"' EXIT
tests=0
scripts/netns-run .venvs/dev/bin/pytest -p no:cacheprovider -q -ra --durations=15 "${WORKERS[@]}" "${ORDER[@]}" "$@" || tests=$?
checked=0
wait "$mypy" || checked=$?
echo "mypy (pytest_gym, strict): $(cat "$types")"
[ "$checked" = 0 ] || { echo "the type check failed (status $checked)" >&2; exit 1; }
exit "$tests"
