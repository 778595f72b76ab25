#!/usr/bin/env python3
"""bench/gemm/own_sgemm_table.py — medians over the repeats of bench/gemm/own_sgemm.sh's output
(build/gemm/own_sgemm.txt): one markdown table per thread count, a row per shape, per weight mode
own and dnnl wall GFLOP/s (median call, then the median over repeats) and own/dnnl.

    python3 bench/gemm/own_sgemm_table.py [--cpu] [build/gemm/own_sgemm.txt]

--cpu: the CPU-time columns instead of the wall ones (steadier on a loaded machine at 1 thread;
the process clock lags with more threads).
"""
import re, statistics, sys
args = sys.argv[1:]
cpu = "--cpu" in args
args = [a for a in args if a != "--cpu"]
path = args[0] if args else "build/gemm/own_sgemm.txt"
col = 5 if cpu else 2
data, modes, shapes = {}, [], []
key = None
for line in open(path):
    m = re.match(r"# oneDNN .*?, (\d+) threads, .*?\[K,N\] weights (packed per call|packed once|read in place); (cold|warm)", line)
    if m:
        key = (int(m.group(1)), m.group(2) + ", " + m.group(3))
        if key[1] not in modes:
            modes.append(key[1])
        continue
    f = [x.strip() for x in line.split("|")]
    if key and len(f) > 8 and f[1] and not f[1].startswith(("shape", "---")):
        if f[1] not in shapes:
            shapes.append(f[1])
        d = data.setdefault((key[0], key[1], f[1]), [[], [], []])
        d[0].append(float(f[col])), d[1].append(float(f[col + 1])), d[2].append(float(f[col]) / float(f[col + 1]))
for th in sorted({k[0] for k in data}):
    print(f"\n{th} thread(s): {'CPU-time' if cpu else 'wall'} GFLOP/s own / dnnl (own/dnnl), medians of {len(next(iter(data.values()))[0])} runs\n")
    print("| shape | " + " | ".join(modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for s in shapes:
        cells = []
        for md in modes:
            d = data.get((th, md, s))
            if not d:
                cells.append("-")
                continue
            cells.append("%.0f / %.0f (%.2f)" % tuple(statistics.median(x) for x in d))
        print(f"| {s} | " + " | ".join(cells) + " |")
