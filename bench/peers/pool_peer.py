#!/usr/bin/env python3
"""PyTorch peer of bench_pool: avg_pool2d(3, 2, 1), adaptive_avg_pool2d(1) and
interpolate(bilinear, scale 2) at [128, 64, 7, 7] and [128, 256, 14, 14], f32, forward (under
no_grad) and forward+backward (input requiring grad, a fixed output gradient, the gradient
reset to None each call), timed the way bench_pool times ember (CPU: median of --steps timed
calls; CUDA: CUDA events around back-to-back calls, median of --steps batches).

    python3 bench/peers/pool_peer.py --device cpu --steps 10 --warmup 2 --threads 2

One line per case:  peer: <case> <forward ms> <forward+backward ms> <torch version>
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


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
    ops = [("avg3s2", lambda x: F.avg_pool2d(x, 3, 2, 1)),
           ("gap", lambda x: F.adaptive_avg_pool2d(x, 1)),
           ("bilinear2", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))]
    for shape in [(128, 64, 7, 7), (128, 256, 14, 14)]:
        dims = "x".join(str(d) for d in shape)
        for name, op in ops:
            x = torch.randn(shape, device=a.device)
            with torch.no_grad():
                dy = torch.randn(op(x).shape, device=a.device)

            def fwd():
                with torch.no_grad():
                    op(x)

            xg = x.clone().requires_grad_(True)

            def fwd_bwd():
                op(xg).backward(dy)
                xg.grad = None

            f = time_calls(fwd, a.device, a.steps, a.warmup)
            fb = time_calls(fwd_bwd, a.device, a.steps, a.warmup)
            print("peer: %s_%s %.4f %.4f %s" % (name, dims, f, fb, torch.__version__), flush=True)


if __name__ == "__main__":
    main()
