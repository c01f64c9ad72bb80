#!/usr/bin/env bash
# Set up and build ember on a Debian machine: installs the Debian packages that are missing
# (nothing else is downloaded; apt-get update runs only when something is missing), then
# configures and builds into build/ (scripts/build.sh). Idempotent: a second run installs
# nothing and rebuilds only what changed. Works as root (CI) or through sudo.
#
#   bash scripts/setup.sh
#   EMBER_SKIP_APT=1 bash scripts/setup.sh      # never touch packages, just build
#   (build options: see scripts/build.sh)
#
# libdnnl-dev is oneDNN 2.x, one of the CPU convolution backends (ops/cpu/onednn.h); like
# libonnx-dev and libpng-dev it is optional to the build (CMake goes without it).
# CUDA is not installed here: the build enables it by itself when nvcc is found
# (/usr/local/cuda/bin/nvcc or on PATH). npm is installed by scripts/fetch_data.sh, which
# alone needs it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/_common.sh"

packages=(build-essential cmake ninja-build ccache libeigen3-dev libgtest-dev googletest
          nlohmann-json3-dev libcli11-dev libopenmpi-dev openmpi-bin python3 python3-numpy zlib1g-dev
          libpcre2-dev libonnx-dev libprotobuf-dev libpng-dev libdnnl-dev)

if [[ "${EMBER_SKIP_APT:-0}" != 1 ]]; then
  if command -v dpkg-query >/dev/null 2>&1; then
    missing=()
    for p in "${packages[@]}"; do deb_installed "$p" || missing+=("$p"); done
    if ((${#missing[@]})); then
      apt_install "${missing[@]}"
    else
      log "all Debian packages present"
    fi
  else
    log "not a Debian system (no dpkg): skipping packages; need: ${packages[*]}"
  fi
fi

exec bash "$here/build.sh"
