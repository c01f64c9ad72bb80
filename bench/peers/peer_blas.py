"""Which BLAS the CPU peer's torch runs on, so a benchmark never reports a ratio against a
crippled peer without saying so.

Debian's python3-torch calls whatever libblas.so.3 the alternatives system selects. With
only libblas3 installed that is the unoptimized reference (netlib) BLAS, and torch's CPU
GEMMs get about 20-40x slower (seen: MNIST MLP 1.1K samples/s instead of 44K); with
libopenblas0-pthread installed it is OpenBLAS. Call report() after the timed steps (the
library is loaded by then): it prints

    peer_blas: <openblas|reference|mkl|blis|other|none> <path>

for the benchmark to parse, and a warning on stderr when it is the reference BLAS.
"""
import os
import sys


def loaded_blas():
    """(kind, path) of the first BLAS library mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return "other", "?"
    for path in sorted(paths):
        name = os.path.basename(path)
        if not any(key in name for key in ("blas", "mkl_rt", "blis")):
            continue
        real = os.path.realpath(path)
        if "openblas" in real:
            return "openblas", real
        if "mkl" in real:
            return "mkl", real
        if "blis" in real:
            return "blis", real
        if "libblas.so" in os.path.basename(real) or "/blas/" in real:
            return "reference", real
        return "other", real
    return "none", "-"


def report(device="cpu"):
    kind, path = loaded_blas() if device == "cpu" else ("none", "-")
    print("peer_blas: %s %s" % (kind, path))
    if kind == "reference":
        print("warning: torch runs on the reference BLAS (%s), many times slower than OpenBLAS: "
              "the ratio is not against a fair peer. Install libopenblas0-pthread "
              "(apt-get install libopenblas0-pthread) and run again." % path, file=sys.stderr)
    sys.stdout.flush()
