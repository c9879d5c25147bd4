#!/usr/bin/env bash
# Install everything (plugin, test tools, NeMo Gym) and run lint, types and the whole test
# suite, the Gym tests included, inside a loopback-only network namespace.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
#        bash scripts/test.sh --pythons   the tests that need no Gym on the oldest and the newest supported
#                                         setup (tox.ini's pytest-min and pytest-latest), in venvs made here
# The test order is shuffled (pytest-randomly): the seed is printed first; SEED=N repeats an order,
# -p no:randomly keeps file order.
set -euo pipefail
cd "$(dirname "$0")/.."

# ORDER: pytest's arguments for a shuffled order with a printed seed (none when "$@" turns pytest-randomly off).
ORDER=(-p randomly "--randomly-seed=${SEED:-$((RANDOM * 32768 + RANDOM))}")
for arg in "$@"; do
  [[ $arg == *no:randomly* ]] && ORDER=()
done
echo "test order: ${ORDER[*]:-as in the files}"

# An interpreter of Python VERSION (3.10): pyenv's newest such version, else pythonVERSION on PATH.
find_python() {
  local version=$1 dir found
  if command -v pyenv >/dev/null; then
    for dir in $(ls -d "$(pyenv root)/versions/$version".* 2>/dev/null | sort -V -r); do
      if [ -x "$dir/bin/python" ]; then echo "$dir/bin/python"; return 0; fi
    done
  fi
  found=$(command -v "python$version" || true)
  if [ -n "$found" ] && "$found" -c 'import sys' 2>/dev/null; then echo "$found"; return 0; fi
  echo "scripts/test.sh: no Python $version here (pyenv install $version, or put python$version on PATH)" >&2
  return 1
}

# run_on NAME VERSION PIP-REQUIREMENTS...: a venv .venvs/NAME with the plugin (editable) and the test tools but
# mlflow (a large install; its tests skip there), then the tests that need no Gym.
run_on() {
  local name=$1 version=$2 python venv=.venvs/$1
  shift 2
  python=$(find_python "$version")
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade -e . "$@" pytest-xdist 'httpx>=0.27' 'hypothesis>=6.100' \
    'xmlschema>=3.0' pytest-randomly 'cryptography>=42'
  echo "== $name: $("$venv/bin/python" -c 'import platform, pluggy, pytest
print("Python", platform.python_version(), "pytest", pytest.__version__, "pluggy", pluggy.__version__)')"
  # CI unset: what this setup lacks on purpose (mlflow) skips here; the main run is the one that must run all.
  env -u CI "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra -m "not gym" "${ORDER[@]}"
}

if [ "${1:-}" = "--pythons" ]; then
  run_on py310-pytest-min 3.10 'pytest==8.0.*' 'pluggy==1.5.*'
  run_on py313-pytest-latest 3.13 pytest pluggy
  exit 0
fi

GYM_CLI=$(bash scripts/setup-dev.sh | tail -n 1)
export PYTEST_GYM_CLI="$GYM_CLI"
.venvs/dev/bin/ruff check pytest_gym tests conftest.py benchmarks
.venvs/dev/bin/mypy
exec scripts/netns-run .venvs/dev/bin/pytest -p no:cacheprovider -q -ra "${ORDER[@]}" "$@"
