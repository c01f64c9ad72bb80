#!/usr/bin/python3
"""PyTorch peer of bench/bench_rnn.cpp: the same cases, the same timing (median of --steps
calls after --warmup), on the CPU with --threads threads. Prints one line per case:
    peer: <case> <median ms> <torch version>
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_harness  # bench/peers/peer_harness.py: arguments and timing

args = peer_harness.parse_args()


def median_ms(fn):
    return peer_harness.time_calls(fn, "cpu", args.steps, args.warmup)


T, N, I, H = 64, 32, 128, 256
for layers in (1, 2):
    lstm = nn.LSTM(I, H, num_layers=layers)
    x = torch.randn(T, N, I, requires_grad=True)
    g = torch.randn(T, N, H)

    def fwd_bwd():
        for p in lstm.parameters():
            p.grad = None
        x.grad = None
        out, _ = lstm(x)
        (out * g).sum().backward()

    def fwd():
        with torch.no_grad():
            lstm(x)

    print("peer: lstm%d_fwd %.4f %s" % (layers, median_ms(fwd), torch.__version__), flush=True)
    print("peer: lstm%d_fwd_bwd %.4f %s" % (layers, median_ms(fwd_bwd), torch.__version__), flush=True)


class CharLstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 64)
        self.lstm = nn.LSTM(64, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 256)

    def forward(self, x, state):
        out, state = self.lstm(self.emb(x), state)
        return self.head(out), state


model = CharLstm()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
xb = torch.randint(0, 256, (32, 65))
state = [None]


def train_step():
    logits, st = model(xb[:, :64], state[0])
    state[0] = (st[0].detach(), st[1].detach())
    loss = F.cross_entropy(logits.reshape(-1, 256), xb[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


print("peer: char_lstm_step %.4f %s" % (median_ms(train_step), torch.__version__), flush=True)
