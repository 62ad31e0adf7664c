#!/usr/bin/env bash
# Whether two builds of verifybench print the same thing: the check that a restructuring
# changed no behaviour.
#
#   scripts/same-output.sh BASE NEW
#
# BASE and NEW are each a verifybench binary or a git revision of this repository (built in a
# temporary worktree with this checkout's target directory). Every command below runs through
# both, from a scratch folder that holds a copy of this checkout's tests/data and results (so
# paths in the commands read the same files), and stdout, stderr, the exit code and every file a
# command writes are compared byte for byte. Only what must differ between two builds is masked
# before comparing: the commit in the banner and in provenance, the start and finish times, the
# wall times of a sweep (its summary and its progress lines), the binary's own path in the recorded command line and the scratch folder's name. The last line
# says how many commands were compared and how many differ; the exit code is 1 if any differs.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ne 2 ]; then
    echo "usage: scripts/same-output.sh BASE NEW   (each a verifybench binary or a git revision)" >&2
    exit 2
fi
tmp=$(mktemp -d)
worktrees=()
cleanup() {
    for w in "${worktrees[@]}"; do git -C "$here" worktree remove --force "$w" >/dev/null 2>&1 || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# A binary as given, or the release build of a revision.
binary() {
    local what=$1 name=$2
    if [ -x "$what" ] && [ -f "$what" ]; then
        mkdir -p "$tmp/$name"
        cp "$what" "$tmp/$name/verifybench"
        return
    fi
    local rev
    if ! rev=$(git -C "$here" rev-parse --verify --quiet "$what^{commit}"); then
        echo "scripts/same-output.sh: '$what' is neither an executable nor a git revision" >&2
        exit 2
    fi
    local wt="$tmp/wt-$name"
    git -C "$here" worktree add --detach "$wt" "$rev" >/dev/null
    worktrees+=("$wt")
    (cd "$wt" && CARGO_TARGET_DIR="$here/target" cargo build --release --quiet --bin verifybench)
    mkdir -p "$tmp/$name"
    cp "$here/target/release/verifybench" "$tmp/$name/verifybench"
}
binary "$1" base
binary "$2" new

# The commands: every command kind, table and JSON, through the cost model where a GPU would be
# needed, on the repository's own test data; the motivating numbers of `explain` first.
commands=(
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 8"
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 8 --format json"
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 8 --draft-steps 3 --format json"
    "explain --observed 122x0.2ms --verify-ms 30 --decode-ms 12.2 --accept-length 2.5 --gpus 8"
    "explain --observed 122x0.2ms --verify-ms 30 --decode-ms 12.2 --accept-length 2.5 --gpus 8 --format json"
    "explain --observed 122x0.2ms --verify-ms 30 --gpus 8 --format json -q --export-json explain.json"
    "explain --gpus 8 --model kimi-k2.5 --decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240"
    "explain --gpus 8 --model kimi-k2.5 --decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240 --draft-steps 3 --format markdown"
    "explain --verify-ms 30 --decode-ms 12.2 --gpus 8 --server-log tests/data/sglang-decode-eagle3.log --nccl-log tests/data/nccl-2.28.3-h200x2-procs-simple.log --expect NCCL_PROTO=LL"
    "explain --verify-ms 30 --decode-ms 12.2 --gpus 8 --link pcie-gen5-dual-socket --accept-length 2 --draft-ms 1 --format json"
    "explain --verify-ms 19 --decode-ms 12.2 --tp 4 --accept-length 3 --decode-eager"
    "explain --trace tests/data/traces --decode-ms 12.2 --accept-length 2.5"
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 1"
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 8 --tp 4"
    "explain --accept-length 2.5 --gpus 8"
    "breakeven --decode-ms 12.2 --verify-ms 30,19,12 --draft-steps 3 --draft-ms 0 --table-accept-lengths 2,2.5,3,3.5"
    "breakeven --decode-ms 12.2 --verify-ms 30,19,12 --draft-steps 3 --draft-ms 1.0 --table-accept-lengths 2,2.5,3,3.5 --accept-rates 0.8,0.6,0.45"
    "breakeven --decode-ms 12.2 --verify-ms 19 --draft-steps 3 --draft-ms 1.0 --accept-length 2.5 --format json"
    "breakeven --from-trace verify=tests/data/traces/kimi-tp1-world1-eager-rank-0.trace.json.gz --accept-from-log tests/data/sglang-decode-eagle3.log --decode-ms 12.2 --draft-steps 3"
    "breakeven --decode-ms 0 --verify-ms 19 --accept-length 2.5"
    "plan --model kimi-k2.5 --tp 8 --tokens 3"
    "plan --model kimi-k2.5 --tp 8 --format json"
    "plan --model kimi-k2.5 --tp 8 --engine vllm --allreduce-fusion"
    "plan --model llama-3.1-70b --tp 4 --phase decode --logits none"
    "plan --model kimi-k2.5 --tp 8 --phase draft"
    "plan --model-config tests/data/configs --tp 4"
    "verify --backend model --model kimi-k2.5 --tp 8 --tokens 3 --mode comm,compute,full"
    "verify --backend model --model kimi-k2.5 --tp 8 --mode comm,compute,full --graph both --format json"
    "verify --backend model --gpus 8 --link pcie-gen5-dual-socket --model kimi-k2.5 --tp 8 --mode comm,compute,full"
    "verify --backend model --host-gap-us 200:50 --gpus 8"
    "verify --backend model --gpus 8 --late-rank 3:30"
    "verify --backend model --impl nccl,oneshot,twoshot --link pcie-gen5 --gpus 8"
    "verify --backend model --gpus 8 --tp 4"
    "verify --backend model --tp 0"
    "verify --backend model --model kimi-k2.5 --tp 8 --tokens 3 --mode comm,compute,full --export-json verify.json"
    "collective --backend model --op all_reduce -b 8K -e 64K -f 2 --sizes 43008 -d bf16 --graph both --gpus 8"
    "collective --backend model --impl nccl,oneshot,twoshot --link pcie-gen5 --gpus 8 -b 1K -e 4M --sizes 43008 --format json"
    "collective --backend model --gpus 8 --link pcie-gen5 -b 256 -e 256K -f 4 --sizes 32768 -G on --export-json coll.json"
    "sweep --backend model --model kimi-k2.5 --tp 2 --tokens 3 -L NCCL_PROTO=LL,Simple --graph both --results proto.jsonl"
    "sweep --backend model --model kimi-k2.5 --tp 8 --preset pcie --rounds 1 --results tp8-pcie.jsonl"
    "report verify.json proto.jsonl -o report"
    "report verify.json coll.json explain.json tp8-pcie.jsonl -o report2 --draft-ms 1.0"
    "breakeven --from verify.json --decode-ms 12.2 --draft-ms 1.0 --accept-length 2.5"
    "compare results/h200x2/compare-torch/vb.json results/h200x2/compare-torch/torch.json"
    "trace tests/data/traces/kimi-tp1-world1-delay-eager-rank-0.trace.json.gz"
    "trace tests/data/traces/kimi-tp1-world1-eager-rank-0.trace.json.gz --format json -q --export-json trace.json"
    "trace tests/data/traces/kimi-tp1-world1-nccl-coll.log"
    "trace tests/data/traces/kimi-tp2-world1-eager-rank-0.trace.json.gz --tp 2 --export-schedule kimi-tp2.json"
    "verify --backend model --schedule kimi-tp2.json --host-gap-from kimi-tp2.json"
    "model fit coll.json -o mybox.json --base pcie-gen5"
    "verify --backend model --profile mybox.json --gpus 8"
    "explain --decode-ms 12.2 --accept-length 2.5 --gpus 8 --profile mybox.json --format json"
    "model validate --nccl-tests tests/data/public-nccl/S01-rtx5090-8x-p2p.txt"
    "env --format json -q"
    "inspect --pid 999999999"
    "selftest"
    "worker --rank 0 --world-size 1 --rendezvous 127.0.0.1:1 --timeout 1"
    "--help"
    "explain --help"
)

run_all() {
    local bin=$1 dir=$2
    mkdir -p "$dir"
    cp -r "$here/tests" "$here/results" "$dir/"
    (cd "$dir" && find . -type f | sort >"$tmp/before")
    local i=0
    for c in "${commands[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        (cd "$dir" && NO_COLOR=1 COLUMNS=120 "$bin" $c >"$dir/out.$i" 2>"$dir/err.$i"; echo "exit $?" >"$dir/code.$i") || true
    done
}
run_all "$tmp/base/verifybench" "$tmp/a"
run_all "$tmp/new/verifybench" "$tmp/b"

# What differs between two builds by necessity.
mask() {
    sed -E \
        -e "s#$tmp/(base|new)/verifybench#BINARY#g" \
        -e "s#$tmp/[ab]\\b#SCRATCH#g" \
        -e 's/verifybench ([0-9]+\.[0-9]+\.[0-9]+) \([0-9a-f]+\)/verifybench \1 (COMMIT)/g' \
        -e 's/"git_commit": *"[0-9a-f]*"/"git_commit": "COMMIT"/g' \
        -e 's/"(started|finished)_utc": *"[^"]*"/"\1_utc": "TIME"/g' \
        -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/TIME/g' \
        -e 's/\b[0-9a-f]{12}\b/COMMIT/g' \
        -e 's/"(timed|probe)_wall_s": *[0-9.e-]+/"\1_wall_s": WALL/g' \
        -e 's/^wall time: [0-9.]+ s for ([0-9]+) runs: probe children [0-9.]+ s, timed children [0-9.]+ s/wall time: WALL for \1 runs/' \
        -e 's/(probe [0-9.]+ s, )?timed child [0-9.]+ s(: NCCL init [0-9.]+ s, timed loops ~[0-9.]+ s, worker start and the rest [0-9.]+ s)?$/timed child WALL/' \
        "$1"
}
differ=0
total=${#commands[@]}
for i in $(seq 1 "$total"); do
    for f in out err code; do
        if ! cmp -s <(mask "$tmp/a/$f.$i") <(mask "$tmp/b/$f.$i"); then
            echo "DIFFERS ($f): verifybench ${commands[$((i - 1))]}"
            diff <(mask "$tmp/a/$f.$i") <(mask "$tmp/b/$f.$i") | head -20 | cut -c1-400 || true
            differ=$((differ + 1))
        fi
    done
done
# The files the commands wrote (exports, results, reports), compared the same way.
files=$(cd "$tmp/a" && find . -type f ! -name 'out.*' ! -name 'err.*' ! -name 'code.*' | sort | comm -23 - "$tmp/before")
nfiles=0
for f in $files; do
    nfiles=$((nfiles + 1))
    if [ ! -f "$tmp/b/$f" ]; then
        echo "MISSING in NEW: $f"
        differ=$((differ + 1))
    elif ! cmp -s <(mask "$tmp/a/$f") <(mask "$tmp/b/$f"); then
        echo "DIFFERS (file): $f"
        diff <(mask "$tmp/a/$f") <(mask "$tmp/b/$f") | head -20 | cut -c1-400 || true
        differ=$((differ + 1))
    fi
done
echo "same-output: $total commands and $nfiles written files compared; $differ differ"
[ "$differ" -eq 0 ]
