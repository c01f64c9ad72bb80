#!/usr/bin/env bash
# Configure (Release; Ninja when present) and build ember into build/. Binaries land in
# build/bin/. Re-running rebuilds only what changed. Packages: scripts/setup.sh.
#
#   bash scripts/build.sh
#   EMBER_BUILD_DIR=out bash scripts/build.sh         # another build folder
#   EMBER_JOBS=4 bash scripts/build.sh                # parallel jobs (default: nproc)
#   EMBER_CMAKE_ARGS="-DEMBER_CUDA=OFF" bash scripts/build.sh   # extra configure flags
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/_common.sh"
cd "$here/.."

build_dir="${EMBER_BUILD_DIR:-build}"
read -r -a extra <<<"${EMBER_CMAKE_ARGS:-}"

if [[ -f "$build_dir/CMakeCache.txt" ]]; then
  # An existing tree keeps its generator; re-configuring is cheap and picks up new files.
  cmake -S . -B "$build_dir" "${extra[@]}" >/dev/null
else
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  log "configuring into $build_dir/"
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${extra[@]}"
fi
jobs="${EMBER_JOBS:-$(nproc 2>/dev/null || echo 2)}"
log "building with $jobs jobs"
start=$SECONDS
cmake --build "$build_dir" --parallel "$jobs"
log "built in $((SECONDS - start)) s: binaries in $build_dir/bin/"
