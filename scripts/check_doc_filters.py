#!/usr/bin/env python3
"""Checks that every `test_<x> --gtest_filter='...'` a document lists selects at least one test.

A filter that matches nothing runs zero tests and reads as a pass (issue 40, item 2): the GPU
session that runs docs/gpu-status.md's filters must be running real tests. Each filter is asked
of the built binary with --gtest_list_tests (the CUDA tests are registered in every build, so
this works without a GPU).

    python3 scripts/check_doc_filters.py BIN_DIR DOC.md...
Exit 1 when a filter selects no test or names a binary that is not built.
"""
import re
import subprocess
import sys
from pathlib import Path

FILTER = re.compile(r"\b(test_[a-z_]+) --gtest_filter='([^']*)'")


def count_tests(binary: Path, gtest_filter: str) -> int:
    out = subprocess.run([str(binary), "--gtest_list_tests", f"--gtest_filter={gtest_filter}"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("  ") and line.strip())


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bin_dir, docs = Path(sys.argv[1]), sys.argv[2:]
    checked, bad = 0, []
    for doc in docs:
        for n, line in enumerate(Path(doc).read_text().splitlines(), 1):
            for binary, gtest_filter in FILTER.findall(line):
                exe = bin_dir / binary
                where = f"{doc}:{n}: {binary} --gtest_filter='{gtest_filter}'"
                if not exe.exists():
                    bad.append(f"{where}: {exe} is not built")
                    continue
                checked += 1
                if count_tests(exe, gtest_filter) == 0:
                    bad.append(f"{where}: selects no test")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"check_doc_filters: {checked} filters checked, {len(bad)} select nothing or name no binary")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
