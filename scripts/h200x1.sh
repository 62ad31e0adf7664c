#!/usr/bin/env bash
# What one GPU can prove, in one go (results/h200x1/).
#
#   scripts/h200x1.sh [BINARY] [OUTDIR]     (defaults: target/release/verifybench, $OUT or ./out)
#   ONLY="selftest compute" scripts/h200x1.sh ...   (a subset of: env selftest bandwidth compute pdl formats traces)
#
# env:       what `verifybench env` sees on one GPU.
# selftest:  one GPU proves what one GPU can: the streaming kernel against a CPU reference and
#            the P2P one-shot/two-shot protocol on 2, 4 and 8 virtual ranks (signalling, reuse
#            across calls, exactness, a rank that never signals); the virtual-rank timings are
#            labelled "not a P2P measurement".
# bandwidth: device copy vs the streaming kernel, same run.
# compute:   one rank's share of a TP=8 verify streamed on one GPU (--gpus 1 --tp 8 --mode
#            compute): the per-rank compute of an 8-GPU machine of this GPU, against the
#            schedule's bytes / measured streaming bandwidth; with fresh runs for the spread.
# formats:   --format json and -q of bandwidth, selftest and env on a GPU (stdout is exactly
#            what --export-json writes, stderr empty), `report` over those records, and five
#            more selftest runs (their summary lines: how often a check fails on this machine).
# pdl:       the same with --pdl (programmatic dependent launch of the streaming kernels), in
#            the same order, so that plain and PDL launches of one workload sit side by side.
# traces: real torch.profiler traces and NCCL COLL logs of the PyTorch peer replaying the
#         Kimi-K2.5 verify schedule on one rank (world size 1: real record_param_comms events;
#         the one-rank all-reduce launches no NCCL kernel), eager and CUDA graph, with and
#         without a host delay; the fixtures of the `trace` tests.
# Each part ends in a tarball under OUTDIR, so a run stopped half way still returns the parts done.
set -uo pipefail
VB=${1:-target/release/verifybench}
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"
OUTDIR=$(realpath "$OUTDIR")
VB=$(realpath "$VB")
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
ONLY=${ONLY:-env selftest bandwidth compute}
want() { [[ " $ONLY " == *" $1 "* ]]; }
step() { echo; echo "=== $*"; }
pack() { (cd "$W" && tar czf "$OUTDIR/$1.tar.gz" "$1") && echo "packed $1"; }

if want env; then
  mkdir -p "$W/env"; step "env"
  $VB env > "$W/env/env.txt" 2>&1; $VB env --format json > "$W/env/env.json" 2>/dev/null; cat "$W/env/env.txt"
  pack env
fi
if want selftest; then
  mkdir -p "$W/selftest"; step "selftest (one GPU)"
  $VB selftest --export-json "$W/selftest/selftest.json" 2>&1 | tee "$W/selftest/selftest.txt"
  pack selftest
fi
if want bandwidth; then
  mkdir -p "$W/bandwidth"; step "bandwidth"
  $VB bandwidth --export-json "$W/bandwidth/bandwidth.json" 2>&1 | tee "$W/bandwidth/bandwidth.txt"
  pack bandwidth
fi
if want compute; then
  C=$W/compute; mkdir -p "$C"
  for m in kimi-k2.5 deepseek-v3; do
    for t in 3 4; do
      step "verify --backend nccl --gpus 1 --tp 8 --mode compute --model $m --tokens $t"
      $VB verify --backend nccl --gpus 1 --tp 8 --mode compute --model $m --tokens $t --graph both \
          -n 200 -w 20 --export-json "$C/verify-$m-tp8-t$t-compute-1gpu.json" 2>&1 | tee "$C/verify-$m-tp8-t$t-compute-1gpu.txt"
    done
  done
  step "the same, Kimi-K2.5 T=3, 5 fresh runs (between-run spread)"
  $VB verify --backend nccl --gpus 1 --tp 8 --mode compute --model kimi-k2.5 --tokens 3 --graph both \
      -n 200 -w 20 --fresh-runs 5 --export-json "$C/verify-kimi-k2.5-tp8-t3-compute-1gpu-fresh5.json" 2>&1 \
      | tee "$C/verify-kimi-k2.5-tp8-t3-compute-1gpu-fresh5.txt"
  pack compute
fi
if want pdl; then
  C=$W/pdl; mkdir -p "$C"
  for m in kimi-k2.5 deepseek-v3; do
    for t in 3 4; do
      for p in "" "--pdl"; do
        tag=$([ -n "$p" ] && echo pdl || echo plain)
        step "verify --backend nccl --gpus 1 --tp 8 --mode compute --model $m --tokens $t $p"
        $VB verify --backend nccl --gpus 1 --tp 8 --mode compute --model $m --tokens $t --graph both $p \
            -n 200 -w 20 --export-json "$C/verify-$m-tp8-t$t-compute-1gpu-$tag.json" 2>&1 | tee "$C/verify-$m-tp8-t$t-compute-1gpu-$tag.txt"
      done
    done
  done
  step "Kimi-K2.5 T=3 --pdl, 5 fresh runs (between-run spread)"
  $VB verify --backend nccl --gpus 1 --tp 8 --mode compute --model kimi-k2.5 --tokens 3 --graph both --pdl \
      -n 200 -w 20 --fresh-runs 5 --export-json "$C/verify-kimi-k2.5-tp8-t3-compute-1gpu-pdl-fresh5.json" 2>&1 \
      | tee "$C/verify-kimi-k2.5-tp8-t3-compute-1gpu-pdl-fresh5.txt"
  pack pdl
fi
if want formats; then
  F=$W/formats; mkdir -p "$F"; step "formats"
  {
    $VB bandwidth --format json -q --export-json "$F/bw-export.json" > "$F/bw-stdout.json" 2> "$F/bw-stderr.txt"
    echo "bandwidth rc=$? stdout == export + newline: $(cmp -s "$F/bw-stdout.json" <(cat "$F/bw-export.json"; echo) && echo yes || echo no) stderr bytes: $(stat -c %s "$F/bw-stderr.txt")"
    $VB selftest --format json -q --export-json "$F/st-export.json" > "$F/st-stdout.json" 2> "$F/st-stderr.txt"
    echo "selftest rc=$? stdout == export + newline: $(cmp -s "$F/st-stdout.json" <(cat "$F/st-export.json"; echo) && echo yes || echo no) stderr bytes: $(stat -c %s "$F/st-stderr.txt")"
    $VB env --format json -q > "$F/env.json" 2> "$F/env-stderr.txt"
    echo "env rc=$? stderr bytes: $(stat -c %s "$F/env-stderr.txt")"
    $VB report "$F/bw-export.json" "$F/st-export.json" "$F/env.json" -o "$F/report" 2>&1
    echo "report rc=$?"
    for i in 1 2 3 4 5; do $VB selftest 2>&1 | grep -E "FAIL|selftest:" | sed "s/^/selftest repeat $i: /"; done
  } 2>&1 | tee "$F/formats.txt"
  pack formats
fi
if want traces; then
  T=$W/traces; mkdir -p "$T"
  step "traces: PyTorch peer under torch.profiler, world size 1"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$T/gpu.txt"
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' | tee -a "$T/gpu.txt"
  for tp in 1 2; do
    $VB plan --format json --model kimi-k2.5 --tp $tp --tokens 3 > "$T/plan-kimi-tp$tp-t3.json"
  done
  # tp1: the natural one-rank schedule; tp2 on one rank: the per-rank sizes of the TP-2 schedule.
  for tp in 1 2; do
    d=$T/kimi-tp$tp-world1
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL NCCL_DEBUG_FILE="$d-nccl-coll.%h.%p.log" \
      python3 scripts/torch_baseline.py --schedule "$T/plan-kimi-tp$tp-t3.json" --world 1 \
        -n 20 -w 5 --profile "$d" --profile-steps 3 --out "$d.json" 2>&1 | tee "$d.txt"
  done
  d=$T/kimi-tp1-world1-delay
  python3 scripts/torch_baseline.py --schedule "$T/plan-kimi-tp1-t3.json" --world 1 --graph off \
      --host-delay-us 0:50 -n 20 -w 5 --profile "$d" --profile-steps 3 --out "$d.json" 2>&1 | tee "$d.txt"
  ls -la "$T" "$T"/*/ | tee "$T/ls.txt"
  pack traces
fi
echo; echo "=== done"; ls -la "$OUTDIR"
