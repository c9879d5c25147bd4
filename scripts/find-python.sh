#!/usr/bin/env bash
# Print the path of a Python VERSION interpreter (e.g. 3.13): $PYTHON_<VERSION without dot> if set
# (PYTHON_313), else pyenv's newest such version, else pythonVERSION on PATH. Never downloads one.
# Usage: scripts/find-python.sh VERSION
set -euo pipefail
version=$1
override="PYTHON_${version//./}"
if [ -n "${!override:-}" ]; then echo "${!override}"; exit 0; fi
if command -v pyenv >/dev/null; then
  for dir in $(ls -d "$(pyenv root)/versions/$version".* 2>/dev/null | sort -V -r); do
    if [ -x "$dir/bin/python" ]; then echo "$dir/bin/python"; exit 0; fi
  done
fi
found=$(command -v "python$version" || true)
if [ -n "$found" ] && "$found" -c 'import sys' 2>/dev/null; then echo "$found"; exit 0; fi
echo "no Python $version here (pyenv install $version, put python$version on PATH, or set $override)" >&2
exit 1
