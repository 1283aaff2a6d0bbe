#!/usr/bin/env python3
"""runs.py N coordinator [flags...] FILE [MODEL]: runs the command N times
and prints the median, least and most of its wall time and of the fields
of its "trained" log line (load, first_gradient, train, passes). Runs of a
tenth of a second vary by a third on a small virtual machine: compare
medians, alternating the commands compared."""
import json
import statistics
import subprocess
import sys
import time

n, cmd = int(sys.argv[1]), sys.argv[2:]
rows = []
for _ in range(n):
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} exited {p.returncode}:\n{p.stderr[-2000:]}")
    trained = {}
    for line in p.stderr.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "trained":
            trained = entry
    rows.append([wall] + [trained.get(k, 0) for k in ("load", "first_gradient", "train", "passes")])
for i, name in enumerate(["wall", "load", "first_gradient", "train", "passes"]):
    v = sorted(r[i] for r in rows)
    print(f"{name} median {statistics.median(v):.4f} min {v[0]:.4f} max {v[-1]:.4f}")
