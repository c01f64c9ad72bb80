#!/usr/bin/env bash
# One call on the lent GPU machine that proves as much as its minutes allow, GPU-only work
# first. Prepare here (../shared/device/README.md: fetch the data, `bash ../shared/device/pack.sh`),
# then run on the device, carrying .device:
#
#   run (carry [".device"], timeout_s 600):  bash scripts/gpu_run.sh [PHASES] [-- CTEST_ARGS...]
#
# PHASES, comma-separated, default build,test,rest,train,bench,sanitize, in this order:
#   build     configure + build build-gpu/ (only what the phases run), every core; incremental
#             while the machine stays warm
#   test      ctest on the tests that touch the GPU (names: Cuda, NCCL, Devices/, graphs ... the
#             regex below). CTEST_ARGS replace the GPU regex (e.g. -- -R Flash).
#   rest      the rest of the suite (CPU tests, proven in CI) beside the train phase on spare cores
#   train     real runs: MNIST MLP (eager, --cuda-graph, fp16 + GradScaler), CNN in bf16;
#             gpt2-small in bf16 (30 steps), --cuda-graph, --recompute, --ddp as a world of one;
#             ResNet (on MNIST's digits), the character LSTM, llama-100m in bf16.
#             GPU_RUN_TRAIN="name ..." runs only those (names: the step names below)
#   bench     bench/run_all.sh --gpu (ember against the machine's PyTorch, same run);
#             GPU_RUN_BENCH=row,row passes --only (run_all.sh's row names)
#   sanitize  compute-sanitizer memcheck and racecheck, one step per binary or suite, while time
#             lasts (the defaults: what no card has sanitized yet; see the phase below)
# No phase starts after GPU_RUN_BUDGET_S (default 540) seconds, and no step runs past it.
# Back in $OUT: summary.txt (read it first), logs.tar.gz (every log: the device returns only a
# handful of files, so everything else travels in the one archive), ctest-gpu-junit.xml (the
# output of every failed test), bench-results.json.
# Spend a call on what no card has proven yet: e.g. the second run (2026-11-27) used
#   GPU_RUN_TRAIN="gpt2-small-recompute resnet char-lstm llama" GPU_RUN_BENCH=matmul,mnist-mlp,...
# Written after the first GPU run (2026-11-27), which lost its failing tests' logs to the file
# count limit and two benchmarks to a SIGPIPE in `ninja -t targets | grep -q` under pipefail.
set -uo pipefail
start=$SECONDS
budget=${GPU_RUN_BUDGET_S:-540}
phases=${1:-build,test,rest,train,bench,sanitize}; [[ $# -gt 0 ]] && shift
[[ ${1:-} == -- ]] && shift
ctest_filter=("$@")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/gpu-run-out}; mkdir -p "$out"
logs=/tmp/gpu-run-logs; rm -rf "$logs"; mkdir -p "$logs"
sum=$out/summary.txt; : > "$sum"
say() { echo "$*" | tee -a "$sum"; }
have() { [[ ",$phases," == *",$1,"* ]]; }
train_wanted() { [[ -z ${GPU_RUN_TRAIN:-} || " $GPU_RUN_TRAIN " == *" $1 "* ]]; }
time_left() { (( SECONDS - start < budget )); }
pack_logs() { tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null; }
trap pack_logs EXIT  # also when the step in flight is killed: the archive is what comes back
step() {  # step NAME TIMEOUT_S CMD...: CMD under a timeout, logged to $logs/NAME.log, one summary line
  local name=$1 limit=$2; shift 2
  if ! time_left; then say "SKIP $name (budget of ${budget}s spent)"; return 99; fi
  local t0=$SECONDS rc left=$((budget + 15 - (SECONDS - start)))
  (( limit > left )) && limit=$left
  timeout --kill-after=5 "$limit" "$@" > "$logs/$name.log" 2>&1; rc=$?
  say "$( ((rc == 0)) && echo PASS || { ((rc == 124)) && echo "TIMEOUT ${limit}s" || echo "FAIL rc=$rc"; } ) $name ($((SECONDS - t0)) s, at $((SECONDS - start)) s)"
  return $rc
}

[[ -f .device/env.sh ]] || { say "no .device/env.sh: run bash ../shared/device/pack.sh here first and carry .device"; exit 2; }
source .device/env.sh > "$logs/env.log" 2>&1
say "gpu_run $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
say "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || echo none)"
say "$(grep -m1 '^env.sh:' "$logs/env.log")"
say "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' 2>&1 | tail -1); $(nvcc --version 2>&1 | tail -1); $(nproc) cpus"
nvidia-smi > "$logs/nvidia-smi.log" 2>&1
B=build-gpu
bin=$B/bin

# ---- build: the tests and what the other phases run (the full tree builds with EMBER_GPU_BUILD_ALL=1)
if have build || [[ ! -x $bin/test_core ]]; then
  [[ -f $B/build.ninja ]] || step configure 120 cmake -S . -B $B -G Ninja $EMBER_DEVICE_CMAKE_ARGS \
    || tail -30 "$logs/configure.log" >> "$sum"
  targets=()
  if [[ ${EMBER_GPU_BUILD_ALL:-0} != 1 ]]; then
    all_targets=$(ninja -C $B -t targets all 2>/dev/null)  # once, into a variable: no pipe to break
    mapfile -t targets < <(sed -n 's/^\(test_[a-z_]*\): phony$/\1/p' <<< "$all_targets")
    for t in mnist gpt ember_info bench_gpt bench_attention bench_generate bench_mnist bench_matmul \
             bench_bandwidth bench_allocator bench_pathological bench_resnet bench_norm bench_sort cublas_gemm; do
      grep -q "^$t: phony" <<< "$all_targets" && targets+=("$t")
    done
    targets=(--target "${targets[@]}")
  fi
  step build 300 cmake --build $B -j"$(nproc)" "${targets[@]}" -- -k 0 \
    || grep -m30 -E 'error|FAILED' "$logs/build.log" >> "$sum"
fi

# ---- the tests that touch the GPU, first
gpu_re='[Cc]uda|CUDA|Nccl|NCCL|Gpu|GPU|DDP|Ddp|Devices/|Flash|CublasLt|Graph|PinMemory|Deferred|Capturable|DeviceChoice|TestSupport|EmberInfo|Distributed|IndexErrors|Expanded|FloatToInteger|AttentionBudget|Fused|Foreach|Pretrained|CausalLMTorch|LargeTensors|Toolchain|Profiler|Determinis'
select=(-R "$gpu_re")
((${#ctest_filter[@]})) && select=("${ctest_filter[@]}")
if have test && [[ -f $B/CTestTestfile.cmake ]]; then
  say "test selects: $(ctest --test-dir $B -N "${select[@]}" 2>/dev/null | tail -1)"
  step ctest-gpu 260 ctest --test-dir $B -j8 --timeout 200 --output-on-failure \
       --output-junit "$out/ctest-gpu-junit.xml" "${select[@]}"
  grep -E '% tests passed|tests failed out of' "$logs/ctest-gpu.log" | tail -1 | tee -a "$sum"
  say "skipped: $(grep -c '\*\*\*Skipped' "$logs/ctest-gpu.log")"
  sed -n '/The following tests FAILED/,$p' "$logs/ctest-gpu.log" | head -60 >> "$sum"
fi

# ---- real runs on the GPU, the CPU rest of the suite beside them
rest_pid=
if have rest && ((${#ctest_filter[@]} == 0)) && [[ -f $B/CTestTestfile.cmake ]] && time_left; then
  ( timeout --kill-after=5 150 ctest --test-dir $B -j5 --timeout 140 --output-on-failure \
        -E "$gpu_re|install\.find_package" > "$logs/ctest-rest.log" 2>&1 ) &
  rest_pid=$!
fi
if have train && [[ -x $bin/mnist ]]; then
  run() { local name=$1; shift; train_wanted "$name" && step "$name" "$@"; }  # run NAME TIMEOUT CMD...
  run ember-info 30 "$bin/ember-info"
  run mnist-mlp 60 "$bin/mnist" --device cuda --model mlp --epochs 1 --out /tmp/runs/mlp
  run mnist-mlp-graph 60 "$bin/mnist" --device cuda --model mlp --epochs 1 --cuda-graph --out /tmp/runs/mlpg
  run mnist-mlp-fp16 60 "$bin/mnist" --device cuda --model mlp --epochs 1 --amp fp16 --out /tmp/runs/mlp16
  run mnist-cnn-bf16 90 "$bin/mnist" --device cuda --model cnn --epochs 1 --amp bf16 --out /tmp/runs/cnn
  gpt_args=(--preset gpt2-small --device cuda --amp bf16 --batch-size 16 --seq-len 1024 --total-batch-tokens 16384)
  short=(--steps 12 --eval-every 0 --sample-every 0 --log-every 1)
  run gpt2-small 120 "$bin/gpt" "${gpt_args[@]}" --steps 30 --log-every 5 --out /tmp/runs/gpt
  run gpt2-small-graph 60 "$bin/gpt" "${gpt_args[@]}" "${short[@]}" --cuda-graph --out /tmp/runs/gptg
  run gpt2-small-recompute 60 "$bin/gpt" "${gpt_args[@]}" "${short[@]}" --recompute --out /tmp/runs/gptr
  run gpt2-small-ddp1 60 "$bin/gpt" "${gpt_args[@]}" "${short[@]}" --ddp --out /tmp/runs/gptd
  # The other examples on the card: ResNet on the MNIST digits (Fashion-MNIST is not carried;
  # the same IDX format), the character LSTM on the Brown corpus, Llama in bf16.
  run resnet 90 "$bin/resnet" --device cuda --amp bf16 --data data/mnist --limit 10000 --epochs 1 --workers 2
  run char-lstm 60 "$bin/char_lstm" --device cuda --steps 200 --eval-every 100 --sample 200
  run llama 90 "$bin/gpt" --arch llama --preset llama-100m --device cuda --amp bf16 --batch-size 16 \
      --seq-len 512 --total-batch-tokens 16384 --steps 20 --log-every 5 --eval-every 0 --sample-every 0 --out /tmp/runs/llama
  for f in mnist-mlp mnist-mlp-graph mnist-mlp-fp16 mnist-cnn-bf16 gpt2-small gpt2-small-graph gpt2-small-recompute \
           gpt2-small-ddp1 resnet char-lstm llama; do
    [[ -f $logs/$f.log ]] && { printf '%s: ' "$f"; grep -E '^result: ' "$logs/$f.log" | tail -1 || tail -3 "$logs/$f.log"; } | cut -c1-600 | tee -a "$sum"
  done
  # Whether the loss fell: each run's metrics.csv (step, loss, ...), first and last rows.
  for d in mlp mlpg mlp16 cnn gpt gptg gptr gptd llama; do
    [[ -f /tmp/runs/$d/metrics.csv ]] || continue
    cp /tmp/runs/$d/metrics.csv "$logs/metrics-$d.csv"
    printf 'metrics %s: %s\n' "$d" "$(sed -n '2p;$p' /tmp/runs/$d/metrics.csv | cut -d, -f1-3 | tr '\n' ' ')" >> "$sum"
  done
fi
if [[ -n $rest_pid ]]; then
  wait "$rest_pid"; say "ctest-rest rc=$? (CPU tests beside the runs; cut at 150 s)"
  grep -E '% tests passed|tests failed out of' "$logs/ctest-rest.log" | tail -1 | tee -a "$sum"
  grep -E '\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout' "$logs/ctest-rest.log" | head -40 >> "$sum"
fi

# ---- benchmarks against the machine's PyTorch
if have bench && [[ -x $bin/bench_gpt ]]; then
  # Its per-run logs land in $logs (the archive), never loose in $OUT.
  only=(); [[ -n ${GPU_RUN_BENCH:-} ]] && only=(--only "$GPU_RUN_BENCH")
  step bench 420 bash bench/run_all.sh --gpu --bin "$bin" --out "$logs/bench-results.json" "${only[@]}"
  cp "$logs/bench-results.json" "$out/" 2>/dev/null
  grep -h '^result: ' "$logs"/bench-results.json.logs/*.log 2>/dev/null | cut -c1-600 >> "$sum"
fi

# ---- compute-sanitizer on the CUDA cases, while time lasts (API errors provoked on purpose,
# such as the impossible allocation, show as "Program hit"; only kernel errors and hazards count)
# Each binary / suite in its own step with its own timeout: one slow suite under the sanitizer
# (racecheck runs these tests ~50x slower) costs only itself. The lists default to what no card
# has sanitized yet; GPU_RUN_MEMCHECK="binary ..." and GPU_RUN_RACECHECK="binary:filter[:seconds] ..."
# choose. Proven so far (docs/gpu-status.md): memcheck over the CUDA cases of every test binary
# (test_distributed's NCCL cases on the third run: its only reports are NCCL's own probes,
# cudaFuncGetAttributes answering "no kernel image" inside libnccl); racecheck over every CUDA
# test case (the fourth run, 2026-11-28, finished SortScanCuda and test_nn): 0 hazards in
# ember's kernels.
if have sanitize && [[ -x $bin/test_ops ]]; then
  # The tests that provoke CUDA API errors on purpose run apart (tests/sanitizer/cuda_provoked_errors.txt).
  provoked_list=$(sed -e '/^#/d' -e '/^[[:space:]]*$/d' -e 's/[[:space:]].*//' tests/sanitizer/cuda_provoked_errors.txt)
  provoked=$(paste -sd: <<< "$provoked_list")
  cuda_cases="*Cuda*:*cuda*:*Nccl*:-*LargeTensors*:*MatchesCpuContiguous*:$provoked"
  for t in ${GPU_RUN_MEMCHECK:-}; do
    step "memcheck-$t" 90 compute-sanitizer --tool memcheck "$bin/$t" --gtest_filter="$cuda_cases" || true
    printf 'memcheck-%s: %s tests OK, %s kernel memory errors, %s API errors (in: %s); %s\n' "$t" \
      "$(grep -c '^\[       OK \]' "$logs/memcheck-$t.log")" \
      "$(grep -cE 'Invalid (global|shared|local)|Misaligned|Out of range' "$logs/memcheck-$t.log")" \
      "$(grep -c 'Program hit' "$logs/memcheck-$t.log")" \
      "$(grep -A3 'Program hit' "$logs/memcheck-$t.log" | grep -o 'in lib[a-z0-9_.]*' | grep -v libcuda | sort | uniq -c | tr -s ' ' | paste -sd, || true)" \
      "$(grep -m1 'ERROR SUMMARY' "$logs/memcheck-$t.log" || echo 'no summary (cut short)')" >> "$sum"
  done
  # Their API errors are expected; a kernel's invalid access is not (death tests left out: they fork).
  step memcheck-provoked 60 compute-sanitizer --tool memcheck "$bin/test_core" \
       --gtest_filter="$(grep -v DeathTest <<< "$provoked_list" | paste -sd:)" || true
  printf 'memcheck-provoked: %s kernel memory errors (API errors provoked on purpose: %s)\n' \
    "$(grep -cE 'Invalid (global|shared|local)|Misaligned|Out of range' "$logs/memcheck-provoked.log")" \
    "$(grep -c 'Program hit' "$logs/memcheck-provoked.log")" >> "$sum"
  # What no card has racechecked yet: the sort and scan tests' other dtypes (the same kernel
  # code in other instantiations; one dtype per key width took 175 s) and the flash kernels'
  # block-order selection (written after the fifth run). ENTRY is
  # binary:gtest-filter[:seconds] (60 s unless given; the filter
  # as written, so a suite takes its own `.*`). Timings on an H100 under racecheck (fourth
  # run): test_nn's 25 CUDA cases 115 s in five steps, SortScanCuda 180 s.
  race_default="test_ops:FlashAttentionCuda.MatchesCpuContiguous:120 test_ops:SortScanCuda.*OtherDtypes:300"
  for entry in ${GPU_RUN_RACECHECK:-$race_default}; do
    t=${entry%%:*} suite=${entry#*:} secs=60
    [[ $suite == *:* && ${suite##*:} =~ ^[0-9]+$ ]] && secs=${suite##*:} suite=${suite%:*}
    name=racecheck-$t-$([[ $suite == '*' ]] && echo all || echo "${suite//[^A-Za-z0-9_.-]/_}" | cut -c1-60)
    # A named entry runs what it names (the sixth run's FlashAttentionCuda.MatchesCpuContiguous
    # entry ran nothing: the exclusions meant for '*' removed it); only '*' leaves out the slow ones.
    filter="$suite:-*LargeTensors*:*Death*"
    [[ $suite == '*' ]] && filter=$cuda_cases
    step "$name" "$secs" compute-sanitizer --tool racecheck "$bin/$t" --gtest_filter="$filter" || true
    # cuBLAS's own sm90 kernels (nvjet_*) report hazards racecheck cannot model; ember's count.
    printf '%s: %s tests OK, %s race reports in ember kernels, %s in cuBLAS nvjet; %s\n' "$name" \
      "$(grep -c '^\[       OK \]' "$logs/$name.log")" \
      "$(grep 'Race reported between' "$logs/$name.log" | grep -vc nvjet_)" \
      "$(grep 'Race reported between' "$logs/$name.log" | grep -c nvjet_)" \
      "$(grep -m1 -E 'RACECHECK SUMMARY' "$logs/$name.log" || echo 'no summary (cut short)')" >> "$sum"
  done
fi

say "total $((SECONDS - start)) s"
exit 0
