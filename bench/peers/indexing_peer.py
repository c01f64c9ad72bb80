#!/usr/bin/env python3
"""PyTorch peer of bench_indexing: x[idx] on [65536, 64] (idx 16384 rows), x[:, idx] on
[1024, 1024] (512 columns), x[mask] on [1024, 1024] (every other column), and
einsum("bij,bjk->bik") on [32, 128, 64] x [32, 64, 128]; index values (j * 7919) % n as in
bench_indexing. f32, forward (under no_grad) and forward+backward (input requiring grad, a
fixed output gradient, the gradient reset to None each call), timed the way bench_indexing
times ember (CPU: median of --steps timed calls; CUDA: CUDA events around back-to-back calls,
median of --steps batches).

    python3 bench/peers/indexing_peer.py --device cpu --steps 10 --warmup 2 --threads 2

One line per case:  peer: <case> <forward ms> <forward+backward ms> <torch version>
"""
import torch

import peer_harness  # bench/peers/peer_harness.py: arguments, timing, the fwd/fwd+bwd loop


def spread(count, n, device):
    return (torch.arange(count, dtype=torch.int64) * 7919 % n).to(device)


def main():
    a = peer_harness.parse_args()
    d = a.device
    rows = spread(65536 // 4, 65536, d)
    cols = spread(512, 1024, d)
    mask = torch.zeros(1024, 1024, dtype=torch.bool, device=d)
    mask[:, ::2] = True
    w = torch.randn(32, 64, 128, device=d)
    cases = [("rows_65536x64", (65536, 64), lambda x: x[rows]),
             ("cols_1024x1024", (1024, 1024), lambda x: x[:, cols]),
             ("mask_1024x1024", (1024, 1024), lambda x: x[mask]),
             ("einsum_bmm_32", (32, 128, 64), lambda x: torch.einsum("bij,bjk->bik", x, w))]
    peer_harness.run_fwd_bwd_cases(cases, a)


if __name__ == "__main__":
    main()
