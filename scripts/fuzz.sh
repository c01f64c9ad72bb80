#!/usr/bin/env bash
# Builds ember's libFuzzer targets (tests/fuzz) with clang + ASan + UBSan in build-fuzz/ and
# runs each for a bounded time, printing its executions and whether it crashed.
#   bash scripts/fuzz.sh [seconds per target, default 60] [target ...]
# Env: BUILD_DIR (default build-fuzz), JOBS (default nproc), RSS_MB (default 1024: an input
# that makes a loader allocate more is reported as a crash), CORPUS_DIR (default
# $BUILD_DIR/corpus; seeds are regenerated there, the corpus grows across runs).
# A crash leaves crash-*/leak-*/oom-*/timeout-* files in $BUILD_DIR/artifacts/<target>/:
# minimize with `<target> -minimize_crash=1 -runs=10000 <file>`, keep it in
# tests/fixtures/fuzz/<target>/, and tests/io/test_fuzz_regressions.cpp replays it in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_idx fuzz_safetensors fuzz_checkpoint fuzz_token_shards fuzz_tokenizer_files)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
RSS_MB=${RSS_MB:-1024}
CORPUS_DIR=${CORPUS_DIR:-$BUILD_DIR/corpus}

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2
  exit 2
fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  # fuzzer-no-link: coverage instrumentation for ember's own libraries too; -O1 as usual for
  # fuzzing (fast to build, still quick to run). The targets link only ember_io/ember_data,
  # so nn/optim/amp/examples/tests are not built. Static: each fuzz target is one binary with
  # its loader inside (clang links no sanitizer runtime into shared libraries).
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=None \
    -DEMBER_CUDA=OFF -DEMBER_FUZZ=ON -DEMBER_SANITIZE=ON -DEMBER_BENCH=OFF -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -g -fsanitize=fuzzer-no-link" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}" fuzz_make_seeds
"$BUILD_DIR/bin/fuzz_make_seeds" "$CORPUS_DIR" >/dev/null

# The harness's scratch files (one folder per process) go here, removed at the end.
export TMPDIR="$(cd "$BUILD_DIR" && pwd)/tmp"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for t in "${TARGETS[@]}"; do
  art="$BUILD_DIR/artifacts/$t"
  mkdir -p "$art" "$CORPUS_DIR/$t"
  log="$BUILD_DIR/$t.log"
  # Kept regression inputs join the run's seeds (read-only second corpus folder).
  extra=()
  [ -d "tests/fixtures/fuzz/$t" ] && extra=("tests/fixtures/fuzz/$t")
  echo "== $t: ${SECONDS_PER}s"
  set +e
  "$BUILD_DIR/bin/$t" "$CORPUS_DIR/$t" "${extra[@]}" -max_total_time="$SECONDS_PER" \
    -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$art/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  crashes=$(find "$art" -type f | wc -l)
  line="$t: executions=${execs:-?} cov=${cov:-?} rc=$rc artifacts=$crashes (log $log)"
  echo "$line"
  summary+=("$line")
  if [ $rc -ne 0 ]; then
    status=1
    grep -m5 -E 'ERROR|SUMMARY|Test unit written' "$log" || true
  fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
