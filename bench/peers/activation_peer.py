#!/usr/bin/env python3
"""PyTorch peer of bench_activation: relu, gelu (erf and tanh), tanh, sigmoid, silu,
leaky_relu(0.01), elu, softplus, mish, hardswish and exp on [2048, 512] f32, forward (under
no_grad) and forward+backward (input requiring grad, a fixed output gradient, the gradient
reset to None each call), timed the way bench_activation times ember.

    python3 bench/peers/activation_peer.py --device cpu --steps 20 --warmup 3 --threads 2

One line per case:  peer: <case> <forward ms> <forward+backward ms> <torch version>
"""
import torch
import torch.nn.functional as F

import peer_harness  # bench/peers/peer_harness.py: arguments, timing, the fwd/fwd+bwd loop


def main():
    a = peer_harness.parse_args(steps=20, warmup=3)
    shape = (2048, 512)
    ops = [("relu", F.relu),
           ("gelu", F.gelu),
           ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
           ("tanh", torch.tanh),
           ("sigmoid", torch.sigmoid),
           ("silu", F.silu),
           ("leaky_relu", lambda x: F.leaky_relu(x, 0.01)),
           ("elu", F.elu),
           ("softplus", F.softplus),
           ("mish", F.mish),
           ("hardswish", F.hardswish),
           ("exp", torch.exp)]
    peer_harness.run_fwd_bwd_cases([(name, shape, op) for name, op in ops], a)


if __name__ == "__main__":
    main()
