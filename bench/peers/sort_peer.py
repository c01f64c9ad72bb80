#!/usr/bin/env python3
"""PyTorch peer of bench_sort: topk(k=50) of [64, 50304], sort of [4096, 1024] and cumsum of
[4096, 1024] along the last dim, f32, under no_grad, timed the way bench_sort times ember
(CPU: median of --steps timed calls; CUDA: CUDA events around back-to-back calls, median of
--steps batches).

    python3 bench/peers/sort_peer.py --device cpu --steps 10 --warmup 2 --threads 2

One line per case:  peer: <case> <ms> <torch version>
"""
import argparse
import statistics
import time

import torch


def time_calls(fn, device, steps, warmup):
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        per = max(start.elapsed_time(end), 1e-3)
        reps = max(1, int(20.0 / per))
        times = []
        for _ in range(steps):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / reps)
        return statistics.median(times)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cases = [("topk50_64x50304", (64, 50304), lambda x: torch.topk(x, 50)),
             ("sort_4096x1024", (4096, 1024), lambda x: torch.sort(x)),
             ("cumsum_4096x1024", (4096, 1024), lambda x: torch.cumsum(x, -1))]
    with torch.no_grad():
        for name, shape, op in cases:
            x = torch.randn(shape, device=a.device)
            ms = time_calls(lambda: op(x), a.device, a.steps, a.warmup)
            print("peer: %s %.4f %s" % (name, ms, torch.__version__), flush=True)


if __name__ == "__main__":
    main()
