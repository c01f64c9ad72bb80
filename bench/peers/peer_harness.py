"""What the PyTorch peers of the per-op benchmarks share (pool, sort, indexing, norm, rnn,
transformer): their common
arguments, the per-call timing that matches bench/bench_harness.h, and the forward /
forward+backward loop over one-input cases. Import it the way peers import peer_blas
(this folder is on sys.path when a peer runs as a script).
"""
import argparse
import statistics
import time

import torch


def parse_args(steps=10, warmup=2, ap=None):
    """--device/--steps/--warmup/--threads (added to `ap`, which may hold a peer's own
    arguments), with torch's threads and seed set from them."""
    ap = ap or argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    return a


def time_calls(fn, device, steps, warmup):
    """Milliseconds per call: CPU, the median of `steps` timed calls; CUDA, events around
    back-to-back calls (about 20 ms a batch), the median of `steps` batches."""
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


def run_fwd_bwd_cases(cases, a):
    """Times each (name, shape, op) forward (no_grad) and forward+backward (input requiring
    grad, a fixed output gradient, the gradient reset to None each call) and prints
    `peer: <case> <forward ms> <forward+backward ms> <torch version>`."""
    for name, shape, op in cases:
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
        print("peer: %s %.4f %.4f %s" % (name, f, fb, torch.__version__), flush=True)


def proc_status_bytes(field):
    """This process's resident memory from /proc/self/status ("VmRSS" now, "VmHWM" the peak
    since the start or reset_peak_rss()), in bytes; 0 where unreadable. bench_harness.h reads
    the same fields for ember."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_peak_rss():
    """Starts VmHWM over from the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
