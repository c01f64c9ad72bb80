#!/usr/bin/env python3
"""Seeds typical CUDA kernel bugs one at a time and shows that the simulation build catches each
(issue 39's mutation run): for every mutant, patch the source, rebuild the test binary in the
simulation build, run the tests that should notice under the schedules CI uses, and restore
the source. A mutant is caught when a test fails (or the mutant no longer builds: reported
apart, it proves nothing). Run from the repository root with a configured simulation build:

    python3 scripts/sim_mutants.py [--build-dir build-sim] [--only ID ...] [--list]

The sources are always restored (also on Ctrl-C); the build is brought back to them at the end.
Results go to stdout as a table and end with one `result: {json}` line.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The schedules of scripts/test.sh's simulated passes: the default (lanes forward, warps in
# lockstep) and the second one (lanes reversed, warps running ahead in reverse order).
SCHEDULES = [{}, {"EMBER_SIM_LANES": "rev", "EMBER_SIM_WARPS": "eager-rev"}]

# id, bug family, file, text, replacement, test binary target, ctest regex, what it breaks.
MUTANTS = [
    dict(id="flash-fragment-address", family="fragment address", file="ops/cuda/flash_attention.cu",
         old="return (lane & 15) * Tile<D>::pitch + (lane >> 4) * 8;",
         new="return (lane & 15) * Tile<D>::pitch + (lane >> 4) * 4;",
         target="test_ops", tests=r"^FlashAttentionCuda\.MatchesCpuContiguous$",
         what="ldmatrix.x4 A-operand lane address: the k 8-15 half read from k 4-11"),
    dict(id="flash-cp-async-wait", family="wrong cp.async wait", file="ops/cuda/flash_attention.cu",
         old="cp_async_wait<1>();", new="cp_async_wait<2>();", occurrence=1,
         target="test_ops", tests=r"^FlashAttentionCuda\.MatchesCpuContiguous$",
         what="forward: waits for all but two copy groups, so the current K/V tile may be in flight"),
    dict(id="flash-causal-off-by-one", family="mask off by one", file="ops/cuda/flash_attention.cu",
         old="if (jl >= kv_lim || (p.causal && jl > il + diag)) x = -INFINITY;",
         new="if (jl >= kv_lim || (p.causal && jl >= il + diag)) x = -INFINITY;",
         target="test_ops", tests=r"^FlashAttentionCuda\.MatchesCpuContiguous$",
         what="forward causal mask hides the diagonal key too"),
    dict(id="flash-quad-shuffle", family="shuffle width", file="ops/cuda/flash_attention.cu",
         old="return v + __shfl_xor_sync(0xffffffffu, v, 2);",
         new="return v + __shfl_xor_sync(0xffffffffu, v, 4);",
         target="test_ops", tests=r"^FlashAttentionCuda\.PackedFrontMatchesCpu$",
         what="row sum of P over the quad's lanes mixes in the next row's lanes"),
    dict(id="classifier-pad-off-by-one", family="mask off by one", file="ops/cuda/classifier.cu",
         old="x[j] = k * W + j < classes ? load_c(&p[u].v[j]) : kNegInf;",
         new="x[j] = k * W + j <= classes ? load_c(&p[u].v[j]) : kNegInf;",
         target="test_ops", tests=r"^ClassifierCuda\.MatchesCpuGpt2Vocabulary$",
         what="the first padding column of a vocabulary row joins the softmax"),
    dict(id="scan-missing-barrier", family="missing barrier", file="ops/cuda/sort.cu",
         old="      if (lane == 31) warp_total[warp] = v;\n      __syncthreads();\n",
         new="      if (lane == 31) warp_total[warp] = v;\n",
         target="test_ops", tests=r"^SortScanCuda\.Scans",
         what="block scan: warp 0 reads the other warps' totals before they are written"),
    dict(id="scan-product-identity", family="wrong reduction identity", file="ops/cuda/sort.cu",
         old="const A ident = kProd ? A(1) : A(0);", new="const A ident = A(0);",
         target="test_ops", tests=r"^SortScanCuda\.Scans",
         what="cumprod's identity 0: padding lanes and the carry zero every product"),
    dict(id="reduce-max-identity", family="wrong reduction identity", file="ops/cuda/reduce.cu",
         old="return is_max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();",
         new="return is_max ? C(0) : std::numeric_limits<C>::infinity();",
         target="test_ops", tests=r"^Devices/Reduce\.(HandComputed|AllDTypes).*/cuda",
         what="max/amax start from 0: rows of negative values reduce to 0"),
    dict(id="scan-32-bit-offset", family="32-bit index overflow", file="ops/cuda/sort.cu",
         old="A v = i < hi ? scan_load<S, A>(x + r * os + i * ns) : ident;",
         new="A v = i < hi ? scan_load<S, A>(x + int(r * os) + i * ns) : ident;",
         target="test_ops", tests=r"^LargeTensorsCuda\.SmallViewWithOffsetsPastTwoToTheThirtyOne$",
         what="scan row offset in 32 bits: row 1 of a view with a 2^31 + 4099 row stride"),
    dict(id="flash-atomic-dq-barrier", family="missing barrier", file="ops/cuda/flash_attention.cu",
         old="      __syncthreads();  // every warp's dS^T rows staged\n", new="",
         target="test_ops", tests=r"^FlashAttentionCuda\.AtomicDqIgnoresPaddingKeysUnderLowLse$",
         what="atomic dQ: warps read the other warps' dS^T rows before they are staged"),
    dict(id="flash-atomic-dq-padding-keys", family="mask off by one", file="ops/cuda/flash_attention.cu",
         old="kr < rows_k ? pack2<S>(dpt[n][0], dpt[n][1]) : 0u",
         new="kr <= rows_k ? pack2<S>(dpt[n][0], dpt[n][1]) : 0u",
         target="test_ops", tests=r"^FlashAttentionCuda\.AtomicDqIgnoresPaddingKeysUnderLowLse$",
         what="atomic dQ: the first key past Tk stages its (infinite) dS"),
    dict(id="pool-shuffle-width", family="shuffle width", file="ops/cuda/pool.cu",
         old="for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);",
         new="for (int off = 8; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);",
         target="test_ops", tests=r"^Cuda/PoolCuda\.",
         what="global average pool sums lanes 0-15 only"),
    dict(id="nccl-stream-order", family="stream-order slip", file="distributed/nccl/nccl_backend.cpp",
         old="const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(stream, ready, 0) : recorded;",
         new="const cudaError_t waited = recorded;",
         target="test_distributed", tests=r"^Distributed\.cuda_sim$",
         what="the communication stream no longer waits for the caller's stream before a collective"),
    dict(id="copy-cross-device-order", family="stream-order slip", file="core/cuda/runtime.cpp",
         old="  if (cross_device) stream.wait_stream(current_stream(src_device.index));\n",
         new="",
         target="test_core", tests=r"^CudaRuntime\.two_simulated_devices$",
         what="a copy between devices no longer waits for the source device's stream"),
    dict(id="allocator-record-stream", family="stream-order slip", file="core/cuda/caching_allocator.cpp",
         old="  caching_allocator(tensor.device().index).record_stream(storage->data(), stream);",
         new="  (void)storage, (void)stream;",
         target="test_core", tests=r"^CudaMemory\.|^CudaRuntime\.|^CudaGraph\.|^CudaStreamGpu\.",
         what="record_stream forgets the side stream: a block it still uses is reused at once"),
    dict(id="rope-pair-index", family="fragment address", file="ops/cuda/rope.cu",
         old="bb.v[0] = xr[(i0 + half) * sd];", new="bb.v[0] = xr[(i0 + half - 1) * sd];",
         target="test_ops", tests=r"^RopeSwigluCuda\.",
         what="strided rope pairs element i with i + half - 1"),
]


def run(cmd, env=None, timeout=None):
    return subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def apply(m):
    path = os.path.join(ROOT, m["file"])
    src = open(path).read()
    n = src.count(m["old"])
    k = m.get("occurrence")
    if (k is None and n != 1) or (k is not None and n < k):
        raise SystemExit(f"{m['id']}: the text occurs {n} times in {m['file']}; the mutant list is stale")
    at = -1
    for _ in range(k or 1):
        at = src.index(m["old"], at + 1)
    open(path, "w").write(src[:at] + m["new"] + src[at + len(m["old"]):])
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build-sim")
    ap.add_argument("--only", nargs="*", help="mutant ids")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test run")
    args = ap.parse_args()
    mutants = [m for m in MUTANTS if not args.only or m["id"] in args.only]
    if args.list:
        for m in MUTANTS:
            print(f"{m['id']:28} {m['family']:26} {m['file']}: {m['what']}")
        return 0
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1")
    env.setdefault("LSAN_OPTIONS", f"suppressions={ROOT}/tests/sanitizer/lsan.supp:print_suppressions=0")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    results = []
    touched = set()
    try:
        for m in mutants:
            t0 = time.time()
            original = apply(m)
            touched.add(m["file"])
            try:
                b = run(["ninja", "-C", args.build_dir, f"bin/{m['target']}"])
                if b.returncode != 0:
                    verdict, detail = "does not build", b.stdout[-400:]
                else:
                    verdict, detail = "survived", ""
                    for sched in SCHEDULES:
                        e = dict(env, **sched)
                        try:
                            r = run(["ctest", "--test-dir", args.build_dir, "-R", m["tests"], "--timeout",
                                     str(args.timeout), "--output-on-failure"], env=e, timeout=args.timeout * 4)
                            failed = r.returncode != 0
                            out = r.stdout
                        except subprocess.TimeoutExpired:
                            failed, out = True, "timed out"
                        if "No tests were found" in out:
                            raise SystemExit(f"{m['id']}: the regex {m['tests']} matches no test")
                        if failed:
                            lines = [l for l in out.splitlines() if "Failure" in l or "error" in l.lower()
                                     or "Expected" in l or "Which is" in l or "[cuda_sim]" in l]
                            verdict = "caught" + (" (second schedule)" if sched else "")
                            detail = " | ".join(lines[:3])[:300]
                            break
            finally:
                open(os.path.join(ROOT, m["file"]), "w").write(original)
            results.append(dict(id=m["id"], family=m["family"], file=m["file"], verdict=verdict,
                                seconds=round(time.time() - t0), detail=detail))
            print(f"{m['id']:28} {verdict:28} {results[-1]['seconds']:5d} s  {detail}", flush=True)
    finally:
        if touched:  # rebuild what the mutants touched, so the build matches the sources again
            run(["ninja", "-C", args.build_dir])
    caught = sum(r["verdict"].startswith("caught") for r in results)
    print("result: " + json.dumps(dict(mutants=len(results), caught=caught,
                                       survived=[r["id"] for r in results if r["verdict"] == "survived"],
                                       not_built=[r["id"] for r in results if r["verdict"] == "does not build"])))
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
