#!/usr/bin/env bash
# Creates or updates one of the project's Python virtual environments from a requirements file
# with exact pins (called by scripts/setup.sh; safe to run by hand):
#   scripts/setup_python.sh VENV_DIR REQUIREMENTS_FILE
# Idempotent and fast when satisfied: VENV_DIR/.dualpath-stamp holds the SHA-256 of the
# requirements file, of the files it includes with -r/-c, and the interpreter's version; when it
# matches, nothing runs. Otherwise pip installs what is missing (the index is PyPI) and the stamp is
# rewritten only after pip succeeded, so an interrupted install is resumed by the next run.
# The interpreter is $DUALPATH_PYTHON, else `python3` (3.10 or newer; vLLM needs it).
set -euo pipefail
cd "$(dirname "$0")/.."

if (($# != 2)); then
  echo "usage: scripts/setup_python.sh VENV_DIR REQUIREMENTS_FILE" >&2
  exit 2
fi
venv=$1
req=$2
if [[ ! -f "$req" ]]; then
  echo "setup: requirements file '$req' not found" >&2
  exit 2
fi

python=${DUALPATH_PYTHON:-python3}
if ! pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null); then
  echo "setup: no Python interpreter '$python' (set DUALPATH_PYTHON)" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup: $python is Python $pyver; the project's venvs need 3.10 or newer" >&2
  exit 1
fi

# The requirements file and the files it pulls in (-r/-c lines, relative to it), in order.
req_files() {
  local f=$1 dir line
  dir=$(dirname "$f")
  echo "$f"
  while read -r line; do
    case "$line" in
      -r\ * | -c\ *) req_files "$dir/${line#-? }" ;;
    esac
  done <"$f"
}
stamp_value() {
  {
    echo "python $pyver"
    # shellcheck disable=SC2046  # the file list is made of paths without spaces
    sha256sum $(req_files "$req")
  } | sha256sum | cut -d' ' -f1
}

stamp_file=$venv/.dualpath-stamp
want=$(stamp_value)
if [[ -x "$venv/bin/python" && -f "$stamp_file" && "$(cat "$stamp_file")" == "$want" ]]; then
  echo "setup: $venv up to date ($req, Python $pyver)"
  exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating $venv with $python (Python $pyver)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
echo "setup: installing $req into $venv (a fresh venv takes minutes: torch and CUDA wheels)"
start=$SECONDS
"$venv/bin/python" -m pip install --quiet --progress-bar off --disable-pip-version-check \
  -r "$req"
echo "$want" >"$stamp_file"
echo "setup: $venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
