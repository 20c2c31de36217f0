#!/usr/bin/env bash
# Creates build/oracle-venv, the virtual environment the build owns, with the pinned test-only
# oracles of oracles/requirements.txt. Idempotent: a stamp holding the requirements' hash makes a
# second run a no-op (well under a second). Never touches the system Python.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/build/oracle-venv"
req="$here/oracles/requirements.txt"
stamp="$venv/.hookstream-requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -m venv --help >/dev/null 2>&1; then
  # Debian's own python3 needs python3-venv for `-m venv`.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
  py=$(command -v python3)
fi
echo "hookstream setup: installing the Python oracles into $venv (about 5 GB, 1-2 minutes)"
rm -rf "$venv"
mkdir -p "$here/build"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --no-input -r "$req"
echo "$want" > "$stamp"
