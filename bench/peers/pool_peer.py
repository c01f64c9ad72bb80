#!/usr/bin/env python3
"""PyTorch peer of bench_pool: avg_pool2d(3, 2, 1), adaptive_avg_pool2d(1) and
interpolate(bilinear, scale 2) at [128, 64, 7, 7] and [128, 256, 14, 14], f32, forward (under
no_grad) and forward+backward (input requiring grad, a fixed output gradient, the gradient
reset to None each call), timed the way bench_pool times ember (CPU: median of --steps timed
calls; CUDA: CUDA events around back-to-back calls, median of --steps batches).

    python3 bench/peers/pool_peer.py --device cpu --steps 10 --warmup 2 --threads 2

One line per case:  peer: <case> <forward ms> <forward+backward ms> <torch version>
"""
import torch.nn.functional as F

import peer_harness  # bench/peers/peer_harness.py: arguments, timing, the fwd/fwd+bwd loop


def main():
    a = peer_harness.parse_args()
    ops = [("avg3s2", lambda x: F.avg_pool2d(x, 3, 2, 1)),
           ("gap", lambda x: F.adaptive_avg_pool2d(x, 1)),
           ("bilinear2", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))]
    cases = []
    for shape in [(128, 64, 7, 7), (128, 256, 14, 14)]:
        dims = "x".join(str(d) for d in shape)
        cases += [("%s_%s" % (name, dims), shape, op) for name, op in ops]
    peer_harness.run_fwd_bwd_cases(cases, a)


if __name__ == "__main__":
    main()
