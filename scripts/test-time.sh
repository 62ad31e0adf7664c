#!/usr/bin/env bash
# How long `cargo test` takes once built, and which tests take it.
#
#   scripts/test-time.sh            # the checkout as it is
#   scripts/test-time.sh REV        # a git revision, checked out in a temporary worktree
#
# Steps: builds the tests (`cargo test --no-run`, not timed), runs `cargo test` whole and
# prints its wall time (what the run after the build costs: the library's unit tests,
# tests/it, the doc tests, each binary's "finished in" line), then runs the library's and
# tests/it's test binaries directly with per-test times (`--report-time`, which needs
# RUSTC_BOOTSTRAP=1 in the test binary's environment only: given to cargo it would rebuild
# everything) and prints the ten slowest tests. The output is plain text, meant to be kept
# as it is beside the machine's load (printed first and last) and the run's CPU seconds.
#
# A revision is built in its own worktree with this checkout's target directory, so going
# back and forth between revisions rebuilds only what changed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
src=$here
tmp=""
cleanup() {
    if [ -n "$tmp" ]; then
        git -C "$here" worktree remove --force "$tmp" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
if [ $# -gt 1 ]; then
    echo "usage: scripts/test-time.sh [REV]   (REV: a git revision; none: the checkout)" >&2
    exit 2
fi
if [ $# -eq 1 ]; then
    if ! rev=$(git -C "$here" rev-parse --verify --quiet "$1^{commit}"); then
        echo "scripts/test-time.sh: '$1' is not a git revision of this repository; give a commit, branch or tag, or nothing for the checkout" >&2
        exit 2
    fi
    tmp=$(mktemp -d)
    git -C "$here" worktree add --detach "$tmp" "$rev" >/dev/null
    src=$tmp
    label="revision $(git -C "$here" log -1 --format='%h %s' "$rev")"
else
    label="checkout $(git -C "$here" log -1 --format='%h %s')$(git -C "$here" diff --quiet HEAD || echo ' (with uncommitted changes)')"
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/target}
cd "$src"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

echo "# test-time: $label"
echo "# cpus: $(nproc); load before: $(uptime | sed 's/.*load average: //')"

# The build, not timed; the test executables from cargo's messages.
bins=$(cargo test --no-run --message-format=json 2>/dev/null |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
           | "\(.target.kind[0]) \(.target.name) \(.executable)"')

echo
echo "## cargo test (the whole run after the build)"
log=$(mktemp)
cpu=$(mktemp)
t0=$(now)
status=0
# bash's `time` counts the CPU of cargo and of every test process under it: on a shared
# machine the wall time moves with the neighbours' load, the CPU seconds much less
TIMEFORMAT='%U %S'
{ time cargo test >"$log" 2>&1 || status=$?; } 2>"$cpu"
t1=$(now)
grep -E '^\s*Running|^\s*Doc-tests|^test result:' "$log" | sed -e 's/^ *//' -e 's/ (.*target[^)]*)//'
# a failed test: its name and what it said
grep -E -A3 '^---- .* stdout ----$' "$log" | sed -n 1,40p || true
echo "cargo test wall time: $(secs "$t0" "$t1") s (exit status $status)"
awk '{ printf "cargo test CPU time: %.1f s (user %.1f + system %.1f)\n", $1 + $2, $1, $2 }' "$cpu"
rm -f "$log" "$cpu"

echo
echo "## per-test times (library and tests/it binaries run directly, --report-time)"
times=$(mktemp)
while read -r kind name exe; do
    [ -n "$exe" ] || continue
    b0=$(now)
    RUSTC_BOOTSTRAP=1 "$exe" -Z unstable-options --report-time 2>/dev/null |
        sed -n -E "s/^test (.*) \.\.\. (ok|FAILED) <([0-9.]+)s>$/\3 $kind:$name \1/p" >>"$times" || true
    b1=$(now)
    echo "$kind $name: $(secs "$b0" "$b1") s"
done <<<"$bins"
echo
echo "## ten slowest tests (seconds, binary, test)"
sort -rn "$times" | sed -n 1,10p   # sed reads to the end: no SIGPIPE for sort under pipefail
rm -f "$times"
echo
echo "# load after: $(uptime | sed 's/.*load average: //')"
exit "$status"
