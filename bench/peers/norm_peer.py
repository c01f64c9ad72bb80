#!/usr/bin/python3
"""PyTorch peer of bench/bench_norm.cpp: the same normalization cases, timed the same way
(median of --steps calls after --warmup; CUDA events on a GPU), same thread count.

Prints one line per case:  peer: <name> <forward ms> <fwd+bwd ms> <torch version>
RMSNorm: torch 1.13 has no rms_norm; F.rms_norm when present, else the composite
x * rsqrt(mean(x^2) + eps) * w (torch 2.4's CPU implementation is that composite too).
"""
import torch
import torch.nn.functional as F

import peer_harness  # bench/peers/peer_harness.py: arguments and timing

args = peer_harness.parse_args(steps=20, warmup=3)
dev = torch.device(args.device)


def time_calls(f):
    """Seconds per call, timed as bench_norm times ember (bench/bench_harness.h)."""
    return 1e-3 * peer_harness.time_calls(f, args.device, args.steps, args.warmup)


def rms_norm(x, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


cases = [("bn2d_128x32x28x28", "b", (128, 32, 28, 28), 0),
         ("bn2d_128x64x14x14", "b", (128, 64, 14, 14), 0),
         ("gn8_128x64x14x14", "g", (128, 64, 14, 14), 8),
         ("gn32_1x512x64x64", "g", (1, 512, 64, 64), 32),
         ("rms_4096x768", "r", (4096, 768), 0)]
torch.manual_seed(0)
for name, kind, shape, groups in cases:
    C = shape[1]
    x = torch.randn(shape, device=dev)
    dy = torch.randn(shape, device=dev)
    w, b = torch.ones(C, device=dev), torch.zeros(C, device=dev)
    rm, rv = torch.zeros(C, device=dev), torch.ones(C, device=dev)

    def run(xv, wv, bv):
        if kind == "b":
            return F.batch_norm(xv, rm, rv, wv, bv, True, 0.1, 1e-5)
        if kind == "g":
            return F.group_norm(xv, groups, wv, bv, 1e-5)
        return rms_norm(xv, wv, 1e-6)

    def fwd():
        with torch.no_grad():
            run(x, w, b)

    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))

    def fwd_bwd():
        run(xg, wg, bg if kind != "r" else None).backward(dy)
        xg.grad = wg.grad = bg.grad = None

    print("peer: %s %.4f %.4f %s" % (name, 1e3 * time_calls(fwd), 1e3 * time_calls(fwd_bwd),
                                     torch.__version__.split("+")[0]), flush=True)
