#!/usr/bin/env bash
# Run the whole test suite of an existing build (scripts/setup.sh builds it) with ctest.
# CUDA tests skip at run time without a GPU, so the same suite runs in CI and on a GPU.
#
#   bash scripts/test.sh                  # everything, 2 tests at a time
#   bash scripts/test.sh -R Autograd      # extra arguments go to ctest
#   EMBER_BUILD_DIR=out EMBER_TEST_JOBS=8 bash scripts/test.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/_common.sh"
cd "$here/.."

build_dir="${EMBER_BUILD_DIR:-build}"
if [[ ! -f "$build_dir/CTestTestfile.cmake" ]]; then
  log "error: no build in $build_dir/ (run: bash scripts/setup.sh)" >&2
  exit 1
fi
start=$SECONDS
status=0
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 \
      -j "${EMBER_TEST_JOBS:-2}" "$@" || status=$?
log "tests finished in $((SECONDS - start)) s (exit $status)"
exit "$status"
