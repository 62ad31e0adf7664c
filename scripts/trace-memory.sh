#!/usr/bin/env bash
# The peak memory of `verifybench trace` on gzip bombs: files of about 1 MB that expand to
# 1 GB of JSON. Needs no GPU (about a minute on two cores, most of it python3 compressing).
#
#   scripts/trace-memory.sh [BINARY] [WORKDIR]   (BINARY: target/release/verifybench)
#
# Writes into WORKDIR (a temporary folder, removed, when not given) three bombs, each 10^9
# bytes of JSON gzipped at level 9:
#   string   one event whose name is one string of 10^9 - 70 bytes;
#   dropped  10^9 bytes of identical small `python_function` events (the kind the reader skips);
#   kernels  10^9 bytes of identical small kernel events (the kind the reader keeps);
# and, beside them, a real trace (tests/data/traces/hta/df_index_resolver.json.gz, 3 MB of gzip,
# 54 MB of JSON) to show that real ones are still read whole. Each runs under
# `/usr/bin/time -v`; a line per file gives its sizes, the exit code, the peak resident memory
# and the first line of stderr. Exits 1 when a bomb peaks at 200 MB or more, or is read
# without being refused.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/verifybench}")
if [ -n "${2:-}" ]; then
  WORK=$2; mkdir -p "$WORK"
else
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
fi
LIMIT_KB=$((200 * 1000))

python3 - "$WORK" <<'EOF'
import gzip, os, sys
work = sys.argv[1]
TOTAL = 10**9
def bomb(name, head, unit, tail):
    path = os.path.join(work, name)
    if os.path.exists(path):
        return
    with gzip.open(path + ".part", "wb", compresslevel=9) as f:
        f.write(head)
        left = TOTAL - len(head) - len(tail)
        block = unit * (max(1, (1 << 20) // len(unit)))
        while left >= len(block):
            f.write(block)
            left -= len(block)
        # whole units, then blanks: a well-formed document of exactly TOTAL bytes
        f.write(unit * (left // len(unit)) + b" " * (left % len(unit)))
        f.write(tail)
    os.rename(path + ".part", path)
bomb("string.json.gz", b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"', b"a",
     b'","ts":1,"dur":1}]}')
bomb("dropped.json.gz", b'{"traceEvents":[',
     b'{"ph":"X","cat":"python_function","name":"f","ts":1,"dur":1},', b'{}]}')
bomb("kernels.json.gz", b'{"traceEvents":[',
     b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},', b'{}]}')
EOF

echo "# $("$BIN" --version), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores"
echo "# file | gzip bytes | JSON bytes | exit | peak RSS (KB) | wall | stderr (first line)"
fail=0
for f in "$WORK/string.json.gz" "$WORK/dropped.json.gz" "$WORK/kernels.json.gz" \
    tests/data/traces/hta/df_index_resolver.json.gz; do
  gz=$(stat -c %s "$f")
  json=$(gzip -dc "$f" | wc -c)
  /usr/bin/time -v "$BIN" trace "$f" > "$WORK/out.txt" 2> "$WORK/err.txt"
  rc=$(sed -n 's/^\s*Exit status: //p' "$WORK/err.txt")
  peak=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$WORK/err.txt")
  wall=$(sed -n 's/^\s*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$WORK/err.txt")
  first=$(sed -n '/Command being timed/q; /^Command exited/d; p' "$WORK/err.txt" | head -1)
  echo "$(basename "$f") | $gz | $json | $rc | $peak | $wall | ${first:0:300}"
  case $(basename "$f") in
    df_index_resolver.json.gz) [ "$rc" = 0 ] || fail=1 ;;
    *) { [ "$peak" -lt "$LIMIT_KB" ] && [ "$rc" = 2 ]; } || fail=1 ;;
  esac
done
if [ $fail = 0 ]; then
  echo "# every bomb refused (exit 2) below 200 MB peak; the real trace read (exit 0)"
else
  echo "# FAILED: a bomb peaked at 200 MB or more, or was not refused; or the real trace failed"
fi
exit $fail
