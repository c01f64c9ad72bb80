#!/usr/bin/env bash
# run_all: runs the benchmarks and collects their `result: {json}` lines into one JSON file.
#
#   bash bench/run_all.sh [--gpu] [--bin build/bin] [--out bench-results.json] [--python PY]
#
# Default (CPU) mode: every bench_* binary in --bin with its default arguments (the peers under
# --python: bench_mnist twice, the mlp and --model cnn; bench_gpt three times, tiny, a
# character-level 2 x 128 with vocabulary 256 and mid 4 x 256; bench_resnet, examples/resnet.cpp's
# training step; bench_rnn, bench_attention, bench_transformer, bench_norm, bench_pool, bench_activation,
# bench_sort, bench_indexing, bench_matmul, bench_generate), then bench/compile_time.sh, and prints the CPU
# speed matrix of issue 23 (bench/cpu_matrix.py: each model row's ratio against its goal). The CPU peer
# is only fair on an optimized BLAS: every result says its "peer_blas" (see the README). The two
# CNN rows (mnist-cnn, resnet) also print the profile of 3 more ember steps (op table) in their logs.
# --gpu: the GPU rows only, in this order (the costliest peer last) —
#   bench_gpt --preset gpt2-small --device cuda --amp bf16 -B 16 -T 1024   (eager torch peer),
#   bench_attention --device cuda (bf16 against torch's flash SDPA), bench_matmul, bench_bandwidth,
#   bench_mnist --device cuda (mlp, mlp --cuda-graph), bench_gpt ... --cuda-graph --no-peer (ember's
#   whole step replayed; set beside the eager row), bench_mnist --model cnn, bench_resnet --device
#   cuda (f32 with cuDNN's heuristics, f32 and --amp bf16 with --cudnn-benchmark on both sides,
#   then ember's per-op table by CUDA time), bench_generate --device
#   cuda (GPT-2 124M KV-cache generation, B = 1 and 8), bench_pathological, bench_allocator,
#   bench_norm and bench_sort --device cuda (issue 40's group norm and long-row rows), and
#   bench_gpt ... --compile (torch.compile peer), then bench_gpt ... --no-peer --profile 3
#   (the per-op table of an eager step, by CUDA time); attention-dq-atomics is bench_attention
#   --dq-atomics (the backward's dQ by atomics, as the peer's), only when asked by --only.
# --only ROWS (CPU mode): a comma-separated subset of the CPU rows: mnist-mlp, mnist-cnn, gpt-tiny,
#   gpt-char, gpt-mid, compile-time, and the other benchmarks by name without bench_ (resnet, rnn, ...).
# --only ROWS (GPU mode): a comma-separated subset of those rows, by name: gpt, attention, matmul,
#   bandwidth, mnist-mlp, mnist-mlp-graph, gpt-graph, mnist-cnn, resnet, resnet-benchmark,
#   resnet-bf16, resnet-profile, generate, pathological, allocator, norm, sort, gpt-compile,
#   gpt-profile, attention-dq-atomics (a GPU call's minutes go to the rows not yet measured on a card).
# The Python is --python, else $EMBER_PYTHON, else the first of python3 and /usr/bin/python3
# that imports torch (the GPU machine's own PyTorch; Debian's python3-torch on a CPU machine).
#
# Each run's full output goes to <out>.logs/<n>-<bench>.log. The JSON file is
#   {"date": ..., "commit": ..., "host": ..., "mode": "cpu"|"gpu", "python": ..., "runs": [
#     {"command": "...", "rc": 0, "seconds": 12, "result": {...the bench's result...}}, ...]}
# with "result": null for a run that printed no result line. Exits non-zero if any run failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/build/bin"
out="bench-results.json"
mode=cpu
python="${EMBER_PYTHON:-}"
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpu) mode=gpu ;;
    --bin) bin="$2"; shift ;;
    --out) out="$2"; shift ;;
    --python) python="$2"; shift ;;
    --only) only="$2"; shift ;;
    -h|--help) sed -n '2,31p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_all: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "$python" ]]; then
  python=/usr/bin/python3
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then python="$p"; break; fi
  done
fi
[[ -d "$bin" ]] || { echo "run_all: no benchmark binaries in $bin (build first, or --bin DIR)" >&2; exit 2; }

logs="$out.logs"
mkdir -p "$logs"
runs=()
failed=0
n=0
run() {  # run <command...>: one benchmark run, its result line appended to runs
  n=$((n + 1))
  local name log start rc seconds result
  name="$(basename "$1")"
  [[ $name == bash ]] && name="$(basename "$2" .sh)"
  log="$logs/$(printf '%02d' "$n")-$name.log"
  echo "== $*" >&2
  start=$(date +%s)
  "$@" >"$log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - start))
  result="$(grep '^result: ' "$log" | tail -n 1 | sed 's/^result: //')"
  [[ -n "$result" ]] || result=null
  [[ $rc -eq 0 && "$result" != null ]] || failed=1
  echo "   rc $rc, ${seconds}s: ${result:0:200}" >&2
  local cmd="$*"
  cmd="${cmd//\\/\\\\}"
  cmd="${cmd//\"/\\\"}"
  runs+=("{\"command\": \"${cmd/#$root\//}\", \"rc\": $rc, \"seconds\": $seconds, \"result\": $result}")
}

if [[ $mode == gpu ]]; then
  gpt=("$bin/bench_gpt" --preset gpt2-small --device cuda --amp bf16 -B 16 -T 1024 --steps 20 --warmup 5
       --python "$python")
  rows="gpt attention matmul bandwidth mnist-mlp mnist-mlp-graph gpt-graph mnist-cnn resnet resnet-benchmark resnet-bf16 resnet-profile generate pathological allocator norm sort gpt-compile gpt-profile attention-dq-atomics"
  for r in ${only//,/ }; do
    [[ " $rows " == *" $r "* ]] || { echo "run_all: unknown --only row $r (rows: $rows)" >&2; exit 2; }
  done
  want() { [[ -z $only || ",$only," == *",$1,"* ]]; }
  # Cheapest and most telling first, torch.compile's peer late: it spends a minute or more
  # compiling, and a GPU call's time is short.
  want gpt && run "${gpt[@]}"
  want attention && run "$bin/bench_attention" --device cuda --python "$python"
  if [[ ",$only," == *",attention-dq-atomics,"* ]]; then
    run "$bin/bench_attention" --device cuda --python "$python" --dq-atomics
  fi
  want matmul && run "$bin/bench_matmul" --python "$python"
  want bandwidth && [[ -x "$bin/bench_bandwidth" ]] && run "$bin/bench_bandwidth"
  want mnist-mlp && run "$bin/bench_mnist" --device cuda --model mlp --python "$python"
  want mnist-mlp-graph && run "$bin/bench_mnist" --device cuda --model mlp --cuda-graph --python "$python"
  want gpt-graph && run "${gpt[@]}" --cuda-graph --no-peer
  want mnist-cnn && run "$bin/bench_mnist" --device cuda --model cnn --python "$python"
  want resnet && run "$bin/bench_resnet" --device cuda --python "$python"
  want resnet-benchmark && run "$bin/bench_resnet" --device cuda --cudnn-benchmark --python "$python"
  want resnet-bf16 && run "$bin/bench_resnet" --device cuda --amp bf16 --cudnn-benchmark --python "$python"
  want resnet-profile && run "$bin/bench_resnet" --device cuda --cudnn-benchmark --no-peer --profile 3
  want generate && run "$bin/bench_generate" --device cuda --python "$python"
  for b in pathological allocator; do want $b && [[ -x "$bin/bench_$b" ]] && run "$bin/bench_$b"; done
  for b in norm sort; do want $b && [[ -x "$bin/bench_$b" ]] && run "$bin/bench_$b" --device cuda --python "$python"; done
  want gpt-compile && run "${gpt[@]}" --compile
  want gpt-profile && run "${gpt[@]}" --no-peer --profile 3  # eager: each op's CUDA events
else
  want() { [[ -z $only || ",$only," == *",$1,"* ]]; }
  for b in "$bin"/bench_*; do
    [[ -x "$b" && -f "$b" ]] || continue
    name="$(basename "$b")"
    name="${name#bench_}"
    case "$name" in
      mnist)
        want mnist-mlp && run "$b" --python "$python"
        want mnist-cnn && run "$b" --model cnn --python "$python" --profile 3 ;;
      gpt)  # the matrix's three GPT rows: tiny (the default), a character-level model, mid
        want gpt-tiny && run "$b" --python "$python"
        want gpt-char && run "$b" --n-layer 2 --n-head 4 --n-embd 128 --vocab 256 -B 32 -T 64 --python "$python"
        want gpt-mid && run "$b" --n-layer 4 --n-head 4 --n-embd 256 -T 128 --steps 8 --python "$python" ;;
      resnet) want resnet && run "$b" --python "$python" --profile 3 ;;
      matmul | attention | rnn | norm | pool | activation | transformer | sort | indexing | generate)
        want "$name" && run "$b" --python "$python" ;;
      *) want "$name" && run "$b" ;;
    esac
  done
  want compile-time && run bash "$root/bench/compile_time.sh"
fi

{
  printf '{"date": "%s", "commit": "%s", "host": "%s", "mode": "%s", "python": "%s", "runs": [\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(hostname)" "$mode" "$python"
  for i in "${!runs[@]}"; do
    printf '  %s%s\n' "${runs[$i]}" "$([[ $i -lt $((${#runs[@]} - 1)) ]] && echo ,)"
  done
  printf ']}\n'
} >"$out"
echo "run_all: ${#runs[@]} runs -> $out (logs in $logs)" >&2
# The CPU speed matrix (docs/performance.md): one row per model shape, ember / PyTorch.
if [[ $mode == cpu ]]; then
  python3 "$root/bench/cpu_matrix.py" "$out" || failed=1
fi
exit $failed
