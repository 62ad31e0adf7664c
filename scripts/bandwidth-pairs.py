#!/usr/bin/env python3
"""Pairs of two `bandwidth` binaries from scripts/bandwidth-ab.sh summaries, per token count.

    scripts/bandwidth-pairs.py NAME_OF_NEW SUMMARY [SUMMARY ...]

Each summary names its binaries on its '# A:' and '# B:' lines; the binary whose path ends in
NAME_OF_NEW is "new", the other "old", whichever order it ran in. Prints, per token count, the
range and mean of each side's GB/s over all pairs, in how many pairs new was lower, and the mean
of the first and the second run of a pair (the order effect).
"""
import re
import sys


def main():
    new_name, files = sys.argv[1], sys.argv[2:]
    pairs = []  # (new, old, new_ran_first) per run and token count
    for f in files:
        text = open(f).read()
        side = {}
        for s in "AB":
            m = re.search(rf"^# {s}: .*\((.*)\)$", text, re.M)
            side[s.lower()] = "new" if m.group(1).endswith(new_name) else "old"
        runs = {}
        for m in re.finditer(r"^(a|b) run (\d+): (.*)$", text, re.M):
            t = {int(k): int(v) for k, v in re.findall(r"T=(\d+): (\d+)", m.group(3))}
            runs.setdefault(int(m.group(2)), {})[side[m.group(1)]] = t
        new_first = side["a"] == "new"
        for r in sorted(runs):
            pairs.append((runs[r]["new"], runs[r]["old"], new_first))
    print(f"# {len(pairs)} alternating pairs from {', '.join(files)}")
    print("# T  new min-max (mean)      old min-max (mean)      new lower  first-run mean  second-run mean")
    for t in sorted(pairs[0][0]):
        new = [p[0][t] for p in pairs]
        old = [p[1][t] for p in pairs]
        first = [p[0][t] if p[2] else p[1][t] for p in pairs]
        second = [p[1][t] if p[2] else p[0][t] for p in pairs]
        lower = sum(n < o for n, o in zip(new, old))
        mean = lambda v: sum(v) / len(v)
        print(
            f"  {t:<2} {min(new)}-{max(new)} ({mean(new):.1f})   {min(old)}-{max(old)} ({mean(old):.1f})"
            f"   {lower} of {len(pairs)}    {mean(first):.1f}          {mean(second):.1f}"
        )


if __name__ == "__main__":
    main()
