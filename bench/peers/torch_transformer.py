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
import sys

import torch
import torch.nn as nn

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on
import peer_harness  # bench/peers/peer_harness.py: arguments and timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=2048)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--no-padding", action="store_true")
    args = peer_harness.parse_args(steps=20, warmup=3, ap=ap)
    dev = torch.device(args.device)
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

    ms_fwd = peer_harness.time_calls(forward, args.device, args.steps, args.warmup)
    ms_fb = peer_harness.time_calls(forward_backward, args.device, args.steps, args.warmup)
    print("peer: %.4f %.4f %s" % (ms_fwd, ms_fb, torch.__version__))
    sys.stdout.flush()
    peer_blas.report(args.device)


if __name__ == "__main__":
    main()
