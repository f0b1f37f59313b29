#!/usr/bin/env python3
"""Checks a profile directory with Python's own parsers (no third-party
modules): trace.json is Chrome-trace JSON with one complete event per task
record; steps.svg is well-formed SVG whose bars sum to each rank's step;
summary.json parses and agrees with the picture.

    check_profile_files.py DIR
"""
import json
import math
import sys
import xml.etree.ElementTree as ET

SVG_NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print("check_profile_files: " + msg, file=sys.stderr)
    sys.exit(1)


def check_trace(path):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(path + ": no traceEvents array")
    if trace.get("displayTimeUnit") != "ns":
        fail(path + ": displayTimeUnit is not ns")
    tasks = 0
    for i, ev in enumerate(trace["traceEvents"]):
        for key in ("ph", "pid", "name"):
            if key not in ev:
                fail("%s: traceEvents[%d] has no %s" % (path, i, key))
        if ev["ph"] == "X":
            for key in ("ts", "dur", "tid"):
                if not isinstance(ev.get(key), (int, float)):
                    fail("%s: traceEvents[%d] has no numeric %s" % (path, i, key))
            if ev["dur"] < 0 or not math.isfinite(ev["ts"]):
                fail("%s: traceEvents[%d] has a bad ts or dur" % (path, i))
        if ev.get("cat") == "task":
            tasks += 1
    if tasks == 0:
        fail(path + ": no task events")
    ranks = trace.get("otherData", {}).get("ranks")
    if not isinstance(ranks, list) or not ranks:
        fail(path + ": otherData has no ranks")
    return tasks


def check_svg(path):
    root = ET.parse(path).getroot()
    if root.tag != SVG_NS + "svg":
        fail(path + ": the root is %s, not an SVG svg element" % root.tag)
    steps = {}
    for g in root.iter(SVG_NS + "g"):
        if "data-step-ms" not in g.attrib:
            continue
        rank = g.attrib["data-rank"]
        parts = [r for r in g.iter(SVG_NS + "rect") if "data-part" in r.attrib]
        names = [r.attrib["data-part"] for r in parts]
        if names != ["compute", "exposed_comm", "bubble", "queue", "other"]:
            fail("%s: rank %s has parts %s" % (path, rank, names))
        step = float(g.attrib["data-step-ms"])
        total = sum(float(r.attrib["data-ms"]) for r in parts)
        if abs(total - step) > 1e-4 * max(1.0, step):
            fail("%s: rank %s parts sum to %g ms, its step is %g ms" % (path, rank, total, step))
        steps[rank] = step
    if not steps:
        fail(path + ": no rank bars")
    return steps


def main():
    if len(sys.argv) != 2:
        fail("usage: check_profile_files.py DIR")
    d = sys.argv[1]
    tasks = check_trace(d + "/trace.json")
    steps = check_svg(d + "/steps.svg")
    with open(d + "/summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    for r in summary["ranks"]:
        want = steps.get(str(r["rank"]))
        if want is None or abs(want - r["step_ms"]) > 1e-4 * max(1.0, want):
            fail("summary.json rank %s step %s ms, steps.svg says %s" % (r["rank"], r["step_ms"], want))
    print("ok: %d task events, %d ranks" % (tasks, len(steps)))


main()
