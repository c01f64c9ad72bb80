#!/usr/bin/env bash
# compile_time: how long a user's file that includes <ember/ember.h> takes to compile
# (g++ -std=c++20 -O0 -c, median of N runs), against the same file written with
# <torch/torch.h> when LibTorch's headers are installed (Debian's libtorch-dev; compiled as
# C++17, which LibTorch 1.13 targets). ccache is bypassed: this is the cold compile a user
# pays. Reported in compiler CPU time (and wall). Ends with one `result: {json}` line.
# Goal: <= 1.5 s for ember.
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

# Median over $runs compiles of $1 (remaining arguments: flags) as "<cpu_s> <wall_s>". CPU
# time (user + sys of the compiler) is the primary figure: on a loaded machine (CI, parallel
# builds) wall time mostly measures the wait for a core.
median_compile() {
  python3 - "$runs" "$cxx" "$tmp/out.o" "$@" <<'PY'
import os, resource, statistics, subprocess, sys, time
runs, cxx, out, src, flags = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
env = dict(os.environ, CCACHE_DISABLE="1")
cpu, wall = [], []
for _ in range(runs):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([cxx, *flags, "-O0", "-c", src, "-o", out], check=True, env=env)
    wall.append(time.monotonic() - t0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
print(f"{statistics.median(cpu):.3f} {statistics.median(wall):.3f}")
PY
}

# Every layer's public headers (<ember/ember.h> includes them all: nn, optim, amp, data, ...).
ember_inc=(-I"$root/include")
for d in "$root"/*/include; do ember_inc+=(-I"$d"); done
read -r ember_s ember_wall < <(median_compile "$tmp/user_ember.cpp" -std=c++20 "${ember_inc[@]}")
echo "ember     <ember/ember.h>:  ${ember_s} s CPU (${ember_wall} s wall), median of $runs, $cxx -std=c++20 -O0 -c"

torch_s=null torch_wall=null ratio=null
torch_api=/usr/include/torch/csrc/api/include
if [[ -f "$torch_api/torch/torch.h" ]]; then
  read -r torch_s torch_wall < <(median_compile "$tmp/user_torch.cpp" -std=c++17 -I"$torch_api")
  ratio=$(python3 -c "print(f'{$ember_s / $torch_s:.3f}')")
  echo "libtorch  <torch/torch.h>:  ${torch_s} s CPU (${torch_wall} s wall), median of $runs, $cxx -std=c++17 -O0 -c"
  echo "ratio ember/libtorch: $ratio"
else
  echo "libtorch  headers not installed (libtorch-dev): no peer"
fi
goal_met=$(python3 -c "print('true' if $ember_s <= 1.5 else 'false')")
echo "result: {\"bench\": \"compile_time\", \"runs\": $runs, \"clock\": \"cpu\", \"ember_s\": $ember_s, \"libtorch_s\": $torch_s, \"ratio_vs_libtorch\": $ratio, \"ember_wall_s\": $ember_wall, \"libtorch_wall_s\": $torch_wall, \"goal_s\": 1.5, \"goal_met\": $goal_met}"
