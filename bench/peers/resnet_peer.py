#!/usr/bin/env python3
"""PyTorch peer of bench_resnet: one training step of examples/resnet.cpp's ResNet, timed the
same way as ember's side.

    python3 bench/peers/resnet_peer.py --steps 20 --warmup 3 --batch-size 128 --threads 2 \
        [--device cpu|cuda] [--amp off|bf16] [--cudnn-benchmark] [--memory-format contiguous|channels_last]

Model (the same as examples/common/resnet_model.h): stem conv3x3(1->16, no bias)-BN-ReLU; three
stages of two torchvision-style BasicBlocks with 16, 32, 64 channels (stride 2 and a 1x1 conv
+ BN shortcut at the start of stages 2 and 3); AdaptiveAvgPool2d(1); Linear(64, 10). Kaiming
normal (fan_out, relu) convolutions. SGD (lr 0.1, momentum 0.9, Nesterov, weight decay 5e-4)
and OneCycleLR stepped per batch; cross-entropy; a few random batches held in memory
(--memory-format channels_last: model and batches in torch.channels_last, PyTorch's advice
for CNNs on the CPU, as ember's side does with its own channels_last). After
--warmup steps it times --steps (on CUDA between two synchronizations; --amp bf16: forward and
loss under torch.autocast; --cudnn-benchmark: torch.backends.cudnn.benchmark) and prints

    peer: <images_per_s> <seconds> <torch version> <threads> <fwd_ms> <bwd_ms> <opt_ms>

(the phase times are medians: on CUDA the host's time to issue each phase), then the peer_blas
line (bench/peers/peer_blas.py).
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on
from peer_harness import proc_status_bytes, reset_peak_rss  # bench/peers/peer_harness.py


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for s, width in enumerate((16, 32, 64)):
            for b in range(2):
                blocks.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.fc(self.pool(h).flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--amp", choices=("off", "bf16"), default="off")
    ap.add_argument("--cudnn-benchmark", action="store_true")
    ap.add_argument("--memory-format", choices=("contiguous", "channels_last"), default="contiguous")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    b = args.batch_size
    fmt = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
    model = ResNet().train().to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, epochs=1,
                                                steps_per_epoch=args.warmup + args.steps + 1)
    batches = [(torch.randn(b, 1, 28, 28, device=dev).contiguous(memory_format=fmt),
                torch.randint(0, 10, (b,), device=dev)) for _ in range(4)]
    fwd, bwd, upd = [], [], []

    def step(i, timed):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        sched.step()
        if timed:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            upd.append(time.perf_counter() - t2)
        return loss

    for i in range(args.warmup):
        step(i, False)
    sync()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i, True)
    loss.item()
    sync()
    seconds = time.perf_counter() - t0

    def med(v):
        return 1e3 * sorted(v)[len(v) // 2] if v else 0.0

    print("peer: %.1f %.4f %s %d %.3f %.3f %.3f" % (args.steps * b / seconds, seconds, torch.__version__, args.threads,
                                                   med(fwd), med(bwd), med(upd)))
    if dev.type == "cpu":  # one more step's peak resident set, as bench_resnet measures ember's
        start = proc_status_bytes("VmRSS")
        reset_peak_rss()
        step(args.warmup + args.steps, False)
        print("peer_memory: %.1f %.1f" % (proc_status_bytes("VmHWM") / 1e6, start / 1e6))
    peer_blas.report(args.device)


if __name__ == "__main__":
    main()
