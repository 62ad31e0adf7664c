#!/usr/bin/env bash
# Every GPU measurement of results/h200x2/ in one go, on a machine with 2 GPUs.
#
#   scripts/h200x2.sh [BINARY] [OUTDIR]     (defaults: target/release/verifybench, $OUT or ./out)
#   ONLY="selftest bandwidth verify" scripts/h200x2.sh ...   (a subset of: env selftest bandwidth
#                                              collective verify worker sweep torch pipnccl bench)
#   pipnccl: verify with the NCCL of Python's nvidia-nccl wheel (--nccl-lib), compared with the
#            PyTorch peer, which uses that NCCL; bench: benches/gpu (GPU_BENCH=its binary).
#
# Part A: env, selftest, bandwidth, collectives per protocol, verify (split, launch load,
# host-memory path, decode and draft phases), two ranks over the TCP rendezvous on NCCL's
# network transport. Part B: the NCCL settings sweeps and the PyTorch peer.
# Each part ends in a tarball so that a run stopped half way still returns part A.
set -uo pipefail
VB=${1:-target/release/verifybench}
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"
OUTDIR=$(realpath "$OUTDIR")
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
K="--model kimi-k2.5 --tp 2 --tokens 3"
ONLY=${ONLY:-env selftest bandwidth collective verify worker sweep torch pipnccl bench}
want() { [[ " $ONLY " == *" $1 "* ]]; }
step() { echo; echo "=== $*"; }
timed() { local s; s=$(date +%s.%N); "$@"; echo "wall $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $s}") s"; }
t0=$(date +%s)

if want env; then step "env"; $VB env > "$W/env.txt" 2>&1; $VB env --format json > "$W/env.json" 2>/dev/null; cat "$W/env.txt"; fi
if want selftest; then step "selftest"; $VB selftest --export-json "$W/selftest.json" 2>&1 | tee "$W/selftest.txt"; fi
if want bandwidth; then step "bandwidth"; $VB bandwidth --export-json "$W/bandwidth.json" 2>&1 | tee "$W/bandwidth.txt"; fi
if want collective; then
for P in default LL LL128 Simple; do
  step "collective all_reduce NCCL_PROTO=$P (threads)"
  ( [ "$P" != default ] && export NCCL_PROTO=$P
    $VB collective --backend nccl --launcher threads --op all_reduce -b 8K -e 1M -f 2 --sizes 43008,57344 \
        -n 100 -w 10 --export-json "$W/collective-allreduce-$P-threads.json" ) 2>&1 | tee "$W/collective-allreduce-$P-threads.txt"
done
step "collective all_reduce (processes)"
$VB collective --backend nccl --launcher processes --op all_reduce -b 8K -e 1M -f 2 --sizes 43008,57344 \
    -n 100 -w 10 --export-json "$W/collective-allreduce-default-processes.json" 2>&1 | tee "$W/collective-allreduce-default-processes.txt"
step "collective all_gather (threads)"
$VB collective --backend nccl --launcher threads --op all_gather -b 8K -e 4M -f 2 --sizes 491520 \
    -n 100 -w 10 --export-json "$W/collective-allgather-default-threads.json" 2>&1 | tee "$W/collective-allgather-default-threads.txt"
step "collective all_reduce NCCL_P2P_DISABLE=1 (processes)"
NCCL_P2P_DISABLE=1 $VB collective --backend nccl --launcher processes --op all_reduce -b 8K -e 1M -f 2 --sizes 43008 \
    -n 100 -w 10 --export-json "$W/collective-allreduce-p2pdisable-processes.json" 2>&1 | tee "$W/collective-allreduce-p2pdisable-processes.txt"
fi
if want verify; then
for L in threads processes; do
  step "verify $K --mode comm,compute,full ($L)"
  $VB verify --backend nccl --launcher $L $K --mode comm,compute,full -n 200 -w 20 \
      --export-json "$W/verify-kimi-tp2-t3-$L.json" 2>&1 | tee "$W/verify-kimi-tp2-t3-$L.txt"
done
step "verify $K --mode full --launches-per-layer 20 (processes)"
$VB verify --backend nccl --launcher processes $K --mode full --launches-per-layer 20 -n 200 -w 20 \
    --export-json "$W/verify-kimi-tp2-t3-launch20-processes.json" 2>&1 | tee "$W/verify-kimi-tp2-t3-launch20-processes.txt"
for L in threads processes; do
  step "verify $K NCCL_P2P_DISABLE=1 ($L)"
  NCCL_P2P_DISABLE=1 $VB verify --backend nccl --launcher $L $K --mode comm,full -n 200 -w 20 \
      --export-json "$W/verify-kimi-tp2-t3-p2pdisable-$L.json" 2>&1 | tee "$W/verify-kimi-tp2-t3-p2pdisable-$L.txt"
done
for PH in decode draft; do
  step "verify --phase $PH (processes)"
  $VB verify --backend nccl --launcher processes $K --phase $PH --mode comm,full -n 200 -w 20 \
      --export-json "$W/verify-kimi-tp2-$PH-processes.json" 2>&1 | tee "$W/verify-kimi-tp2-$PH-processes.txt"
done
fi
if want worker; then
step "worker x2 over the TCP rendezvous, NET transport (P2P and SHM disabled)"
( export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE="$W/worker-net.%h.%p.log"
  $VB worker --rank 1 --world-size 2 --local-rank 1 --rendezvous 127.0.0.1:29561 $K -n 200 -w 20 > "$W/worker-net-rank1.txt" 2>&1 &
  $VB worker --rank 0 --world-size 2 --local-rank 0 --rendezvous 127.0.0.1:29561 $K -n 200 -w 20 \
      --export-json "$W/worker-net.json" 2>&1 | tee "$W/worker-net-rank0.txt"
  wait )
cat "$W/worker-net-rank1.txt"
grep -h "via NET\|Using network" "$W"/worker-net.*.log | sort | uniq | head -8 | tee "$W/worker-net-transport.txt"
fi
echo "part A took $(( $(date +%s) - t0 )) s"
(cd "$W" && tar -czf "$OUTDIR/part-a.tgz" .)

t1=$(date +%s)
if want sweep; then
SW="sweep --backend nccl $K --graph both --point-timeout 60"
step "sweep NCCL_PROTO x NCCL_ALGO"
timed $VB $SW -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree -n 100 -w 10 \
    --results "$W/sweep-proto-algo.jsonl" --log-dir "$W/sweep-proto-algo.logs" \
    --export-table-markdown "$W/sweep-proto-algo.md" 2>&1 | tee "$W/sweep-proto-algo.txt"
step "sweep per-function NCCL_ALGO"
$VB $SW -L NCCL_PROTO=LL,Simple --set 'NCCL_ALGO=ring;allreduce:tree' -n 100 -w 10 \
    --results "$W/sweep-perfunction.jsonl" --log-dir "$W/sweep-perfunction.logs" \
    --export-table-markdown "$W/sweep-perfunction.md" 2>&1 | tee "$W/sweep-perfunction.txt"
step "sweep with NCCL_P2P_DISABLE=1 held fixed"
NCCL_P2P_DISABLE=1 timed $VB $SW -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree -n 100 -w 10 \
    --results "$W/sweep-p2pdisable.jsonl" --log-dir "$W/sweep-p2pdisable.logs" \
    --export-table-markdown "$W/sweep-p2pdisable.md" 2>&1 | tee "$W/sweep-p2pdisable.txt"
step "sweep --preset pcie"
timed $VB $SW --preset pcie -n 100 -w 10 \
    --results "$W/sweep-pcie.jsonl" --log-dir "$W/sweep-pcie.logs" \
    --export-table-markdown "$W/sweep-pcie.md" 2>&1 | tee "$W/sweep-pcie.txt"
step "sweep: a misspelt variable (NCCL_PRTO) changes nothing"
$VB $SW -L NCCL_PRTO=LL -n 100 -w 10 \
    --results "$W/sweep-misspelt.jsonl" --log-dir "$W/sweep-misspelt.logs" \
    --export-table-markdown "$W/sweep-misspelt.md" 2>&1 | tee "$W/sweep-misspelt.txt"
step "sweep over NCCL's network transport (P2P and SHM disabled): protocols"
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timed $VB $SW -L NCCL_PROTO=LL,LL128,Simple -n 30 -w 3 \
    --results "$W/sweep-net.jsonl" --log-dir "$W/sweep-net.logs" \
    --export-table-markdown "$W/sweep-net.md" 2>&1 | tee "$W/sweep-net.txt"
echo "sweeps took $(( $(date +%s) - t1 )) s"
(cd "$W" && tar -czf "$OUTDIR/part-b.tgz" sweep-*)
fi

if want torch; then
step "PyTorch peer (scripts/compare_torch.sh)"
VERIFYBENCH=$VB LAUNCHER=processes timeout 240 bash scripts/compare_torch.sh "$W/compare-torch" 2>&1 | tail -40
(cd "$W" && tar -czf "$OUTDIR/part-c.tgz" compare-torch)
fi

if want pipnccl; then
step "verify with pip's NCCL (--nccl-lib), compared with the PyTorch peer on the same NCCL"
PIPNCCL=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))")
mkdir -p "$W/pipnccl"
$VB env --nccl-lib "$PIPNCCL" 2>&1 | tee "$W/pipnccl/env.txt" | head -4
$VB verify --backend nccl --nccl-lib "$PIPNCCL" --launcher processes $K -n 200 -w 20 \
    --export-json "$W/pipnccl/vb.json" 2>&1 | tee "$W/pipnccl/vb.txt"
TORCH_JSON=${TORCH_JSON:-$W/compare-torch/torch.json}
[ -f "$TORCH_JSON" ] || TORCH_JSON=results/h200x2/compare-torch/torch.json
cp "$TORCH_JSON" "$W/pipnccl/torch.json"
$VB compare "$W/pipnccl/vb.json" "$W/pipnccl/torch.json" 2>&1 | tee "$W/pipnccl/compare.txt"
$VB compare "$W/pipnccl/vb.json" "$W/pipnccl/torch.json" --format markdown > "$W/pipnccl/compare.md" 2>&1
(cd "$W" && tar -czf "$OUTDIR/part-d.tgz" pipnccl)
fi
if want bench; then
step "benches/gpu: host cost of one NCCL enqueue and one graph launch"
${GPU_BENCH:-target/gpu-bench} --bench 2>&1 | tee "$W/bench-gpu.txt"
cp "$W/bench-gpu.txt" "$OUTDIR/" 2>/dev/null
fi
echo "all took $(( $(date +%s) - t0 )) s"
