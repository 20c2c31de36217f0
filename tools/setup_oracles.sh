#!/usr/bin/env bash
# Creates build/oracle-venv, the virtual environment the build owns, with the pinned test-only
# oracles of oracles/requirements.txt. Idempotent: a stamp holding the requirements' hash makes a
# second run a no-op (well under a second). Never touches the system Python.
# The file's last section ("# --- transformers 4.x", lines "#4.57 PIN") goes, without the venv's
# own install, into build/oracle-venv/transformers-4.57.1 (`pip install --no-deps --target`): the
# structure oracle's transformers 4.57.1 run puts that folder first on PYTHONPATH (docs/oracles.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/build/oracle-venv"
req="$here/oracles/requirements.txt"
marker='^# --- transformers 4\.x'
# The venv's stamp hashes the file above the 4.x section (the whole file before that section was
# added, so existing venvs stay valid); the 4.x folder has its own stamp.
main_req=$(sed "/$marker/,\$d" "$req")
v4_req=$(sed -n "/$marker/,\$p" "$req" | sed -n 's/^#4\.57 //p')
v4_dir="$venv/transformers-4.57.1"
stamp="$venv/.hookstream-requirements.sha256"
v4_stamp="$v4_dir/.hookstream-requirements.sha256"
want=$(printf '%s\n' "$main_req" | sha256sum | cut -d' ' -f1)
v4_want=$(printf '%s\n' "$v4_req" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
   [ "$(cat "$v4_stamp" 2>/dev/null)" = "$v4_want" ]; then
  exit 0
fi
if ! [ -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
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
  "$venv/bin/pip" install -q --no-input -r <(printf '%s\n' "$main_req")
  echo "$want" > "$stamp"
fi
if [ "$(cat "$v4_stamp" 2>/dev/null)" != "$v4_want" ]; then
  echo "hookstream setup: installing transformers 4.57.1 into $v4_dir (about 135 MB, 20 s)"
  rm -rf "$v4_dir"
  # --no-deps: only the pinned lines; everything else comes from the venv (its torch and PEFT).
  "$venv/bin/pip" install -q --no-input --no-deps --target "$v4_dir" -r <(printf '%s\n' "$v4_req")
  echo "$v4_want" > "$v4_stamp"
fi
