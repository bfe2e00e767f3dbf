#!/usr/bin/env bash
# Installs every dependency of dualpath from Debian 12 packages.
# Idempotent: runs `apt-get update` at most once, and only when something is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang clang-format git
  # test and benchmark frameworks
  libgtest-dev libgmock-dev libbenchmark-dev
  # common libraries
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libssl-dev libxxhash-dev
  # data plane
  liburing-dev libucx-dev ucx-utils
  # control plane
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc etcd-server etcd-client
  # test vectors (vLLM-compatible hashing) and plots
  python3 python3-cbor2 gnuplot-nox
  # emulated cluster and baselines
  iproute2 glusterfs-server glusterfs-client fio psmisc procps util-linux
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

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} missing packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# glusterfs-server and etcd-server would start system services; the project starts its own
# daemons under its own state directories, so keep the package scripts from starting them.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
