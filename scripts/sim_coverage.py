#!/usr/bin/env python3
"""gcov line coverage of ops/cuda under the CUDA simulation, and which simulated test family runs
each kernel (issue 39). Needs a simulation build configured with -DEMBER_CUDA_SIM_COVERAGE=ON
(only ops/cuda is instrumented). For every line of tests/cuda_sim/simulated.txt it clears the
counters, runs that family's tests on the simulated H100 and reads gcov's JSON, so each
`__global__` kernel is attributed to the first family that executes it. Run from the
repository root:

    python3 scripts/sim_coverage.py [--build-dir build-sim] [--markdown FILE]

Prints per-file line coverage, the kernels no family runs, and one `result: {json}` line;
--markdown writes the kernel table that docs/gpu-status.md carries.
"""
import argparse
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_DIR = os.path.join(ROOT, "ops", "cuda")


def families():
    out = []
    for line in open(os.path.join(ROOT, "tests", "cuda_sim", "simulated.txt")):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def kernels_in_sources():
    """(file, name, first line, last line) of every __global__ function in ops/cuda: from the
    declaration to the brace that closes its body."""
    found = []
    for path in sorted(glob.glob(os.path.join(CUDA_DIR, "*.cu")) + glob.glob(os.path.join(CUDA_DIR, "*.cuh"))):
        text = open(path).read()
        for m in re.finditer(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(?:void\s+)?(\w+)\s*\(", text):
            depth, i = 0, text.index("{", m.end())
            while True:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                if depth == 0:
                    break
                i += 1
            found.append((os.path.basename(path), m.group(1), text.count("\n", 0, m.start()) + 1,
                          text.count("\n", 0, i) + 1))
    return found


def read_gcov(objdir):
    """{file: {line: count}} for the ops/cuda sources."""
    lines = {}
    gcdas = glob.glob(os.path.join(objdir, "*.gcda"))
    with tempfile.TemporaryDirectory() as tmp:
        if gcdas:
            subprocess.run(["gcov", "--json-format", "--preserve-paths"] + gcdas, cwd=tmp,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Objects that ran nothing still have notes (.gcno): their lines count as not executed.
        gcnos = [g for g in glob.glob(os.path.join(objdir, "*.gcno")) if g[:-5] + ".gcda" not in gcdas]
        if gcnos:
            subprocess.run(["gcov", "--json-format", "--preserve-paths"] + gcnos, cwd=tmp,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for path in glob.glob(os.path.join(tmp, "*.gcov.json.gz")):
            data = json.load(gzip.open(path))
            for f in data["files"]:
                src = os.path.normpath(os.path.join(data.get("current_working_directory", ""), f["file"]))
                if os.path.dirname(src) != CUDA_DIR:
                    continue
                name = os.path.basename(src)
                per = lines.setdefault(name, {})
                for ln in f["lines"]:
                    per[ln["line_number"]] = per.get(ln["line_number"], 0) + ln["count"]
    return lines


def runs(lines, name, first, last):
    """Whether a line of the kernel's body ran (the kernels are inlined into the SIMT layer's
    launch closure, so gcov's per-function counts do not show them; their lines do)."""
    per = lines.get(name, {})
    return any(per.get(ln, 0) > 0 for ln in range(first + 1, last + 1))


def ctest(build, regex, env):
    r = subprocess.run(["ctest", "--test-dir", build, "-R", regex, "-j", "2", "--timeout", "900"], cwd=ROOT,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build-sim")
    ap.add_argument("--markdown", help="write the kernel -> family table here")
    args = ap.parse_args()
    build = os.path.join(ROOT, args.build_dir)
    objdir = os.path.join(build, "ops", "CMakeFiles", "ember_ops.dir", "cuda")
    if not glob.glob(os.path.join(objdir, "*.gcno")):
        sys.exit(f"no gcov notes under {objdir}: configure {args.build_dir} with -DEMBER_CUDA_SIM_COVERAGE=ON")
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1")
    env.setdefault("LSAN_OPTIONS", f"suppressions={ROOT}/tests/sanitizer/lsan.supp:print_suppressions=0")
    env.pop("CUDA_VISIBLE_DEVICES", None)

    kernels = kernels_in_sources()
    total_lines = {}
    first_family = {}
    failed = []
    for fam in families():
        for g in glob.glob(os.path.join(objdir, "*.gcda")):
            os.remove(g)
        if not ctest(build, fam, env):
            failed.append(fam)
        lines = read_gcov(objdir)
        for name, per in lines.items():
            acc = total_lines.setdefault(name, {})
            for ln, c in per.items():
                acc[ln] = acc.get(ln, 0) + c
        for name, kernel, first, last in kernels:
            if (name, kernel) not in first_family and runs(lines, name, first, last):
                first_family[(name, kernel)] = fam
        print(f"ran {fam}{'  (FAILED)' if fam in failed else ''}", flush=True)

    covered = sum(sum(1 for c in per.values() if c > 0) for per in total_lines.values())
    instrumented = sum(len(per) for per in total_lines.values())
    print(f"\n{'file':24} {'lines':>7} {'run':>7} {'cover':>7}")
    for name in sorted(total_lines):
        per = total_lines[name]
        run = sum(1 for c in per.values() if c > 0)
        print(f"{name:24} {len(per):7d} {run:7d} {100.0 * run / max(1, len(per)):6.1f}%")
    pct = 100.0 * covered / max(1, instrumented)
    print(f"{'total':24} {instrumented:7d} {covered:7d} {pct:6.1f}%")

    rows, unrun = [], []
    for name, kernel, line, _ in kernels:
        fam = first_family.get((name, kernel))
        rows.append((name, kernel, line, fam))
        if fam is None:
            unrun.append(f"{name}:{line} {kernel}")
    print(f"\n{len(rows) - len(unrun)} of {len(rows)} kernels run in simulation; not run:")
    for u in unrun:
        print("  " + u)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("| file | kernel | first simulated family that runs it |\n|---|---|---|\n")
            for name, kernel, line, fam in rows:
                cell = ("`" + fam.replace("|", "\\|") + "`") if fam else "not run in simulation"
                out.write(f"| {name} | `{kernel}` | {cell} |\n")
    print("result: " + json.dumps(dict(line_coverage_pct=round(pct, 1), lines=instrumented, covered=covered,
                                       kernels=len(rows), kernels_run=len(rows) - len(unrun),
                                       failed_families=failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
