#!/usr/bin/env python3
"""PyTorch peer of bench_attention: attention forward and forward+backward over q, k, v of shape
[B, H, T, D] (contiguous), timed the way bench_attention times ember.

    python3 bench/peers/torch_attention.py --device cpu --dtype f32 \
        --shapes 32x4x64x32c,8x12x256x64c --steps 20 --warmup 3 --threads 2

A shape is BxHxTxD, with a trailing "c" for causal attention (PyTorch's is_causal: query i sees
keys j <= i), "p" for a bool key padding mask [B, 1, 1, T] (batch b keeps its first
T - (b % 4) * T // 8 keys) or "m" for a bool [T, T] lower-triangular attn_mask (bench_attention's
masked cases; SDPA's attn_mask on CUDA, masked_fill in the composite). The attention is:
- on CUDA, F.scaled_dot_product_attention with the FlashAttention backend forced
  (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) on torch >= 2.3,
  torch.backends.cuda.sdp_kernel(enable_flash=True, others off) on 2.0-2.2); where flash cannot
  run (old torch, a head dim or dtype it does not take) the default SDPA or the composite, and
  the line says which;
- on the CPU, the matmul-softmax-matmul composite (Debian's torch 1.13 has no SDPA; it is also
  what nanoGPT runs there): softmax(q k^T / sqrt(D), masked) v.
Timing: forward under no_grad, forward+backward with q, k, v requiring grad and a fixed output
gradient (the gradients reset to None each call). On the CPU each call is timed and the median
taken; on CUDA, CUDA events around enough back-to-back calls for about 20 ms, the median of
--steps such batches (bench/gpu_timing.h's method). One line per shape:

    peer: <shape> <forward ms> <forward+backward ms> <torch version> <impl>
"""
import argparse
import contextlib
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def parse_shape(s):
    kind = s[-1] if s[-1] in "cpm" else ""
    b, h, t, d = (int(x) for x in (s[:-1] if kind else s).split("x"))
    return b, h, t, d, kind


def keep_mask(kind, b, t, dev):
    """bench_attention's keep-mask (True = take part) of a masked case, else None."""
    if kind == "p":
        j = torch.arange(t, device=dev)
        lengths = torch.tensor([t - (i % 4) * t // 8 for i in range(b)], device=dev)
        return (j[None, :] < lengths[:, None]).view(b, 1, 1, t)
    if kind == "m":
        return torch.ones(t, t, dtype=torch.bool, device=dev).tril()
    return None


def flash_context():
    """A context manager factory forcing the flash backend, and its name; (None, None) if absent."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return (lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)), "sdpa-flash"
    except ImportError:
        pass
    if hasattr(torch.backends.cuda, "sdp_kernel"):
        return (lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                                       enable_mem_efficient=False)), "sdpa-flash"
    return None, None


def composite(q, k, v, causal, mask, keep=None):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if causal:
        att = att.masked_fill(mask, float("-inf"))
    if keep is not None:
        att = att.masked_fill(~keep, float("-inf"))
    return torch.softmax(att, dim=-1) @ v


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
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shapes", default="32x4x64x32c,8x12x256x64c")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    timer = time_cuda if dev.type == "cuda" else time_cpu
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    force_flash, flash_name = flash_context() if dev.type == "cuda" and has_sdpa else (None, None)
    torch.manual_seed(0)
    for spec in args.shapes.split(","):
        B, H, T, D, kind = parse_shape(spec)
        causal = kind == "c"
        keep = keep_mask(kind, B, T, dev)
        q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dtype) for _ in range(3))
        dy = torch.randn(B, H, T, D, device=dev, dtype=dtype)
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)
        impl, ctx = "composite", contextlib.nullcontext
        if dev.type == "cuda" and has_sdpa:
            impl, ctx = "sdpa-default", contextlib.nullcontext
            if force_flash is not None:
                try:  # does flash take this shape and dtype?
                    with force_flash():
                        F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal)
                    impl, ctx = flash_name, force_flash
                except RuntimeError as e:
                    print("warning: flash attention unavailable for %s (%s); default SDPA" % (spec, e),
                          file=sys.stderr)

        def attn(q, k, v):
            if impl == "composite":
                return composite(q, k, v, causal, mask, keep)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal)

        def forward():
            with torch.no_grad(), ctx():
                attn(q, k, v)

        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))

        def forward_backward():
            with ctx():
                attn(qg, kg, vg).backward(dy)
            qg.grad = kg.grad = vg.grad = None

        t_fwd = timer(forward, args.steps, args.warmup)
        t_fb = timer(forward_backward, args.steps, args.warmup)
        print("peer: %s %.4f %.4f %s %s" % (spec, 1e3 * t_fwd, 1e3 * t_fb, torch.__version__, impl))
        sys.stdout.flush()
    peer_blas.report(args.device)


if __name__ == "__main__":
    main()
