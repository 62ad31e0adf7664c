#!/usr/bin/env python3
"""The table h100x1-53.sh prints last, from the files it wrote in OUTDIR (standard library only).

  scripts/h100x1-53-summary.py OUTDIR

Per token count and kernel, over the bandwidth runs: the range of the runs' best passes (GB/s),
the median of their medians, % of the copy's read + write bandwidth, TFLOP/s, the roofline and
the % of it reached, the bound, and whether the issue's bar holds (memory-bound: at least 85% of
the copy's read + write bandwidth and of the read bandwidth; compute-bound: within 15% of the
roofline). Then the roofline's terms, the 1-16 token comparison, the selftest's streaming lines,
the replays' exit codes and the cuBLAS reference."""

import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    data = rec.get("result", {}).get("data") if isinstance(rec, dict) else rec
    return data if isinstance(data, list) else None


def gpus(pattern, outdir):
    """Device 0's figures of every file matching pattern, in run order."""
    out = []
    def run_no(p):
        return int(re.findall(r"\d+", os.path.basename(p))[-1])

    for p in sorted(glob.glob(os.path.join(outdir, pattern)), key=run_no):
        d = load(p)
        if d:
            out.append(d[0])
    return out


PCT = "{:.0f}%"


def rng(xs, fmt="{:.0f}"):
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def rows(runs):
    """{(tokens, kernel): [rate of each run]}"""
    by = {}
    for g in runs:
        peak_mhz = (g.get("roofline") or {}).get("tensor_peak_mhz")
        for k in g.get("kernels", []):
            by.setdefault((k["tokens"], k["kernel"]), []).append(dict(k, peak_mhz=peak_mhz))
    return by


def main(outdir):
    runs = gpus("bw-*.json", outdir)
    small = gpus("small-*.json", outdir)
    if runs:
        g = runs[0]
        print(f"# {g['name']}, pool {g['bytes'] / 2**30:.1f} GiB, L2 {g['l2_bytes'] / 2**20:.0f} MiB; {len(runs)} bandwidth runs, best of 20 passes each")
        print(f"copy r+w GB/s {rng([r['copy_rw_gbps'] for r in runs])}, copy read {rng([r['copy_read_gbps'] for r in runs])}")
        roofs = [r["roofline"] for r in runs if r.get("roofline")]
        if roofs:
            print(f"read bandwidth (CUDA cores, 1 token) GB/s {rng([r['read_gbps'] for r in roofs])}")
            print(f"tensor-core peak (mma_peak) TFLOP/s {rng([r['tensor_peak_tflops'] for r in roofs], '{:.1f}')}, "
                  f"stream_mma at {roofs[0]['l2_tokens']} tokens from L2 {rng([r['l2_tflops'] for r in roofs], '{:.1f}')}, "
                  f"knee {rng([r['knee_tokens'] for r in roofs])} tokens")
            pk = [r["tensor_peak_mhz"] for r in roofs if r.get("tensor_peak_mhz")]
            if pk:
                print(f"SM clock as mma_peak's best launch ended (sm_clock, global-timer MHz) {rng(pk)}; "
                      "clock: each row's best pass against its run's mma_peak clock")
        print()
        print(f"{'tokens':>6} {'kernel':<12} {'GB/s best':>11} {'median':>7} {'%copy r+w':>10} {'%read':>6} {'TFLOP/s':>11} {'roofline':>9} {'%roof':>9} {'bound':>8} {'clock':>9} {'%at clock':>9}  bar")
        read = statistics.median([r["read_gbps"] for r in roofs]) if roofs else None
        for (t, kern), ks in sorted(rows(runs).items()):
            best = [k["gbps"] for k in ks]
            med = statistics.median([k["gbps_median"] for k in ks])
            pct = [k["pct_copy_rw"] for k in ks]
            pread = [100 * b / read for b in best] if read else []
            roof = [k["roofline_tflops"] for k in ks if k.get("roofline_tflops")]
            proof = [k["pct_roofline"] for k in ks if k.get("pct_roofline")]
            bound = ks[0].get("bound") or "-"
            bar = "-"
            if kern == "tensor_cores" and read:
                if bound == "memory":
                    ok = min(pct) >= 85 and min(pread) >= 85
                    bar = f"{'ok' if ok else 'MISSED'} (>=85% of copy r+w and of read)"
                else:
                    ok = min(proof) >= 85
                    bar = f"{'ok' if ok else 'MISSED'} (within 15% of the roofline)"
            tf = rng([k["tflops"] for k in ks], "{:.1f}")
            mhz = rng([100 * k["sm_mhz"] / k["peak_mhz"] for k in ks if k.get("sm_mhz") and k.get("peak_mhz")], PCT)
            atc = rng([k["pct_roofline_at_clock"] for k in ks if k.get("pct_roofline_at_clock")], PCT)
            print(f"{t:>6} {kern:<12} {rng(best):>11} {med:>7.0f} {rng(pct, PCT):>10} {rng(pread, PCT):>6} "
                  f"{tf:>11} {rng(roof, '{:.1f}'):>9} {rng(proof, PCT):>9} {bound:>8} {mhz:>9} {atc:>9}  {bar}")
    ab = {side: gpus(f"ab-{side}-*.json", outdir) for side in ("base", "new")}
    if ab["base"] or ab["new"]:
        print()
        print("A/B, alternating runs (base, new, base, ...): tensor cores, % of each run's roofline "
              "(best pass) and, in brackets, % at the pass's own SM clock")
        for side in ("base", "new"):
            for (t, kern), ks in sorted(rows(ab[side]).items()):
                if kern != "tensor_cores":
                    continue
                vals = " ".join(f"{k['pct_roofline']:.1f}({k.get('pct_roofline_at_clock') or 0:.0f})"
                                for k in ks if k.get("pct_roofline"))
                print(f"  {side:<4} T={t:<4} {vals}")
    if small:
        print()
        print(f"1-16 tokens side by side ({len(small)} runs; GB/s, range of the runs' best passes)")
        by = rows(small)
        for t in sorted({t for t, _ in by}):
            c = [k["gbps"] for k in by.get((t, "cuda_cores"), [])]
            m = [k["gbps"] for k in by.get((t, "tensor_cores"), [])]
            faster = "-"
            if c and m:
                faster = "CUDA cores" if statistics.median(c) > statistics.median(m) else "tensor cores"
            print(f"  T={t:<3} CUDA cores {rng(c):>11}   tensor cores {rng(m):>11}   faster (median): {faster}")
    st = os.path.join(outdir, "selftest.txt")
    if os.path.exists(st):
        print()
        for line in open(st, errors="replace"):
            if "streaming kernel" in line or line.startswith("selftest:"):
                print(line.rstrip()[:300])
    cmds = os.path.join(outdir, "commands.txt")
    if os.path.exists(cmds):
        print()
        for line in open(cmds):
            if re.match(r"^(verify|torch|selftest|bw|small|mid|ncu)\S* (rc=|: skipped)", line):
                print(line.rstrip())
    nc = os.path.join(outdir, "ncu.txt")
    if os.path.exists(nc):
        print()
        print("ncu (per profiled launch: DRAM throughput, SM throughput, tensor pipe active, warps "
              "active, warp instructions, MMA instructions)")
        cur, vals = None, []
        keys = ("DRAM Throughput", "Compute (SM) Throughput", "hmma_cycles_active", "warps_active",
                "smsp__inst_executed.sum", "inst_executed_pipe_tensor_op_hmma")
        for line in list(open(nc, errors="replace")) + ["  end (0, 0, 0)x"]:
            m = re.match(r"^\s+(\w+) \(\d+, \d+, \d+\)x", line)
            if m:
                if cur:
                    print(f"  {cur}: " + ", ".join(vals))
                cur, vals = m.group(1), []
            elif cur and any(k in line for k in keys):
                parts = line.split()
                vals.append(f"{parts[0].split('.')[0]} {parts[-1]}")
    # the one-rank verifies: the routed experts as replayed, the compute against its prediction
    # (bytes / the rate at each token count + launches x fixed cost, same run)
    vs = sorted(glob.glob(os.path.join(outdir, "verify-*.txt")),
                key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0))
    if vs:
        print()
        print("verify, Kimi-K2.5 TP8 one rank: compute against bytes / rate + launches (same run)")
    for p in vs:
        name = os.path.basename(p)[:-4]
        table = True  # the headline table (median, p99, stddev, per collective), not the pass's
        for line in open(p, errors="replace"):
            if line.startswith("# in collectives"):
                table = False
            if line.startswith(("# compute prediction:", "# note: compute prediction", "Error")):
                print(f"  {name}: {line.strip()[:900]}")
            elif table and re.match(r"^\s+(compute|full)\s+(eager|graph)\s", line):
                print(f"  {name}: {' '.join(line.split()[:6])}")
    tj = os.path.join(outdir, "torch.json")
    if os.path.exists(tj):
        t = json.load(open(tj))
        print()
        print(f"cuBLAS (PyTorch {t['torch']}), reference: 8192^3 bf16 {t['gemm_8192_tflops']:.0f} TFLOP/s; "
              "y = x W^T, W 16384 x 7168: " + ", ".join(f"T={r['tokens']} {r['gbps']:.0f} GB/s {r['tflops']:.0f} TF" for r in t["gemm_decode"]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
