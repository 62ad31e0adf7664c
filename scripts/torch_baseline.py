#!/usr/bin/env python3
"""The PyTorch peer baseline of `verifybench verify`.

Replays the collectives of the same verify schedule (the JSON of `verifybench plan --format
json`) with torch.distributed over NCCL, one process per GPU, eager and inside a
torch.cuda.CUDAGraph, times every replay of the whole schedule with CUDA events, takes the
slowest rank per replay (as verifybench does), checks every all-reduce, all-gather and
reduce-scatter result exactly, and writes a verifybench result record (schema_version 1,
kind "verify", provenance backend "torch") that `verifybench compare` reads.

    verifybench plan --format json --model kimi-k2.5 --tp 2 --tokens 3 > plan.json
    python3 scripts/torch_baseline.py --schedule plan.json -n 200 -w 20 --out torch.json

    # or let the script ask verifybench for the plan:
    python3 scripts/torch_baseline.py --model kimi-k2.5 --tp 2 --tokens 3 --out torch.json

    # torchrun-compatible: with RANK/WORLD_SIZE/LOCAL_RANK set, each process runs one rank
    torchrun --nproc-per-node 2 scripts/torch_baseline.py --schedule plan.json --out torch.json

Only the collectives are replayed (mode "comm"); compute ops of the schedule are skipped.
The pure parts (schedule parsing, workload fingerprint, statistics, record building) need no
torch: `--self-test` checks them and `--dry-run` writes a record from synthetic samples
(labelled modeled) so the record format can be tested on any machine.
"""

import argparse
import datetime
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time

SCHEMA_VERSION = 1
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
DTYPE_SIZE = {"bf16": 2, "f16": 2, "f32": 4}


class UsageError(Exception):
    """Input the user can fix; exits with code 2 and one line."""


# ---------------------------------------------------------------------------------------------
# Pure parts: no torch needed.
# ---------------------------------------------------------------------------------------------


def parse_schedule(text, source="schedule"):
    """Parses the JSON of `verifybench plan --format json` and checks what the replay needs."""
    try:
        s = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{source}: not JSON ({e}); pass the output of `verifybench plan --format json`")
    if not isinstance(s, dict) or not isinstance(s.get("ops"), list):
        raise UsageError(f"{source}: no 'ops' list; pass the output of `verifybench plan --format json`")
    for key in ("model", "phase", "tp", "tokens", "dtype"):
        if key not in s:
            raise UsageError(f"{source}: missing '{key}'")
    if not isinstance(s["tp"], int) or s["tp"] < 1:
        raise UsageError(f"{source}: 'tp' must be a positive integer")
    for i, op in enumerate(s["ops"]):
        if op.get("op") == "collective":
            if op.get("kind") not in COLLECTIVE_KINDS:
                raise UsageError(f"{source}: op {i}: unknown collective '{op.get('kind')}'")
            if op.get("dtype") not in DTYPE_SIZE:
                raise UsageError(f"{source}: op {i}: unknown dtype '{op.get('dtype')}'")
            if not isinstance(op.get("count"), int) or op["count"] < 1:
                raise UsageError(f"{source}: op {i}: 'count' must be a positive integer")
            if op["kind"] == "reduce_scatter" and op["count"] % s["tp"] != 0:
                raise UsageError(f"{source}: op {i}: reduce_scatter count {op['count']} is not a multiple of tp")
        elif op.get("op") != "compute":
            raise UsageError(f"{source}: op {i}: unknown op '{op.get('op')}'")
    return s


def collectives(schedule):
    """The collective ops of a schedule, in order."""
    return [op for op in schedule["ops"] if op.get("op") == "collective"]


def schedule_hash(schedule):
    """verifybench's schedule fingerprint: FNV-1a 64 over the compact JSON of
    (ops, tp, tokens, dtype), with the keys in the order verifybench writes them."""
    text = json.dumps(
        [schedule["ops"], schedule["tp"], schedule["tokens"], schedule["dtype"]],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def workload_of(schedule):
    """The `Workload` of verifybench's result record for this schedule."""

    def first_bytes(kind):
        for op in collectives(schedule):
            if op["kind"] == kind:
                return op["bytes_per_rank"]
        return 0

    def count(kind):
        return sum(1 for op in collectives(schedule) if op["kind"] == kind)

    def streamed(kv):
        return sum(
            op.get("weight_bytes", 0)
            for op in schedule["ops"]
            if op.get("op") == "compute" and (op.get("kind") == "kv_cache") == kv
        )

    context = schedule.get("context", 0)
    w = {
        "model": schedule["model"],
        "phase": schedule["phase"],
        "tp": schedule["tp"],
        "tokens": schedule["tokens"],
        "dtype": schedule["dtype"],
        "schedule_hash": schedule_hash(schedule),
        "n_all_reduce": count("all_reduce"),
        "n_all_gather": count("all_gather"),
        "all_reduce_bytes_per_rank": first_bytes("all_reduce"),
        "all_gather_bytes_per_rank": first_bytes("all_gather"),
        "weight_bytes_per_rank": streamed(False),
        "concurrency": schedule.get("concurrency", 1),
        "context": context,
    }
    if schedule.get("kv") is not None:
        w["kv"] = schedule["kv"]
    if context > 0:
        w["kv_bytes_per_rank"] = streamed(True)
    formats = {k: format_label(f) for k, f in schedule.get("weight_formats", {}).items()}
    if formats:
        w["weight_formats"] = formats
    if schedule.get("weights_override") is not None:
        w["weights_override"] = schedule["weights_override"]
    return w


def format_label(f):
    """verifybench's short name of a weight format (`int4-g32`), from the plan's JSON of it."""
    kind = f["format"]
    if kind == "fp8_block":
        return f"fp8-block{f['block']}"
    if kind == "int4_group":
        return f"int4-g{f['group']}"
    if kind == "int4_group_zero":
        return f"int4-g{f['group']}-zp"
    if kind == "int8_channel":
        return "8bit-channel"
    return kind  # bf16, mxfp4, nvfp4


def quantile_sorted(s, q):
    """Quantile q of sorted data, linear interpolation (R-7), as verifybench computes it."""
    q = min(max(q, 0.0), 1.0)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mad_outliers(s):
    """Samples further than 3.5 modified z-scores (MAD-based) from the median."""
    med = quantile_sorted(s, 0.5)
    mad = quantile_sorted(sorted(abs(x - med) for x in s), 0.5)
    if mad == 0.0:
        return sum(1 for x in s if x != med)
    return sum(1 for x in s if abs(0.6745 * (x - med) / mad) > 3.5)


def summary(samples):
    """verifybench's `Summary` of microsecond samples; None for an empty or non-finite set."""
    if not samples or any(not math.isfinite(x) for x in samples):
        return None
    s = sorted(float(x) for x in samples)
    n = len(s)
    total = 0.0
    for x in s:
        total += x
    mean = total / n
    var = 0.0
    if n > 1:
        for x in s:
            d = x - mean
            var += d * d
        var /= n - 1
    return {
        "n": n,
        "median_us": quantile_sorted(s, 0.5),
        "mean_us": mean,
        "stddev_us": math.sqrt(var),
        "min_us": s[0],
        "max_us": s[-1],
        "p99_us": quantile_sorted(s, 0.99),
        "outliers": mad_outliers(s),
    }


def max_over_ranks(per_rank):
    """Per-replay time of the whole group: the slowest rank of each replay."""
    return [max(col) for col in zip(*per_rank)]


def now_utc():
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def verify_run(graph, samples_us, wrong, iterations, warmup, n_collectives):
    """One `VerifyRun` (mode comm) from per-verify samples in microseconds."""
    summ = summary(samples_us)
    if summ is None:
        raise ValueError("no finite samples")
    return {
        "graph": bool(graph),
        "mode": "comm",
        "per_verify": summ,
        "per_collective_us": summ["median_us"] / max(n_collectives, 1),
        "breakdown": [],
        "wrong": int(wrong),
        "iterations": int(iterations),
        "warmup": int(warmup),
    }


def build_record(schedule, runs, provenance, source="measured"):
    """A verifybench result record (kind verify) from finished runs and provenance fields."""
    base = {
        "tool_version": "torch unknown",
        "git_commit": "unknown",
        "command_line": [],
        "host": socket.gethostname(),
        "started_utc": now_utc(),
        "finished_utc": now_utc(),
        "backend": "torch",
        "launcher": None,
        "gpus": [],
        "driver_version": None,
        "nccl_version": None,
        "nccl_library": None,
        "workers": [],
        "model_profile": None,
        "notes": [],
    }
    unknown = set(provenance) - set(base)
    if unknown:
        raise ValueError(f"unknown provenance fields: {sorted(unknown)}")
    base.update(provenance)
    return {
        "schema_version": SCHEMA_VERSION,
        "source": source,
        "provenance": base,
        "kind": "verify",
        "result": {"workload": workload_of(schedule), "runs": runs},
    }


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def nccl_env():
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}


def loaded_library(fragment):
    """Path of a shared library mapped into this process whose name contains `fragment`."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def load_schedule(args):
    """The schedule from --schedule FILE, or from `verifybench plan --format json`."""
    if args.schedule:
        try:
            with open(args.schedule) as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"cannot read schedule '{args.schedule}': {e.strerror}")
        return parse_schedule(text, f"schedule '{args.schedule}'")
    exe = find_verifybench(args.verifybench)
    cmd = [exe, "plan", "--format", "json", "--model", args.model, "--tokens", str(args.tokens)]
    if args.tp is not None:
        cmd += ["--tp", str(args.tp)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise UsageError(f"cannot run '{exe}': {e.strerror}")
    if out.returncode != 0:
        msg = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        raise UsageError(f"`{' '.join(cmd)}` failed: {msg}")
    return parse_schedule(out.stdout, "verifybench plan")


def find_verifybench(given):
    if given:
        return given
    if os.environ.get("VERIFYBENCH"):
        return os.environ["VERIFYBENCH"]
    on_path = shutil.which("verifybench")
    if on_path:
        return on_path
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = [os.path.join(root, "target", prof, "verifybench") for prof in ("release", "debug")]
    built = [p for p in built if os.path.exists(p)]
    if built:
        return max(built, key=os.path.getmtime)  # the most recent build of this checkout
    raise UsageError("cannot find verifybench: pass --schedule FILE, --verifybench PATH, or put it on PATH")


def human_line(label, run):
    p = run["per_verify"]
    return (
        f"torch {label}: median {p['median_us']:.1f} us/verify ({run['per_collective_us']:.2f} us/collective), "
        f"p99 {p['p99_us']:.1f} us, n {p['n']}, wrong {run['wrong']}"
    )


# ---------------------------------------------------------------------------------------------
# The replay: torch only from here on.
# ---------------------------------------------------------------------------------------------


def busy_wait(seconds):
    """Spends `seconds` of CPU time before a launch, as a busy engine's host code does (a sleep
    would be far coarser than the microseconds asked for)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def parse_host_delay(text):
    """`RANK:US` -> (rank, microseconds)."""
    try:
        r, us = text.split(":")
        r, us = int(r), float(us)
    except ValueError:
        raise UsageError(f"--host-delay-us takes RANK:US, e.g. 1:200 (got '{text}')")
    if r < 0 or not (0 <= us <= 1e6):
        raise UsageError(f"--host-delay-us {text}: the rank must be >= 0 and US within 0..1e6")
    return r, us


def torch_dtype(torch, name, cpu_gloo):
    if cpu_gloo:
        return torch.float32  # gloo's bf16 support varies by version; the test mode needs none
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


class Replay:
    """Preallocated buffers (one per collective) and the calls that replay the schedule."""

    def __init__(self, torch, dist, schedule, rank, world, device, cpu_gloo, host_delay=None):
        self.torch, self.dist = torch, dist
        # Gathers and checks follow the ranks present; message sizes follow the schedule
        # (with --world smaller than the schedule's tp, each rank sends the per-rank sizes of
        # the schedule's tp).
        self.tp = world
        self.rank = rank
        self.cpu_gloo = cpu_gloo
        # (rank, seconds): that rank busy-waits before every collective it launches eagerly.
        self.delay_s = host_delay[1] / 1e6 if host_delay and host_delay[0] == rank else 0.0
        self.capturing = False
        self.ops = []
        for op in collectives(schedule):
            dt = torch_dtype(torch, op["dtype"], cpu_gloo)
            n = op["count"]
            if op["kind"] == "all_reduce":
                buf = torch.empty(n, dtype=dt, device=device)
                self.ops.append(("all_reduce", buf, None))
            elif op["kind"] == "all_gather":
                inp = torch.empty(n, dtype=dt, device=device)
                out = torch.empty(n * self.tp, dtype=dt, device=device)
                self.ops.append(("all_gather", inp, out))
            else:
                inp = torch.empty(n, dtype=dt, device=device)
                out = torch.empty(n // self.tp, dtype=dt, device=device)
                self.ops.append(("reduce_scatter", inp, out))
        self.expected_gather = {}

    def fill(self, reduce_value=None):
        """Rank r contributes r+1 everywhere (exact in bf16); `reduce_value` overrides the
        all-reduce buffers (0 keeps them finite over many in-place replays)."""
        v = float(self.rank + 1)
        for kind, a, _ in self.ops:
            if kind == "all_reduce" and reduce_value is not None:
                a.fill_(reduce_value)
            else:
                a.fill_(v)

    def run(self):
        dist = self.dist
        for kind, a, b in self.ops:
            if self.delay_s and not self.capturing:
                busy_wait(self.delay_s)
            if kind == "all_reduce":
                dist.all_reduce(a)
            elif kind == "all_gather":
                if self.cpu_gloo:
                    dist.all_gather(list(b.chunk(self.tp)), a)
                else:
                    dist.all_gather_into_tensor(b, a)
            else:
                if self.cpu_gloo:
                    tmp = a.clone()
                    dist.all_reduce(tmp)
                    b.copy_(tmp.chunk(self.tp)[self.rank])
                else:
                    dist.reduce_scatter_tensor(b, a)

    def wrong(self, reduce_expected):
        """Elements on this rank that differ from the exact result."""
        torch = self.torch
        s = float(self.tp * (self.tp + 1) // 2)
        bad = 0
        for kind, a, b in self.ops:
            if kind == "all_reduce":
                bad += int((a != reduce_expected).sum().item())
            elif kind == "all_gather":
                key = (b.numel(), b.dtype)
                if key not in self.expected_gather:
                    per = b.numel() // self.tp
                    idx = torch.arange(self.tp, device=b.device).repeat_interleave(per) + 1
                    self.expected_gather[key] = idx.to(b.dtype)
                bad += int((b != self.expected_gather[key]).sum().item())
            else:
                bad += int((b != s).sum().item())
        return bad


def worker(local_rank, args, schedule, world, rank_offset, port):
    import torch
    import torch.distributed as dist

    rank = rank_offset + local_rank
    cpu = args.cpu_gloo
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    if cpu:
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    timeout = datetime.timedelta(seconds=args.timeout)
    kw = {}
    if not cpu:
        try:
            import inspect

            if "device_id" in inspect.signature(dist.init_process_group).parameters:
                kw["device_id"] = device
        except (TypeError, ValueError):
            pass
    dist.init_process_group(
        "gloo" if cpu else "nccl", rank=rank, world_size=world, timeout=timeout, **kw
    )
    started = now_utc()
    try:
        result = replay_all(torch, dist, args, schedule, rank, world, device, cpu)
        if rank == 0:
            write_result(torch, args, schedule, result, started, world, cpu)
        if not cpu:
            torch.cuda.synchronize()
        dist.barrier()
    finally:
        # On an error the other ranks are ended by the launcher; never wait for them here.
        dist.destroy_process_group()
    return sum(r["wrong"] for r in result["runs"])


def replay_all(torch, dist, args, schedule, rank, world, device, cpu):
    r = Replay(torch, dist, schedule, rank, world, device, cpu, args.host_delay)
    ncoll = len(r.ops)
    s_expected = float(world * (world + 1) // 2)
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.graph]
    if cpu and True in modes:
        if rank == 0:
            print("torch_baseline: --cpu-gloo has no CUDA graphs; eager only", file=sys.stderr)
        modes = [False]

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    def timed(step):
        """Per-replay times (us) on this rank: CUDA events around each replay of the schedule,
        read after the last one; wall clock in --cpu-gloo mode."""
        if cpu:
            out = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                step()
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(args.iters)]
        for a, b in ev:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in ev]

    def gather_samples(samples):
        t = torch.tensor(samples, dtype=torch.float64, device=device)
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        return max_over_ranks([p.tolist() for p in parts])

    def total_wrong(n):
        t = torch.tensor([n], dtype=torch.int64, device=device)
        dist.all_reduce(t)
        return int(t.item())

    runs = {}
    graph = None
    for g in modes:
        if not g:
            # Check one replay exactly, then time on buffers whose all-reduce values stay 0.
            r.fill()
            r.run()
            sync()
            bad = r.wrong(s_expected)
            r.fill(reduce_value=0.0)
            for _ in range(args.warmup):
                r.run()
            sync()
            samples = timed(r.run)
            sync()
            bad += r.wrong(0.0)
        else:
            # NCCL needs warm-up collectives before capture; capture the whole schedule once.
            r.fill(reduce_value=0.0)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(max(args.warmup, 1)):
                    r.run()
            torch.cuda.current_stream().wait_stream(side)
            sync()
            dist.barrier()
            graph = torch.cuda.CUDAGraph()
            r.capturing = True
            with torch.cuda.graph(graph):
                r.run()
            r.capturing = False
            sync()
            r.fill()
            graph.replay()
            sync()
            bad = r.wrong(s_expected)
            r.fill(reduce_value=0.0)
            for _ in range(args.warmup):
                graph.replay()
            sync()
            samples = timed(graph.replay)
            sync()
            bad += r.wrong(0.0)
        if args.profile:
            profile_steps(torch, args, rank, "graph" if g else "eager",
                          graph.replay if g else r.run, sync)
            dist.barrier()
        per_verify = gather_samples(samples)
        runs[g] = verify_run(g, per_verify, total_wrong(bad), args.iters, args.warmup, ncoll)
    if graph is not None:
        sync()
        del graph
    info = {
        "rank": rank,
        "pid": os.getpid(),
        "device": device.index if device.index is not None else 0,
        "nccl_env": nccl_env(),
        "torch_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("TORCH_NCCL_")},
    }
    workers = [None] * world
    dist.all_gather_object(workers, info)
    return {"runs": [runs[g] for g in modes], "workers": workers}


def profile_steps(torch, args, rank, mode, step, sync):
    """Runs --profile-steps replays under torch.profiler (CPU and CUDA activity, record_shapes,
    so c10d's record_param_comms events carry the collective's arguments), each replay inside
    a record_function("verify_step"), and writes a gzipped Kineto trace per rank:
    DIR/<mode>-rank-<rank>.trace.json.gz."""
    import gzip

    from torch.profiler import ProfilerActivity, profile, record_function

    os.makedirs(args.profile, exist_ok=True)
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(args.profile_steps):
            with record_function("verify_step"):
                step()
        sync()
    raw = os.path.join(args.profile, f"{mode}-rank-{rank}.trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)


def gpu_infos(torch, world):
    out = []
    for i in range(min(world, torch.cuda.device_count())):
        p = torch.cuda.get_device_properties(i)
        dom, bus, dev = (getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
        pci = f"{dom:04X}:{bus:02X}:{dev:02X}.0" if None not in (dom, bus, dev) else "unknown"
        out.append({"index": i, "name": p.name, "pci_bus_id": pci, "memory_bytes": int(p.total_memory)})
    return out


def driver_version():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def write_result(torch, args, schedule, result, started, world, cpu):
    clock = "the wall clock" if cpu else "CUDA events"
    notes = [
        "PyTorch peer: torch.distributed c10d collectives, one preallocated tensor per collective, "
        f"timed with {clock} around each replay of the whole schedule, slowest rank per replay",
        "only the collectives of the schedule are replayed (mode comm); each result is checked "
        "exactly in a replay before timing and again after the timed replays",
    ]
    torch_env = sorted({f"{k}={v}" for w in result["workers"] for k, v in w["torch_env"].items()})
    if torch_env:
        notes.append("TORCH_NCCL_* seen by the workers: " + " ".join(torch_env))
    if world != schedule["tp"]:
        notes.append(f"--world {world}: {world} rank(s) replayed the per-rank message sizes of the TP-{schedule['tp']} schedule")
    if args.host_delay:
        notes.append(f"--host-delay-us {args.host_delay[0]}:{args.host_delay[1]:g}: rank {args.host_delay[0]} "
                     "busy-waited that long before every eager collective")
    if cpu:
        notes.append("--cpu-gloo test mode: gloo on CPU, f32 buffers, wall-clock timing; not comparable to GPU runs")
    nccl = None
    if not cpu and hasattr(torch.cuda, "nccl"):
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - provenance is best effort
            nccl = None
    prov = {
        "tool_version": f"torch {torch.__version__}",
        "git_commit": git_commit(),
        "command_line": [sys.executable] + sys.argv,
        "started_utc": started,
        "finished_utc": now_utc(),
        "launcher": "torchrun" if "LOCAL_RANK" in os.environ and args._torchrun else "torch.multiprocessing.spawn",
        "gpus": [] if cpu else gpu_infos(torch, world),
        "driver_version": None if cpu else driver_version(),
        "nccl_version": nccl,
        "nccl_library": None if cpu else loaded_library("libnccl"),
        "workers": [{k: w[k] for k in ("rank", "pid", "device", "nccl_env")} for w in result["workers"]],
        "notes": notes,
    }
    rec = build_record(schedule, result["runs"], prov)
    emit(rec, args.out)
    for run in result["runs"]:
        print(human_line("graph" if run["graph"] else "eager", run), file=sys.stderr)


def emit(rec, out):
    text = json.dumps(rec, indent=2) + "\n"
    if out and out != "-":
        d = os.path.dirname(os.path.abspath(out))
        os.makedirs(d, exist_ok=True)
        tmp = f"{out}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    else:
        sys.stdout.write(text)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dry_run(args, schedule):
    """A record from synthetic samples (no torch, no GPU), labelled modeled: tests the format."""
    ncoll = len(collectives(schedule))
    runs = []
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.graph]
    for g in modes:
        base = 4.0 if g else 9.0
        samples = [ncoll * base + (i * 7919 % 101) / 10.0 for i in range(args.iters)]
        runs.append(verify_run(g, samples, 0, args.iters, args.warmup, ncoll))
    prov = {
        "tool_version": "torch (dry run)",
        "git_commit": git_commit(),
        "command_line": [sys.executable] + sys.argv,
        "launcher": None,
        "notes": ["dry run: synthetic samples, no collectives were run; not a measurement"],
    }
    emit(build_record(schedule, runs, prov, source="modeled"), args.out)
    return 0


def self_test():
    """Checks of the pure parts; returns the number of failures."""
    fails = []

    def check(cond, what):
        if not cond:
            fails.append(what)

    s = summary([5.0, 1.0, 3.0, 2.0, 4.0])
    check(s["n"] == 5 and s["median_us"] == 3.0 and s["mean_us"] == 3.0, "summary basics")
    check(abs(s["stddev_us"] - math.sqrt(2.5)) < 1e-12, "sample stddev")
    check(abs(s["p99_us"] - 4.96) < 1e-12 and s["outliers"] == 0, "p99 interpolates")
    check(summary([1.0, 2.0, 3.0, 10.0])["median_us"] == 2.5, "even median")
    v = [10.0 + (i % 5) * 0.1 for i in range(100)] + [50.0]
    check(summary(v)["outliers"] == 1, "MAD flags a far sample")
    check(summary([7.0] * 50 + [9.0])["outliers"] == 1, "zero MAD, one odd value")
    check(summary([]) is None and summary([1.0, float("nan")]) is None, "empty and nan")
    check(max_over_ranks([[1, 5, 3], [2, 4, 6]]) == [2, 5, 6], "max over ranks per replay")
    sched = {
        "model": "m", "phase": "verify", "tp": 2, "tokens": 1, "dtype": "bf16",
        "ops": [
            {"op": "collective", "kind": "all_reduce", "dtype": "bf16", "count": 4,
             "bytes_per_rank": 8, "site": "attention", "layer": 0},
            {"op": "compute", "kind": "attention", "weight_bytes": 100, "layer": 0},
            {"op": "collective", "kind": "all_gather", "dtype": "bf16", "count": 8,
             "bytes_per_rank": 16, "site": "logits", "layer": None},
        ],
    }
    w = workload_of(parse_schedule(json.dumps(sched)))
    check((w["n_all_reduce"], w["n_all_gather"]) == (1, 1), "collective counts")
    check((w["all_reduce_bytes_per_rank"], w["all_gather_bytes_per_rank"], w["weight_bytes_per_rank"])
          == (8, 16, 100), "workload bytes")
    check(len(w["schedule_hash"]) == 16, "hash is 16 hex digits")
    for bad, what in (("[]", "not an object"), ('{"ops": 1}', "ops not a list"),
                      ('{"model":"m","phase":"verify","tp":2,"tokens":1,"dtype":"bf16",'
                       '"ops":[{"op":"collective","kind":"broadcast"}]}', "unknown collective")):
        try:
            parse_schedule(bad)
            fails.append(f"schedule {what} accepted")
        except UsageError:
            pass
    rec = build_record(sched, [verify_run(True, [10.0, 12.0], 0, 2, 1, 2)], {"backend": "torch"})
    check(rec["kind"] == "verify" and rec["schema_version"] == 1, "record header")
    check(rec["result"]["runs"][0]["per_collective_us"] == 5.5, "per-collective time")
    json.dumps(rec, allow_nan=False)
    for f in fails:
        print(f"self-test FAILED: {f}", file=sys.stderr)
    if not fails:
        print("self-test: all checks passed", file=sys.stderr)
    return len(fails)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_baseline.py",
        description="PyTorch (c10d/NCCL) replay of verifybench's verify schedule; writes a verifybench record.",
    )
    p.add_argument("--schedule", metavar="FILE",
                   help="schedule JSON from `verifybench plan --format json` (else the script runs verifybench plan)")
    p.add_argument("--model", default="kimi-k2.5", help="model preset for `verifybench plan` (without --schedule)")
    p.add_argument("--tp", type=int, help="tensor-parallel size for `verifybench plan` (without --schedule)")
    p.add_argument("--tokens", type=int, default=3, help="tokens per verify for `verifybench plan`")
    p.add_argument("--verifybench", metavar="PATH", help="verifybench binary (default: $VERIFYBENCH, PATH, target/)")
    p.add_argument("--graph", choices=("on", "off", "both"), default="both",
                   help="replay eagerly (off), inside a torch.cuda.CUDAGraph (on), or both")
    p.add_argument("-n", "--iters", type=int, default=100, help="timed replays of the whole schedule")
    p.add_argument("-w", "--warmup", type=int, default=10, help="untimed replays before timing")
    p.add_argument("--out", metavar="FILE", help="write the record here (default: stdout)")
    p.add_argument("--timeout", type=int, default=300, help="seconds before a rendezvous or collective gives up")
    p.add_argument("--cpu-gloo", action="store_true",
                   help="test mode: gloo on CPU processes, eager only, wall-clock timing (no GPU needed)")
    p.add_argument("--dry-run", action="store_true",
                   help="no torch: write a record from synthetic samples, labelled modeled (tests the format)")
    p.add_argument("--self-test", action="store_true", help="check the pure parts (no torch) and exit")
    p.add_argument("--world", type=int,
                   help="ranks to run (default: the schedule's tp); fewer replay the per-rank sizes of the schedule's tp")
    p.add_argument("--profile", metavar="DIR",
                   help="after timing, profile --profile-steps replays per mode with torch.profiler into DIR")
    p.add_argument("--profile-steps", type=int, default=3, help="replays recorded by --profile")
    p.add_argument("--host-delay-us", metavar="RANK:US",
                   help="rank RANK busy-waits US microseconds before every collective it launches eagerly (a late rank)")
    p.add_argument("--summarize", action="store_true",
                   help="print the statistics summary of numbers read from stdin as JSON and exit")
    p.add_argument("--print-workload", action="store_true",
                   help="print the workload (with its schedule hash) of the schedule as JSON and exit")
    a = p.parse_args(argv)
    if a.iters < 1:
        raise UsageError("-n/--iters must be at least 1")
    if a.warmup < 0:
        raise UsageError("-w/--warmup must be at least 0")
    if a.tp is not None and a.tp < 1:
        raise UsageError("--tp must be at least 1")
    if a.world is not None and a.world < 1:
        raise UsageError("--world must be at least 1")
    if a.profile_steps < 1:
        raise UsageError("--profile-steps must be at least 1")
    a.host_delay = parse_host_delay(a.host_delay_us) if a.host_delay_us else None
    return a


def main(argv):
    a = parse_args(argv)
    if a.self_test:
        return 1 if self_test() else 0
    if a.summarize:
        try:
            xs = [float(t) for t in sys.stdin.read().split()]
        except ValueError as e:
            raise UsageError(f"--summarize reads numbers: {e}")
        print(json.dumps(summary(xs)))
        return 0
    schedule = load_schedule(a)
    if a.print_workload:
        print(json.dumps(workload_of(schedule)))
        return 0
    if not collectives(schedule):
        raise UsageError("the schedule has no collectives to replay")
    if a.dry_run:
        return dry_run(a, schedule)

    # Never enable NVLink multicast; both peers must see the same NCCL environment.
    if os.environ.get("NCCL_NVLS_ENABLE", "0") != "0":
        print("torch_baseline: setting NCCL_NVLS_ENABLE=0 (NVLink multicast stays off)", file=sys.stderr)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError:
        raise UsageError("torch is not installed (pip install torch); --self-test and --dry-run need none")
    if not dist.is_available():
        raise UsageError("this torch build has no torch.distributed")
    world = a.world or schedule["tp"]
    if a.world and a.world > schedule["tp"]:
        raise UsageError(f"--world {a.world} exceeds the schedule's tp {schedule['tp']}")
    if a.host_delay and a.host_delay[0] >= world:
        raise UsageError(f"--host-delay-us names rank {a.host_delay[0]}, but there are {world} ranks")
    if world != schedule["tp"] and any(op["kind"] == "reduce_scatter" for op in collectives(schedule)):
        raise UsageError("--world smaller than the schedule's tp cannot replay a reduce_scatter")
    if not a.cpu_gloo:
        if not torch.cuda.is_available():
            raise UsageError("no CUDA device visible to torch (use --cpu-gloo to test on CPU)")
        if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 2):
            # Older c10d cannot capture NCCL collectives with async error handling on.
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    a._torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ
    if a._torchrun:
        if int(os.environ["WORLD_SIZE"]) != world:
            raise UsageError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but the schedule has tp {world}")
        local = int(os.environ["LOCAL_RANK"])
        offset = int(os.environ["RANK"]) - local
        wrong = worker(local, a, schedule, world, offset, None)
        if wrong:
            print(f"torch_baseline: {wrong} elements differed from the exact result", file=sys.stderr)
            return 1
        return 0
    if not a.cpu_gloo and torch.cuda.device_count() < world:
        raise UsageError(f"the schedule needs {world} GPUs; torch sees {torch.cuda.device_count()}")
    mp.spawn(worker, args=(a, schedule, world, 0, free_port()), nprocs=world, join=True)
    if a.out and a.out != "-":
        with open(a.out) as f:
            rec = json.load(f)
        wrong = sum(r["wrong"] for r in rec["result"]["runs"])
        if wrong:
            print(f"torch_baseline: {wrong} elements differed from the exact result", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
