#!/usr/bin/python3
"""PyTorch twin of examples/char_lstm.cpp: the same model (Embedding(256, 64) -> LSTM(64,
hidden, layers) -> Linear(hidden, 256)), the same data (Brown corpus, POS tags stripped as
ember::data::brown_untag does, bytes as tokens, the last 5% held out), the same order
(`batch` parallel streams, windows of seq-len read in turn, state carried detached and reset
at each new pass), the same AdamW / clipping / validation, and the same report lines, so the
two loss curves can be printed side by side. Initial weights come from torch's RNG (the
distributions are the same, the values are not).

    /usr/bin/python3 bench/peers/char_lstm_peer.py --steps 500 [--hidden 256] [--threads 2]
"""
import argparse
import math
import os
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="data/brown")
ap.add_argument("--steps", type=int, default=500)
ap.add_argument("--seed", type=int, default=1337)
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--seq-len", type=int, default=64)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--clip", type=float, default=1.0)
ap.add_argument("--eval-every", type=int, default=50)
ap.add_argument("--eval-batches", type=int, default=4)
ap.add_argument("--threads", type=int, default=0)
args = ap.parse_args()
if args.threads > 0:
    torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)


def untag(data):
    """ember::data::brown_untag: per line, tokens split on ' ', '\\t', '\\r'; each keeps the
    text before its last '/' (unless that '/' is its first byte); one line per sentence."""
    out = []
    for line in data.split(b"\n"):
        words = []
        for tok in re.split(rb"[ \t\r]+", line):
            if not tok:
                continue
            s = tok.rfind(b"/")
            words.append(tok[:s] if s > 0 else tok)
        if words:
            out.append(b" ".join(words) + b"\n")
    return b"".join(out)


names = sorted(n for n in os.listdir(args.data)
               if re.fullmatch(r"c[a-r][0-9][0-9]", n) and os.path.isfile(os.path.join(args.data, n)))
text = b"".join(untag(open(os.path.join(args.data, n), "rb").read()) for n in names)
split = len(text) * 95 // 100


def as_streams(b, streams):
    n = len(b) // streams
    return torch.tensor(list(b[: n * streams]), dtype=torch.int64).view(streams, n)


train, val = as_streams(text[:split], args.batch), as_streams(text[split:], args.batch)
T = args.seq_len
windows = (train.size(1) - 1) // T
print("corpus: %d bytes (train %d, validation %d); %d streams of %d bytes"
      % (len(text), split, len(text) - split, args.batch, train.size(1)))


class CharLstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 64)
        self.lstm = nn.LSTM(64, args.hidden, num_layers=args.layers, batch_first=True)
        self.head = nn.Linear(args.hidden, 256)

    def forward(self, x, state):
        out, state = self.lstm(self.emb(x), state)
        return self.head(out), state


model = CharLstm()
print("model: %d parameters, torch %s" % (sum(p.numel() for p in model.parameters()), torch.__version__))
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)


def loss_of(logits, y):
    return F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))


def validate():
    with torch.no_grad():
        st, total = None, 0.0
        for w in range(args.eval_batches):
            logits, st = model(val[:, w * T:(w + 1) * T], st)
            total += loss_of(logits, val[:, w * T + 1:(w + 1) * T + 1]).item()
        return total / args.eval_batches


state, interval_loss, interval_steps, t0 = None, 0.0, 0, time.perf_counter()
for step in range(1, args.steps + 1):
    w = (step - 1) % windows
    if w == 0:
        state = None
    x, y = train[:, w * T:(w + 1) * T], train[:, w * T + 1:(w + 1) * T + 1]
    logits, st = model(x, state)
    state = (st[0].detach(), st[1].detach())
    loss = loss_of(logits, y)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    opt.step()
    interval_loss += loss.item()
    interval_steps += 1
    if step % args.eval_every == 0 or step == args.steps:
        secs = time.perf_counter() - t0
        print("step %5d | train loss %.4f | val loss %.4f | %.0f tok/s"
              % (step, interval_loss / interval_steps, validate(), interval_steps * args.batch * T / secs),
              flush=True)
        interval_loss, interval_steps, t0 = 0.0, 0, time.perf_counter()
