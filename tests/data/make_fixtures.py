#!/usr/bin/python3
"""Writes tests/data/torch_reference.txt: PyTorch reference values for ember's ops.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/data/make_fixtures.py

Every case writes its inputs, the upstream gradient of its output, the output and the
gradient of every differentiable input, all in float64, one array per line:

    <case>.<array> d0 d1 ... : v0 v1 ...

(a 0-dim array has no dims before the colon). The C++ test (tests/ops/test_torch_reference.cpp)
reads the inputs from this file rather than regenerating them, so nothing depends on ember's
and PyTorch's random generators agreeing. Inputs come from a seeded generator only to make
the file reproducible; integer arrays (targets, indices) are stored as exact float values.
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(20240601)
lines = []


def put(name, t):
    a = t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t)
    a = np.asarray(a, dtype=np.float64)
    dims = " ".join(str(d) for d in a.shape)
    vals = " ".join("%.17g" % v for v in a.reshape(-1))
    lines.append(("%s %s : %s" % (name, dims, vals)).replace("  ", " "))


def randn(*shape, scale=1.0):
    return torch.tensor(rng.standard_normal(shape) * scale)


def case(name, fn, inputs, extra=None):
    """inputs: dict name -> float tensor (differentiable); extra: non-differentiable arrays."""
    for k, v in inputs.items():
        v.requires_grad_(True)
        put("%s.%s" % (name, k), v)
    for k, v in (extra or {}).items():
        put("%s.%s" % (name, k), v)
    y = fn(**inputs)
    gy = randn(*y.shape)
    put("%s.y" % name, y)
    put("%s.gy" % name, gy)
    grads = torch.autograd.grad(y, list(inputs.values()), gy, allow_unused=True)
    for k, g in zip(inputs.keys(), grads):
        put("%s.g%s" % (name, k), torch.zeros_like(inputs[k]) if g is None else g)


# ---- activations (elementwise) ----
case("gelu", lambda x: F.gelu(x), {"x": randn(4, 5, scale=2)})
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"x": randn(4, 5, scale=2)})
case("silu", lambda x: F.silu(x), {"x": randn(4, 5, scale=2)})
case("sigmoid", lambda x: torch.sigmoid(x), {"x": randn(4, 5, scale=2)})
case("tanh", lambda x: torch.tanh(x), {"x": randn(4, 5, scale=2)})

# ---- softmax ----
case("softmax_d1", lambda x: torch.softmax(x, 1), {"x": randn(3, 5, scale=2)})
case("softmax_d0", lambda x: torch.softmax(x, 0), {"x": randn(3, 5, scale=2)})
case("log_softmax_d1", lambda x: torch.log_softmax(x, 1), {"x": randn(3, 5, scale=2)})
case("log_softmax_d0", lambda x: torch.log_softmax(x, 0), {"x": randn(3, 5, scale=2)})

# ---- cross entropy: logits [6, 5], class targets [6] ----
target = torch.tensor([0, 3, 4, 1, 3, 2])
target_ignore = torch.tensor([0, 3, -100, 1, 3, -100])
target_ignore2 = torch.tensor([2, 3, 1, 1, 3, 4])  # ignore_index=3
for red in ("mean", "sum", "none"):
    case("ce_%s" % red, lambda logits: F.cross_entropy(logits, target, reduction=red),
         {"logits": randn(6, 5, scale=2)}, {"target": target})
    case("ce_ignore_%s" % red,
         lambda logits: F.cross_entropy(logits, target_ignore, reduction=red),
         {"logits": randn(6, 5, scale=2)}, {"target": target_ignore})
    case("ce_smooth_%s" % red,
         lambda logits: F.cross_entropy(logits, target, reduction=red, label_smoothing=0.1),
         {"logits": randn(6, 5, scale=2)}, {"target": target})
    case("ce_smooth_ignore_%s" % red,
         lambda logits: F.cross_entropy(logits, target_ignore2, reduction=red, ignore_index=3,
                                        label_smoothing=0.1),
         {"logits": randn(6, 5, scale=2)}, {"target": target_ignore2})

# ---- layer norm ----
case("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b, eps=1e-5),
     {"x": randn(4, 6, scale=3) + 1, "w": randn(6), "b": randn(6)})
case("layer_norm_2d", lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-5),
     {"x": randn(2, 3, 4, scale=2), "w": randn(3, 4), "b": randn(3, 4)})

# ---- matmul ----
case("matmul_batched", lambda a, b: torch.matmul(a, b), {"a": randn(2, 1, 3, 4), "b": randn(5, 4, 2)})
case("matmul_2d", lambda a, b: a @ b, {"a": randn(3, 4), "b": randn(4, 2)})
case("matmul_mv", lambda a, b: a @ b, {"a": randn(3, 4), "b": randn(4)})
case("matmul_vm", lambda a, b: a @ b, {"a": randn(4), "b": randn(4, 2)})

# ---- conv2d and max_pool2d (NCHW) ----
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
     {"x": randn(2, 4, 7, 7), "w": randn(6, 2, 3, 3), "b": randn(6)})
case("conv2d_plain", lambda x, w: F.conv2d(x, w), {"x": randn(1, 3, 5, 5), "w": randn(2, 3, 3, 3)})
case("max_pool2d_k2", lambda x: F.max_pool2d(x, 2, 2), {"x": randn(2, 3, 6, 6)})
case("max_pool2d_k3p1", lambda x: F.max_pool2d(x, 3, 2, padding=1), {"x": randn(2, 3, 7, 7)})

# ---- embedding (repeated indices accumulate into the weight's gradient) ----
emb_idx = torch.tensor([[1, 4, 1, 6], [0, 4, 4, 2]])
case("embedding", lambda w: F.embedding(emb_idx, w), {"w": randn(7, 3)}, {"idx": emb_idx})

# ---- reductions ----
case("var_d1", lambda x: torch.var(x, 1, unbiased=True, keepdim=True), {"x": randn(4, 5)})
case("var_all_c0", lambda x: torch.var(x, unbiased=False), {"x": randn(4, 5)})
case("std_all", lambda x: torch.std(x), {"x": randn(4, 5)})
case("std_d0", lambda x: torch.std(x, 0), {"x": randn(4, 5)})
case("norm_all", lambda x: torch.norm(x), {"x": randn(4, 5)})
case("norm_p1_d0", lambda x: torch.norm(x, 1, 0), {"x": randn(4, 5)})
case("norm_p3_d1", lambda x: torch.norm(x, 3, 1, keepdim=True), {"x": randn(4, 5)})
case("amax_d1", lambda x: torch.amax(x, 1), {"x": randn(4, 5)})
case("amax_all", lambda x: torch.amax(x), {"x": randn(4, 5)})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.txt")
with open(out, "w") as f:
    f.write("# Generated by tests/data/make_fixtures.py with torch %s; do not edit.\n"
            % torch.__version__)
    f.write("\n".join(lines) + "\n")
print("wrote %s (%d arrays, %d bytes)" % (out, len(lines), os.path.getsize(out)))
