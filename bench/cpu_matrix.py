#!/usr/bin/env python3
"""The CPU speed matrix (issue 23): reads run_all.sh's JSON and prints one markdown row per model
shape with its ratio (ember speed / PyTorch speed, both measured in that run) and its goal.

    python3 bench/cpu_matrix.py bench-results.json

Exits 1 if a row is missing from the file (its bench did not run or printed no result line);
a row below its goal is reported, not an error (docs/performance.md says why for each).
"""
import json
import platform
import sys


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    keys = {}
    for line in lines:
        if ":" in line:
            k, v = line.split(":", 1)
            keys.setdefault(k.strip(), v.strip())  # the first processor's entry
    cores = sum(1 for line in lines if line.startswith("processor"))
    return "%s (family %s model %s), %d cores" % (
        keys.get("model name", "?"), keys.get("cpu family", "?"), keys.get("model", "?"), cores)


def results(doc):
    for run in doc.get("runs", []):
        if run.get("result"):
            yield run["result"]


def find(doc, pred):
    for r in results(doc):
        try:
            if pred(r):
                return r
        except (KeyError, TypeError):
            pass
    return None


def gpt(n_layer, n_embd, vocab_max):
    return lambda r: (r["bench"] == "gpt_train" and r["device"] == "cpu" and r["n_layer"] == n_layer
                      and r["n_embd"] == n_embd and r["vocab"] <= vocab_max)


# (row, shape, goal, how to find its result, how to read its ratio from it)
ROWS = [
    ("MNIST MLP", "784-512-256-10, B=128, AdamW", 1.5,
     lambda r: r["bench"] == "mnist_train" and r["model"] == "mlp" and r["device"] == "cpu", lambda r: r["ratio"]),
    ("MNIST CNN", "PyTorch's example net, B=128", 2.0,
     lambda r: r["bench"] == "mnist_train" and r["model"] == "cnn" and r["device"] == "cpu", lambda r: r["ratio"]),
    ("char GPT", "2 x 128, 4 heads, T=64, B=32, vocab 256", 1.5, gpt(2, 128, 256), lambda r: r["ratio"]),
    ("GPT tiny", "2 x 64, 2 heads, T=64, B=8, vocab 50257", 1.5, gpt(2, 64, 60000), lambda r: r["ratio"]),
    ("GPT mid", "4 x 256, 4 heads, T=128, B=8, vocab 50257", 1.5, gpt(4, 256, 60000), lambda r: r["ratio"]),
    ("LSTM LM", "char_lstm step: 2 x 256, T=64, B=32, vocab 256, AdamW", 1.5,
     lambda r: r["bench"] == "rnn", lambda r: r["ratios"]["char_lstm_step"]),
    ("ResNet-BN", "resnet example step: B=128, 28x28, SGD Nesterov", 1.5,
     lambda r: r["bench"] == "resnet_train", lambda r: r["ratio"]),
    ("Transformer encoder", "TransformerEncoderLayer fwd+bwd, d=256, 8 heads, B=32, T=64, key padding", 1.5,
     lambda r: r["bench"] == "transformer" and r["device"] == "cpu", lambda r: r["ratios"]["fwd_bwd"]),
    ("attention (small)", "fwd+bwd [32, 4, 64, 32] causal", 1.5,
     lambda r: r["bench"] == "attention" and r["device"] == "cpu", lambda r: r["ratios"]["32x4x64x32c_fwd_bwd"]),
    ("attention (GPT-small head)", "fwd+bwd [8, 12, 256, 64] causal", 1.5,
     lambda r: r["bench"] == "attention" and r["device"] == "cpu", lambda r: r["ratios"]["8x12x256x64c_fwd_bwd"]),
]


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    print("CPU matrix, commit %s, %s, %s" % (doc.get("commit", "?"), doc.get("date", "?"), cpu_model()))
    print("| row | shape | ember / PyTorch | goal | met | peer BLAS |")
    print("|---|---|---:|---:|---|---|")
    missing = 0
    for name, shape, goal, pred, ratio_of in ROWS:
        r = find(doc, pred)
        try:
            ratio = float(ratio_of(r)) if r else None
        except (KeyError, TypeError):
            ratio = None
        if ratio is None:
            missing += 1
            print("| %s | %s | missing | >= %.1fx | | |" % (name, shape, goal))
            continue
        print("| %s | %s | %.2fx | >= %.1fx | %s | %s |" % (
            name, shape, ratio, goal, "yes" if ratio >= goal else "no", r.get("peer_blas", "?")))
    # The MNIST MLP against the machine's FMA peak (bench_matmul measures it): the step's GEMM
    # work is 6 x (784*512 + 512*256 + 256*10) flops per sample less the first layer's input
    # gradient (the images need none): 2,407,424 flop.
    mlp = find(doc, ROWS[0][3])
    mm = find(doc, lambda r: r["bench"] == "matmul" and r.get("cpu_fma_peak_gflops", 0) > 0)
    if mlp and mm:
        gflops = mlp["ember_samples_per_s"] * 2407424 * 1e-9
        print("MNIST MLP: %.1f GFLOP/s of GEMM work, %.0f%% of this machine's f32 FMA peak (%.1f GFLOP/s, %d threads;"
              " %.1f with all threads at once during bench_matmul)"
              % (gflops, 100 * gflops / mm["cpu_fma_peak_gflops"], mm["cpu_fma_peak_gflops"], mm["threads"],
                 mm.get("cpu_fma_concurrent_gflops", 0)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
