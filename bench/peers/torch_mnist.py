#!/usr/bin/env python3
"""PyTorch peer of bench_mnist: the same MNIST recipe as build/bin/mnist, timed the same way.

    python3 bench/peers/torch_mnist.py --data data/mnist --model mlp --steps 200 \
        --batch-size 128 --threads 2 [--device cuda]

Model (same as examples/mnist.cpp): mlp = 784-512-256-10 with ReLU; cnn = PyTorch's MNIST
example net (conv 32, conv 64, max-pool 2, dropout 0.25, fc 128, dropout 0.5, fc 10). AdamW
(lr 1e-3, weight decay 0.01), cross-entropy, shuffled batches from the normalized IDX files
held in memory (the input pipeline is not what is measured). After `--warmup` steps it
times `--steps` training steps and prints one line:

    peer: <samples_per_s> <seconds> <torch version> <threads>

--amp bf16|fp16 runs the forward and the loss under torch.autocast and, for fp16 on CUDA, a
GradScaler (PyTorch 1.13's CPU autocast supports bf16 only, so fp16 on the CPU fails there).
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2)).flatten(1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--random", action="store_true", help="random images instead of --data")
    ap.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off",
                    help="torch.autocast (fp16 adds GradScaler on CUDA)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)

    if args.random:
        x_all = torch.randn(60000, 1, 28, 28)
        y_all = torch.randint(0, 10, (60000,))
    else:
        images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte"))
        labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte"))
        x_all = ((torch.tensor(images, dtype=torch.float32) / 255.0 - 0.1307) / 0.3081).unsqueeze(1)
        y_all = torch.tensor(labels, dtype=torch.int64)
    x_all, y_all = x_all.to(dev), y_all.to(dev)

    if args.model == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                              nn.ReLU(), nn.Linear(256, 10))
    else:
        model = Cnn()
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    n = x_all.shape[0]
    perm = torch.randperm(n, device=dev)
    b = args.batch_size

    amp_dtype = torch.float16 if args.amp == "fp16" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp == "fp16" and dev.type == "cuda")

    def step(i):
        idx = perm[(i * b) % (n - b):(i * b) % (n - b) + b]
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=args.amp != "off"):
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for i in range(args.warmup):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    loss.item()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    print("peer: %.1f %.4f %s %d" % (args.steps * b / seconds, seconds, torch.__version__, args.threads))
    peer_blas.report(dev.type)


if __name__ == "__main__":
    main()
