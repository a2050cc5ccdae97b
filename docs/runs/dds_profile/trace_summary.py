"""Summarise a trace of trace_patch.diff: per topic, how long DDS took to deliver
(received_timestamp - source_timestamp of rclpy's MessageInfo) and how long the executor took
to run the callback after that. Usage: python trace_summary.py TRACE[.gz]"""
import gzip
import sys

rows = {"img": [], "odom": []}
path = sys.argv[1]
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    for line in f:
        p = line.split()
        rows[p[0]].append(tuple(map(float, p[1:])))   # callback time, stamp, source, received
for k, xs in rows.items():
    if not xs:
        continue
    dds = sorted(r[3] - r[2] for r in xs)
    ex = sorted(r[0] - r[3] for r in xs)

    def q(v, f):
        return v[min(len(v) - 1, int(f * len(v)))]
    print(k, len(xs), "DDS received-source p50 %.3f p90 %.3f max %.3f" % (
        q(dds, .5), q(dds, .9), dds[-1]), "| callback-received p50 %.3f p90 %.3f max %.3f" % (
        q(ex, .5), q(ex, .9), ex[-1]))
