#!/bin/sh
# ctest's entry for a Python oracle: oracles/run.sh PYTHON SCRIPT [ARGS...]. A missing oracle venv
# is a failure that says how to install it, never a skip.
py=$1; shift
if [ ! -x "$py" ]; then
  echo "no oracle venv at $py: run tools/setup.sh --oracles (docs/oracles.md)" >&2
  exit 1
fi
exec "$py" "$@"
