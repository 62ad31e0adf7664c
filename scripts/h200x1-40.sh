#!/usr/bin/env bash
# One H200: the checks of the P2P all-reduce's first run on the users' GPUs, in one go.
#
#   scripts/h200x1-40.sh BINARY [OLD_BINARY] [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#
# env:       the requirements, and the P2P platform section (IOMMU, ACS of the GPU's ports, NCCL's
#            P2P level; one GPU has no pair to check).
# selftest:  everything selftest checks on one GPU, with the P2P stress test on 2, 4 and 8 virtual
#            ranks (10,000 calls each, eager and graph) and its two negative controls, which it
#            must catch (stress.txt: those lines).
# ab:        the one-shot at 43,008 B on virtual ranks (selftest's timing lines, "not a P2P
#            measurement"), BINARY against OLD_BINARY in the same run, alternating old/new then
#            new/old, each a fresh `selftest --no-faults` (BINARY with --no-stress), as
#            scripts/eager-ab.sh does; ab-summary.txt has every run and the medians.
# The whole script stays under 8 minutes: every step has a time limit, and the A/B rounds stop
# (saying so) when the next one would pass 7.5 minutes.
set -uo pipefail
VB=$(realpath "${1:?binary}")
OLD=${2:-}
[ -n "$OLD" ] && OLD=$(realpath "$OLD")
OUTDIR=${3:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
step() { echo; echo "=== $*"; }
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
cd "$OUTDIR"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# new: $("$VB" --version) ($1)"
  [ -n "$OLD" ] && echo "# old: $("$OLD" --version) ($2)"
  echo "env.*         $VB env"
  echo "selftest.*    $VB selftest --export-json selftest.json"
  echo "ab-*.txt      per round: $VB selftest --no-faults --no-stress, ${OLD:-(no old binary)} selftest --no-faults"
} > commands.txt
step env
timeout 120 "$VB" env 2>&1 | tee env.txt
timeout 60 "$VB" env --format json > env.json 2>/dev/null
step "selftest (with the stress test and its negative controls)"
t0=$(date +%s)
timeout 300 "$VB" selftest --export-json selftest.json 2>&1 | tee selftest.txt
echo "selftest rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
grep -E "p2p stress|p2p access" selftest.txt > stress.txt
cat stress.txt
if [ -n "$OLD" ]; then
  step "A/B: one-shot 43,008 B on virtual ranks, old against new"
  : > ab-summary.txt
  round=150   # what the first round may take (two selftests); later: the last round's time
  for i in 1 2 3 4; do
    if [ $(( $(elapsed) + round )) -gt 450 ]; then
      echo "ab: stopped after $((i - 1)) rounds to stay under 8 minutes" | tee -a ab-summary.txt
      break
    fi
    r0=$(date +%s)
    order="old new"; [ $((i % 2)) -eq 0 ] && order="new old"
    for s in $order; do
      if [ $s = new ]; then cmd=("$VB" selftest --no-faults --no-stress); else cmd=("$OLD" selftest --no-faults); fi
      timeout 120 "${cmd[@]}" > run.txt 2>&1
      cat run.txt >> ab-$s.txt
      grep -oE '[0-9]+ ranks x [0-9]+ blocks: eager [0-9.]+ us, graph [0-9.]+ us' run.txt \
        | sed "s/^/$s run $i: /" | tee -a ab-summary.txt
    done
    round=$(( $(date +%s) - r0 ))
  done
  rm -f run.txt
  # medians per binary, rank count and mode
  awk '
    { split($0, a, ": "); who = $1; n = $4;
      match($0, /eager [0-9.]+/); e = substr($0, RSTART + 6, RLENGTH - 6);
      match($0, /graph [0-9.]+/); g = substr($0, RSTART + 6, RLENGTH - 6);
      if (who == "old" || who == "new") { E[who, n] = E[who, n] " " e; G[who, n] = G[who, n] " " g; ns[n] = 1 } }
    function med(s,   v, k, i, j, t) { k = split(s, v, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return k == 0 ? "-" : (k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2) }
    END { for (n in ns) printf "%s ranks: eager median old %s us, new %s us; graph median old %s us, new %s us\n", n, med(E["old", n]), med(E["new", n]), med(G["old", n]), med(G["new", n]) }
  ' ab-summary.txt | sort -n | tee -a ab-summary.txt
fi
step done
echo "total wall $(elapsed) s" | tee -a commands.txt
ls -la "$OUTDIR"
