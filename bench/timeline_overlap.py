#!/usr/bin/env python3
"""Fraction of all-reduce time that lies inside backward spans, from one rank's DDP timeline
(LOCKSTEP_TIMELINE, Chrome trace format). Prints it with 3 decimals, or nan without all-reduces.

    python3 bench/timeline_overlap.py TIMELINE.json
"""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
spans, open_spans = {}, {}
for e in events:
    if e["ph"] == "B":
        open_spans[(e["name"], e["tid"])] = e["ts"]
    elif e["ph"] == "E":
        start = open_spans.pop((e["name"], e["tid"]), None)
        if start is not None:
            name = e["name"].split(" (")[0] if e["tid"] == 1 else e["name"]
            spans.setdefault(name, []).append((start, e["ts"]))
backward = spans.get("backward", [])
comm = [s for name, v in spans.items() if name != "backward" for s in v]
total = sum(b - a for a, b in comm)
hidden = sum(max(0, min(b, d) - max(a, c)) for a, b in comm for c, d in backward)
print(f"{hidden / total:.3f}" if total else "nan")
