#!/usr/bin/env bash
# compile_time: how long a user's file that includes <ember/ember.h> takes to compile
# (g++ -std=c++20 -O0 -c, median of N runs), against the same file written with
# <torch/torch.h> when LibTorch's headers are installed (Debian's libtorch-dev; compiled as
# C++17, which LibTorch 1.13 targets). ccache is bypassed: this is the cold compile a user
# pays. Ends with one `result: {json}` line. Goal: <= 1.5 s for ember.
#
#   bash bench/compile_time.sh [runs]      (default 5; CXX overrides g++)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${1:-5}"
cxx="${CXX:-g++}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A small training-step file, the kind of translation unit a user writes.
cat >"$tmp/user_ember.cpp" <<'CPP'
#include <ember/ember.h>
using namespace ember;
double step(Tensor& w, const Tensor& x, const Tensor& y) {
  Tensor loss = (x.matmul(w) - y).pow(2).mean();
  loss.backward();
  { NoGradGuard g; w.sub_(w.grad(), 0.1); w.set_grad(Tensor()); }
  return loss.item<double>();
}
CPP
cat >"$tmp/user_torch.cpp" <<'CPP'
#include <torch/torch.h>
double step(torch::Tensor& w, const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor loss = (x.matmul(w) - y).pow(2).mean();
  loss.backward();
  { torch::NoGradGuard g; w.sub_(w.grad(), 0.1); w.mutable_grad().reset(); }
  return loss.item<double>();
}
CPP

# Median wall time (s) of compiling $1 with the remaining arguments as flags.
median_compile() {
  local src="$1"; shift
  local times=()
  for ((i = 0; i < runs; ++i)); do
    local t0 t1
    t0=$(date +%s.%N)
    CCACHE_DISABLE=1 "$cxx" "$@" -O0 -c "$src" -o "$tmp/out.o"
    t1=$(date +%s.%N)
    times+=("$(python3 -c "print($t1 - $t0)")")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}

ember_inc=(-I"$root/include" -I"$root/core/include" -I"$root/ops/include" -I"$root/autograd/include")
ember_s=$(median_compile "$tmp/user_ember.cpp" -std=c++20 "${ember_inc[@]}")
echo "ember     <ember/ember.h>:  ${ember_s} s (median of $runs, $cxx -std=c++20 -O0 -c)"

torch_s=null
ratio=null
torch_api=/usr/include/torch/csrc/api/include
if [[ -f "$torch_api/torch/torch.h" ]]; then
  torch_s=$(median_compile "$tmp/user_torch.cpp" -std=c++17 -I"$torch_api")
  ratio=$(python3 -c "print(f'{$ember_s / $torch_s:.3f}')")
  echo "libtorch  <torch/torch.h>:  ${torch_s} s (median of $runs, $cxx -std=c++17 -O0 -c)"
  echo "ratio ember/libtorch: $ratio"
else
  echo "libtorch  headers not installed (libtorch-dev): no peer"
fi
goal_met=$(python3 -c "print('true' if $ember_s <= 1.5 else 'false')")
echo "result: {\"bench\": \"compile_time\", \"runs\": $runs, \"ember_s\": $ember_s, \"libtorch_s\": $torch_s, \"ratio_vs_libtorch\": $ratio, \"goal_s\": 1.5, \"goal_met\": $goal_met}"
