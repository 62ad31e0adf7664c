#!/usr/bin/env bash
# One H200: which NCCL (issue 38). The library as a sweep dimension, proven per worker.
#
#   scripts/h200x1-38.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out; under 5 minutes)
#
# env:      every NCCL library the search finds (the system's 2.28.3, PyTorch's wheel), the
#           one this run loads marked.
# sweep:    1 rank (--gpus 1 --tp 8 --mode comm --rounds 2) over the system NCCL and the
#           wheel's: each point's workers report ncclGetVersion and the file they mapped
#           (sweep-libraries.txt lists them per point and round).
# compare:  verify on each library, then `compare`: both versions and files named.
# inspect:  a python process that imported torch and ran a 1-rank NCCL all-reduce: the NCCL
#           its /proc/PID/maps shows (the wheel's), and the same maps read directly.
set -uo pipefail
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
SYS=/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3
VENV=/opt/torch/.venv
WHEEL=$VENV/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
PY=${PYTHON:-$VENV/bin/python}
[ -x "$PY" ] || PY=python3
W=(--model kimi-k2.5 --tokens 3 --gpus 1 --tp 8 --mode comm -n 30 -w 3)
step() { echo; echo "=== $*"; }
cd "$OUTDIR"
ls -la "$SYS" "$WHEEL" 2>&1 | tee libs.txt

step "env (VIRTUAL_ENV=$VENV, so the search sees the wheel)"
VIRTUAL_ENV=$VENV timeout 60 "$VB" env 2>&1 | tee env.txt
VIRTUAL_ENV=$VENV timeout 60 "$VB" env --format json > env.json 2> env-json.err

step "sweep over the two NCCL builds, 1 rank, --rounds 2"
timeout 150 "$VB" sweep --backend nccl "${W[@]}" --rounds 2 --point-timeout 60 --nccl-lib "$SYS,$WHEEL" \
    --results sweep.jsonl --export-json sweep-records.json 2>&1 | tee sweep.txt
echo "sweep exit: ${PIPESTATUS[0]}" | tee -a sweep.txt
python3 - sweep.jsonl <<'EOF' 2>&1 | tee sweep-libraries.txt
import json, sys
print("point round status | asked file | per worker: rank pid version mapped | log version")
for line in open(sys.argv[1]):
    d = json.loads(line)["result"]["data"]
    lib = d.get("library") or {}
    ws = "; ".join(f"{w['rank']} {w['pid']} {w['version']} {w['library']}" for w in lib.get("workers", []))
    print(d["point_id"], d["round"] + 1, d["status"], lib.get("status"), "|", lib.get("path"), "|", ws,
          "|", lib.get("log_version"), "|", d.get("reason") or "")
EOF

step "verify on each build, then compare"
timeout 60 "$VB" verify --backend nccl "${W[@]}" --graph both --nccl-lib "$SYS" \
    --export-json verify-sys.json > verify-sys.txt 2>&1; echo "verify system: $?"
timeout 60 "$VB" verify --backend nccl "${W[@]}" --graph both --nccl-lib "$WHEEL" \
    --export-json verify-wheel.json > verify-wheel.txt 2>&1; echo "verify wheel: $?"
timeout 30 "$VB" compare verify-sys.json verify-wheel.json 2>&1 | tee compare.txt

step "inspect a python process with a 1-rank NCCL process group (torch)"
cat > torch1.py <<'EOF'
import os, sys
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29538")
import torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1)
t = torch.ones(8, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("ready: torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "sum", t[0].item(), flush=True)
sys.stdin.read()   # hold the process group until the script closes stdin
dist.destroy_process_group()
EOF
rm -f hold; mkfifo hold
"$PY" torch1.py < hold > torch1.txt 2>&1 &
TPID=$!
exec 3> hold
for _ in $(seq 1 90); do grep -q '^ready' torch1.txt && break; kill -0 $TPID 2>/dev/null || break; sleep 1; done
cat torch1.txt
grep libnccl "/proc/$TPID/maps" 2>/dev/null | awk '{print $6, $7}' | sort -u | tee torch1-maps.txt
timeout 30 "$VB" inspect --pid $TPID 2>&1 | tee inspect.txt
timeout 30 "$VB" inspect --pid $TPID --format json > inspect.json 2> inspect-json.err
exec 3>&-
timeout 30 tail --pid=$TPID -f /dev/null || kill $TPID
rm -f hold
step done; ls -la "$OUTDIR"
