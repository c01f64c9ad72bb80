#!/usr/bin/env python3
"""PyTorch peer of bench_generate: greedy KV-cache generation with GPT-2 124M, eager, timed.

    python3 bench/peers/generate_peer.py [--device cpu|cuda] [--prompt-len 32] [--new-tokens 64]
        [--batch 1,8] [--steps 3] [--warmup 1] [--threads N]

The model is nn::GPT's gpt2-small (12 layers, 12 heads, 768 wide, block 1024, vocabulary 50257
padded to 50304 rows of wte, lm_head tied to wte, pre-LN blocks with tanh-GELU), random GPT-2
init, f32, eval, under torch.no_grad. The cache is transformers' classic one: per layer, the
keys and values [B, H, T, D] concatenated with each step's new ones. One call: one prefill
forward of the prompt, then one forward per new token (the last new token needs none); the
next token is the argmax of the last position's logits over the real vocabulary, and the
chosen tokens are read on the host each step (transformers' generate syncs there for its
stopping check; ember samples on the host). Works on torch 1.13 (explicit attention) and on a
recent PyTorch (F.scaled_dot_product_attention).

Per batch size, after --warmup calls, the median of --steps timed calls:
    peer: <B> <new tokens/s> <ms per call> <torch version>
then peer_blas (bench/peers/peer_blas.py).
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_blas
import peer_harness
from torch_gpt import gpt2_init_

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class Attention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, cache, layer):
        B, T, C = x.size()
        D = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, D).transpose(1, 2)
        k = k.view(B, T, self.n_head, D).transpose(1, 2)
        v = v.view(B, T, self.n_head, D).transpose(1, 2)
        past = 0
        if cache[layer] is not None:
            pk, pv = cache[layer]
            past = pk.size(2)
            k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
        cache[layer] = (k, v)
        # The new tokens are the last T queries: causal within them, all of the past visible.
        if HAS_SDPA and (T == 1 or past == 0):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            if T > 1:
                S = past + T
                mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=past)
                att = att.masked_fill(~mask, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = Attention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x, cache, layer):
        x = x + self.attn(self.ln_1(x), cache, layer)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab=50257,
                 padded_vocab=50304):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(padded_vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        gpt2_init_(self, n_layer, vocab)

    def forward(self, idx, cache):
        T = idx.size(1)
        past = 0 if cache[0] is None else cache[0][0].size(2)
        pos = torch.arange(past, past + T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for i, block in enumerate(self.h):
            x = block(x, cache, i)
        return F.linear(self.ln_f(x), self.wte.weight)  # [B, T, padded vocabulary]


def generate(model, prompt, new_tokens):
    cache = [None] * len(model.h)
    logits = model(prompt, cache)
    out = []
    for i in range(new_tokens):
        nxt = logits[:, -1, :model.vocab].argmax(dim=-1, keepdim=True)
        out.append(nxt.cpu())
        if i + 1 == new_tokens:
            break
        logits = model(nxt, cache)
    return torch.cat(out, dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", default="1,8")
    a = peer_harness.parse_args(steps=3, warmup=1, ap=ap)
    dev = torch.device(a.device)
    if dev.type == "cuda":  # f32 matmuls on TF32 tensor cores, as ember's default
        torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT().to(dev).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for B in [int(b) for b in a.batch.split(",")]:
            prompt = torch.randint(0, model.vocab, (B, a.prompt_len), generator=gen).to(dev)
            made = []

            def call():
                made.append(generate(model, prompt, a.new_tokens).numel())

            ms = peer_harness.time_calls(call, a.device, a.steps, a.warmup)
            assert made[-1] == B * a.new_tokens
            print("peer: %d %.2f %.3f %s" % (B, B * a.new_tokens / (ms * 1e-3), ms, torch.__version__),
                  flush=True)
    peer_blas.report(dev.type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
