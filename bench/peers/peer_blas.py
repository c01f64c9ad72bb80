"""Which BLAS the CPU peer's torch runs on, so a benchmark never reports a ratio against a
crippled peer without saying so.

Debian's python3-torch calls whatever libblas.so.3 the alternatives system selects. With
only libblas3 installed that is the unoptimized reference (netlib) BLAS, and torch's CPU
GEMMs get many times slower (seen: the MNIST MLP peer at 1.05K samples/s, 13.6K on OpenBLAS
on the same machine); with libopenblas0-pthread installed it is OpenBLAS. Call report() after
the timed steps (the library is loaded by then): it prints

    peer_blas: <openblas|reference|mkl|blis|other|none> <path>

for the benchmark to parse, and a warning on stderr when it is the reference BLAS.
"""
import os
import sys


def classify(path):
    """The kind of BLAS a mapped library is, or None when it is none (GPU BLAS included)."""
    name = os.path.basename(path)
    if not any(key in name for key in ("blas", "mkl", "blis")) or "cublas" in name or "hipblas" in name:
        return None
    real = os.path.realpath(path)
    for kind in ("openblas", "mkl", "blis"):
        if kind in real:
            return kind
    if os.path.basename(real).startswith("libblas.so") or "/blas/" in real:
        return "reference"
    return "other"


def loaded_blas():
    """(kind, path) of the BLAS mapped into this process, an optimized one first."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return "other", "?"
    found = {}
    for path in sorted(paths):
        kind = classify(path)
        if kind is not None:
            found.setdefault(kind, os.path.realpath(path))
    for kind in ("openblas", "mkl", "blis", "reference", "other"):
        if kind in found:
            return kind, found[kind]
    return "none", "-"


def report(device="cpu"):
    kind, path = loaded_blas() if device == "cpu" else ("none", "-")
    print("peer_blas: %s %s" % (kind, path))
    if kind == "reference":
        print("warning: torch runs on the reference BLAS (%s), many times slower than OpenBLAS: "
              "the ratio is not against a fair peer. Install libopenblas0-pthread "
              "(apt-get install libopenblas0-pthread) and run again." % path, file=sys.stderr)
    sys.stdout.flush()
