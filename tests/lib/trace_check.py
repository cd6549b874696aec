#!/usr/bin/env python3
"""trace_check.py - assertions on a ddptrain --trace file (tests/observe/trace.sh).

    trace_check.py FILE ddp RANKS LAYERS BUCKETS STEP_LO STEP_HI OVERLAP(yes|no|any)
    trace_check.py FILE dp REPLICAS LAYERS STEP_LO STEP_HI

Prints one line of figures; exits 1 with the first failed expectation.
"""
import json
import math
import sys


def fail(msg):
    print(f"trace_check: {msg}", file=sys.stderr)
    sys.exit(1)


def spans(events):
    """Complete spans and async pairs as (pid, tid, name, step, t0, t1)."""
    out, begun = [], {}
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            out.append((e["pid"], e["tid"], e["name"], e["args"]["step"], e["ts"], e["ts"] + e["dur"]))
        elif ph == "b":
            if e["id"] in begun:
                fail(f"async id {e['id']} begun twice")
            begun[e["id"]] = e
        elif ph == "e":
            b = begun.pop(e["id"], None)
            if b is None:
                fail(f"async end without a begin: {e}")
            if not e["ts"] >= b["ts"]:  # also for a NaN
                fail(f"{b['name']} ends before it begins")
            out.append((b["pid"], b["tid"], b["name"], b["args"]["step"], b["ts"], e["ts"]))
    if begun:
        fail(f"{len(begun)} async spans never end")
    for _, _, n, st, t0, t1 in out:
        if not (math.isfinite(t0) and math.isfinite(t1)):
            fail(f"{n} at step {st}: times {t0}, {t1} are not finite")
    return out


def main():
    path, mode = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    if "clock_alignment" not in doc.get("otherData", {}):
        fail("no clock_alignment in otherData")
    s = spans(events)
    names = {(p, t, n, st) for p, t, n, st, _, _ in s}
    if mode == "ddp":
        ranks, layers, buckets, lo, hi, overlap = (int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                                                   int(sys.argv[6]), int(sys.argv[7]), sys.argv[8])
        steps = {st for *_, st, _, _ in [(p, t, n, st, a, b) for p, t, n, st, a, b in s]}
        if steps != set(range(lo, hi + 1)):
            fail(f"steps recorded {sorted(steps)}, want {lo}..{hi}")
        for r in range(ranks):
            for st in range(lo, hi + 1):
                want = [f"forward layer {l}" for l in range(1, layers + 1)] + \
                       [f"backward layer {l}" for l in range(1, layers + 1)] + \
                       [f"allreduce bucket {b}" for b in range(buckets)] + ["load", "loss", "wait", "optimizer"]
                for w in want:
                    if (r, 0, w, st) not in names:
                        fail(f"rank {r} step {st}: no '{w}' span")
        n_ov = 0
        for p, t, n, st, a0, a1 in s:
            if n.startswith("allreduce"):
                if any(q == p and m.startswith("backward") and x0 < a1 and a0 < x1
                       for q, _, m, _, x0, x1 in s):
                    n_ov += 1
        if overlap == "yes" and n_ov == 0:
            fail("no all-reduce span overlaps a backward span")
        # "any": where the spans' times mean nothing (a stub's events), no claim either way
        if overlap == "no" and n_ov != 0:
            fail(f"{n_ov} all-reduce spans overlap a backward span with --no-overlap")
        print(f"trace_check: ddp {ranks} ranks, steps {lo}-{hi}: {len(s)} spans, "
              f"{n_ov} all-reduces overlapping backward")
    else:
        reps, layers, lo, hi = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        for st in range(lo, hi + 1):
            for w in ["gather", "reduce", "loss", "optimizer", "scatter"]:
                if (0, 0, w, st) not in names:
                    fail(f"step {st}: no '{w}' on replica 0")
            for i in range(reps):
                for l in range(1, layers + 1):
                    for w in (f"forward layer {l}", f"backward layer {l}"):
                        if (0, i, w, st) not in names:
                            fail(f"step {st}: no '{w}' on replica {i}")
                if i > 0 and (0, i, "replicate", st) not in names:
                    fail(f"step {st}: no 'replicate' on replica {i}")
        if any(t != 0 and n in ("gather", "reduce") for p, t, n, *_ in s):
            fail("gather or reduce off replica 0")
        print(f"trace_check: dp {reps} replicas, steps {lo}-{hi}: {len(s)} spans, gather and reduce on replica 0")


if __name__ == "__main__":
    main()
