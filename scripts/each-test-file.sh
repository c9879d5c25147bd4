#!/usr/bin/env bash
# Run every test file under tests/ alone (a test that passes only after another file ran hides a bug)
# and print the files that fail. Extra arguments go to each pytest run (default: -m "not gym").
# Usage: bash scripts/each-test-file.sh [PYTEST ARGS...]
#   PYTHON=/path/to/python picks the interpreter (default .venvs/dev/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venvs/dev/bin/python}
[ $# -gt 0 ] || set -- -m "not gym"
failed=()
mapfile -t files < <(find tests -name 'test_*.py' -not -path 'tests/data/*' | sort)
for file in "${files[@]}"; do
  log=$(mktemp)
  "$PYTHON" -m pytest -p no:cacheprovider -q "$@" "$file" >"$log" 2>&1
  rc=$?
  # 0: passed; 5: nothing selected (a file of Gym tests under -m "not gym")
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    failed+=("$file")
    echo "FAILED alone: $file (exit $rc)"
    grep -E '^(FAILED|ERROR) ' "$log" | head -n 20
  else
    echo "ok: $file ($(tail -n 1 "$log"))"
  fi
  rm -f "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "${#failed[@]} test file(s) fail when run alone: ${failed[*]}"
  exit 1
fi
echo "every test file passes alone"
