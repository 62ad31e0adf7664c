#!/usr/bin/env bash
# 2-8 GPUs: the P2P all-reduces' access check of every ordered GPU pair and the stress test, ready
# for the first machine with several GPUs (PCIe or NVLink).
#
#   scripts/p2p-multi.sh BINARY [NGPUS] [OUTDIR]   (NGPUS: all GPUs; OUTDIR: $OUT or ./out)
#
# env:         the P2P platform section (IOMMU, each GPU's IOMMU group and the ACS controls of its
#              ports, each pair's PCIe path and NCCL's P2P verdict, the driver's P2P override).
#              Run as root to read the ACS controls (the extended config space is root's only).
# access:      the access check runs fresh (its cache is this folder's cache/, not the user's):
#              every ordered pair written through the peer mapping, read back, and read from the
#              peer's memory; cache/verifybench/p2p-access.json holds each pair's outcome.
# selftest:    on NGPUS GPUs: the access check line, the P2P all-reduces through both launchers,
#              and the stress test with one rank per GPU (eager and graph, 10,000 calls each) and
#              its two negative controls, which it must catch.
# collective:  --impl nccl,oneshot,twoshot from 8 B to 4 MiB, threads and processes: exact
#              results, or exit code 2 with the pair that failed the access check and its likely
#              cause (rc= in collective-*.txt).
# choose:      the measured per-shape choice (issue 52) of Kimi-K2.5 at TP=NGPUS, concurrency 1
#              and 8: NCCL's default, NCCL_PROTO=LL, LL128 and Simple, one-shot and two-shot at
#              every all-reduce and all-gather shape of the cycle, 3 rounds of fresh worker
#              processes, eager and CUDA graph, each implementation checked exactly before it is
#              timed; choose.txt and choose-tpN.json (the decision file with its key: GPU UUIDs
#              and PCI addresses, P2P matrix, driver, NCCL file and version), then the same
#              command again (choose-reuse.txt: the key holds, the file is reused), and the
#              modeled decision of the same shapes beside it (choose-model.txt). On 2-8 GPUs only
#              (the P2P kernels' range); skipped with a line otherwise.
set -uo pipefail
VB=$(realpath "${1:?binary}")
N=${2:-$(nvidia-smi -L 2>/dev/null | wc -l)}
OUTDIR=${3:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
[ "$N" -ge 2 ] 2>/dev/null || { echo "p2p-multi: needs 2 to 8 GPUs (NGPUS=$N)" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
export XDG_CACHE_HOME="$OUTDIR/cache"   # a fresh access check, kept with the results
step() { echo; echo "=== $*"; }
cd "$OUTDIR"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $N GPUs, $("$VB" --version)"
  echo "env.*            $VB env"
  echo "selftest.*       $VB selftest --gpus $N --export-json selftest.json"
  echo "collective-*.txt $VB collective --gpus $N --launcher L --op all_reduce --impl nccl,oneshot,twoshot -b 8 -e 4M -f 4 -n 50 -w 5"
  echo "acs.txt          lspci -vvv | grep ACSCtl (as the user running this)"
  echo "choose*.txt      $VB choose --backend nccl --gpus $N --tp $N --model kimi-k2.5 --concurrency 1,8 --nccl-proto LL,LL128,Simple --decision choose-tp$N.json"
} > commands.txt
step env
"$VB" env 2>&1 | tee env.txt
"$VB" env --format json > env.json 2>/dev/null
(lspci -vvv 2>/dev/null | grep -E "^[0-9a-f]|ACSCtl" | grep -B1 ACSCtl) > acs.txt || true
step "selftest on $N GPUs (access check, P2P all-reduces, stress test, negative controls)"
t0=$(date +%s)
timeout 1500 "$VB" selftest --gpus "$N" --export-json selftest.json 2>&1 | tee selftest.txt
echo "selftest rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
grep -E "p2p access|p2p stress" selftest.txt | tee stress.txt
for l in threads processes; do
  step "collective --impl nccl,oneshot,twoshot ($l)"
  timeout 600 "$VB" collective --gpus "$N" --launcher $l --op all_reduce --impl nccl,oneshot,twoshot \
      -b 8 -e 4M -f 4 -n 50 -w 5 --export-json collective-$l.json > collective-$l.txt 2>&1
  rc=$?
  echo "rc=$rc" >> collective-$l.txt
  cat collective-$l.txt
done
if [ "$N" -le 8 ]; then
  step "choose: which all-reduce for each shape, measured on $N GPUs"
  CH=(choose --model kimi-k2.5 --tp "$N" --concurrency 1,8 --nccl-proto LL,LL128,Simple)
  t0=$(date +%s)
  timeout 1200 "$VB" "${CH[@]}" --backend nccl --gpus "$N" --decision "choose-tp$N.json" \
      > choose.txt 2>&1
  echo "choose rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
  cat choose.txt
  timeout 300 "$VB" "${CH[@]}" --backend nccl --gpus "$N" --decision "choose-tp$N.json" \
      > choose-reuse.txt 2>&1
  echo "choose reuse rc=$?" | tee -a commands.txt
  tail -1 choose-reuse.txt
  "$VB" "${CH[@]}" --backend model > choose-model.txt 2>&1
  grep "^crossover" choose-model.txt
else
  echo "choose: skipped: the P2P kernels run on 2 to 8 GPUs ($N here)" | tee -a commands.txt
fi
step "the access check's cache"
cat cache/verifybench/p2p-access.json 2>/dev/null || echo "(no cache file: no pair was probed)"
step done
ls -la "$OUTDIR"
