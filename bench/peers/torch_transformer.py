#!/usr/bin/env python3
"""PyTorch peer of bench_transformer: one torch.nn.TransformerEncoderLayer (batch_first,
post-norm, ReLU, f32, training mode) forward and forward+backward, timed as bench_transformer
times ember, with the same src_key_padding_mask (batch b keeps its first T - (b % 4) * T // 8
tokens; none with --no-padding).

    python3 bench/peers/torch_transformer.py --device cpu --batch 32 --seq 64 --d-model 256 \
        --heads 8 --ff 2048 --dropout 0.1 --steps 20 --warmup 3 --threads 2

Prints `peer: <forward ms> <forward+backward ms> <torch version>`.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on


def time_cpu(f, steps, warmup):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_cuda(f, steps, warmup):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()

    def run(reps):
        start.record()
        for _ in range(reps):
            f()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3 / reps

    reps = max(1, int(0.02 / max(run(1), 1e-7)))
    return statistics.median(run(reps) for _ in range(steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=2048)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--no-padding", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    timer = time_cuda if dev.type == "cuda" else time_cpu
    torch.manual_seed(0)
    B, T = args.batch, args.seq
    layer = nn.TransformerEncoderLayer(args.d_model, args.heads, dim_feedforward=args.ff,
                                       dropout=args.dropout, batch_first=True).to(dev)
    layer.train()
    x = torch.randn(B, T, args.d_model, device=dev)
    dy = torch.randn(B, T, args.d_model, device=dev)
    padding = None
    if not args.no_padding:
        t = torch.arange(T, device=dev)
        lengths = torch.tensor([T - (b % 4) * T // 8 for b in range(B)], device=dev)
        padding = t[None, :] >= lengths[:, None]

    def forward():
        with torch.no_grad():
            layer(x, src_key_padding_mask=padding)

    def forward_backward():
        layer(x, src_key_padding_mask=padding).backward(dy)
        layer.zero_grad(set_to_none=True)

    t_fwd = timer(forward, args.steps, args.warmup)
    t_fb = timer(forward_backward, args.steps, args.warmup)
    print("peer: %.4f %.4f %s" % (1e3 * t_fwd, 1e3 * t_fb, torch.__version__))
    sys.stdout.flush()
    peer_blas.report(args.device)


if __name__ == "__main__":
    main()
