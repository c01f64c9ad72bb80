#!/usr/bin/env python3
"""PyTorch peer of bench_gpt: one GPT-2 training step (nanoGPT's model and recipe), timed.

    python3 bench/peers/torch_gpt.py --n-layer 2 --n-head 2 --n-embd 64 --vocab 50257 \
        --padded-vocab 50304 --batch-size 8 --seq-len 64 --steps 20 --warmup 3 \
        [--device cpu|cuda] [--amp off|bf16|fp16] [--compile] [--threads N]

The model is nn::GPT's (nn/include/ember/nn/gpt.h): token + position embeddings, pre-LN blocks
(causal self-attention with a fused c_attn, 4x MLP with tanh-GELU), final LayerNorm, lm_head
tied to wte with padded_vocab rows, the loss over the first `vocab` logit columns only, GPT-2
init. One step = zero_grad, forward under torch.autocast (when --amp), backward (through a
GradScaler for fp16 on CUDA), unscale, clip_grad_norm_(1.0), AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on matrices and embeddings, fused on CUDA when this torch has it).

Works on Debian's torch 1.13 (CPU: no F.scaled_dot_product_attention, no torch.compile, CPU
autocast bf16 only) and on a recent PyTorch (GPU machine): features are detected, not assumed;
a requested feature that is missing is reported and skipped.

After --warmup steps it times --steps steps one by one (each ends with loss.item(), as the
clip's norm already syncs) and prints one line the benchmark parses:

    peer: <tokens_per_s of the median step> <median ms> <torch version> <threads> \
          <peak CUDA bytes or 0> <compiled 0|1> <sdpa 0|1> <fused adamw 0|1>
"""
import argparse
import inspect
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_blas  # bench/peers/peer_blas.py: which BLAS this torch runs on

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def gpt2_init_(model, n_layer, vocab):
    """GPT-2 init (as nn::GPT): N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0,
    the padded vocabulary rows of wte 0."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif "ln" not in name:
                p.zero_()
        model.wte.weight[vocab:].zero_()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        if not HAS_SDPA:
            mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: nanoGPT's explicit attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab, padded_vocab):
        super().__init__()
        self.vocab, self.padded_vocab = vocab, padded_vocab
        self.wte = nn.Embedding(padded_vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        gpt2_init_(self, n_layer, vocab)

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head, padded vocabulary
        real = logits.view(B * T, self.padded_vocab)[:, :self.vocab]
        return F.cross_entropy(real, targets.view(-1), ignore_index=-1)


def make_adamw(model, lr, fused_wanted):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    fused = fused_wanted and "fused" in inspect.signature(torch.optim.AdamW).parameters
    kwargs = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kwargs), fused


def make_scaler(enabled):
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=0, help="0: the sequence length")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--padded-vocab", type=int, default=50304)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:  # f32 matmuls on TF32 tensor cores, as ember's default (cuda::allow_tf32())
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    B, T = args.batch_size, args.seq_len
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size or T, args.vocab,
                args.padded_vocab).to(dev)
    model.train()
    opt, fused = make_adamw(model, args.lr, fused_wanted=cuda)
    compiled = False
    run = model
    if args.compile:
        if hasattr(torch, "compile"):
            run = torch.compile(model)
            compiled = True
        else:
            print("torch_gpt: torch %s has no torch.compile; running eager" % torch.__version__,
                  file=sys.stderr)
    use_amp = args.amp != "off"
    amp_dtype = torch.float16 if args.amp == "fp16" else torch.bfloat16
    if use_amp and not cuda and amp_dtype == torch.float16:
        print("torch_gpt: CPU autocast in this torch may not support fp16", file=sys.stderr)
    scaler = make_scaler(args.amp == "fp16" and cuda)

    # A few fixed random batches, cycled (token values do not change the work).
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, args.vocab, (B, T), generator=gen).to(dev),
                torch.randint(0, args.vocab, (B, T), generator=gen).to(dev)) for _ in range(4)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=use_amp):
            loss = run(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(args.warmup + i)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) if cuda else 0
    print("peer: %.1f %.3f %s %d %d %d %d %d" % (B * T / med, 1e3 * med, torch.__version__,
                                                args.threads, peak, int(compiled), int(HAS_SDPA),
                                                int(fused)))
    peer_blas.report(dev.type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
