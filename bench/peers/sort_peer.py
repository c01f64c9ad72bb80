#!/usr/bin/env python3
"""PyTorch peer of bench_sort: topk(k=50) of [64, 50304], sort of [4096, 1024] and cumsum of
[4096, 1024] along the last dim, sort of [1, 4194304] and cumsum of [1, 16777216], f32, under no_grad, timed the way bench_sort times ember
(CPU: median of --steps timed calls; CUDA: CUDA events around back-to-back calls, median of
--steps batches).

    python3 bench/peers/sort_peer.py --device cpu --steps 10 --warmup 2 --threads 2

One line per case:  peer: <case> <ms> <torch version>
"""
import torch

import peer_harness  # bench/peers/peer_harness.py: arguments and timing


def main():
    a = peer_harness.parse_args()
    cases = [("topk50_64x50304", (64, 50304), lambda x: torch.topk(x, 50)),
             ("sort_4096x1024", (4096, 1024), lambda x: torch.sort(x)),
             ("cumsum_4096x1024", (4096, 1024), lambda x: torch.cumsum(x, -1)),
             ("sort_1x4194304", (1, 4194304), lambda x: torch.sort(x)),
             ("cumsum_1x16777216", (1, 16777216), lambda x: torch.cumsum(x, -1))]
    with torch.no_grad():
        for name, shape, op in cases:
            x = torch.randn(shape, device=a.device)
            ms = peer_harness.time_calls(lambda: op(x), a.device, a.steps, a.warmup)
            print("peer: %s %.4f %s" % (name, ms, torch.__version__), flush=True)


if __name__ == "__main__":
    main()
