#!/usr/bin/env python3
"""torch.matmul peer for bench/bench_matmul.cpp: square GEMM throughput on the GPU.

For each dtype and size: C = A @ B with A, B ~ N(0, 1) of shape [n, n] on cuda:0, warmed up,
then timed with CUDA events around `reps` back-to-back calls (reps chosen so a sample takes
~50 ms), median over --samples samples. Output C is allocated per call, as ember's is.

Prints one line per measurement, which the benchmark parses:
    peer: <dtype> <n> <tflops> <torch version>
and exits 0 without output lines when torch or CUDA is missing (the benchmark then reports
the peer as absent).
"""
import argparse
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--samples", type=int, default=9)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_matmul: torch not importable: {e}", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_matmul: torch sees no CUDA device", file=sys.stderr)
        return 0
    names = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    torch.manual_seed(0)
    for dname in args.dtypes.split(","):
        dtype = names[dname]
        for n in (int(s) for s in args.sizes.split(",")):
            a = torch.randn(n, n, device="cuda").to(dtype)
            b = torch.randn(n, n, device="cuda").to(dtype)
            for _ in range(3):
                torch.matmul(a, b)
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            reps = max(1, int(0.05 / max(start.elapsed_time(stop) * 1e-3, 1e-9)))
            times = []
            for _ in range(args.samples):
                start.record()
                for _ in range(reps):
                    torch.matmul(a, b)
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1e-3 / reps)
            tflops = 2.0 * n * n * n / statistics.median(times) * 1e-12
            print(f"peer: {dname} {n} {tflops:.2f} {torch.__version__}", flush=True)
            del a, b
    return 0


if __name__ == "__main__":
    sys.exit(main())
