#!/usr/bin/env python3
# Plots for docs/performance.md from `rsp-bench --json` output.
# SPDX-License-Identifier: Apache-2.0
#
#   rsp-bench --json > bench.jsonl
#   python3 bench/plot.py bench.jsonl [--out bench/plots]
#
# Writes step.png (per-step time against rows, rsp beside the mutex
# baseline, one colour per variant) and read.png (per-read cost and reads/s
# against reader threads, rsp beside the rwlock baseline). Uses matplotlib
# when it is installed; otherwise a small built-in rasteriser (zlib + a 5x7
# bitmap font) draws the same plots, so the script runs on a bare machine.
import argparse
import json
import math
import os
import struct
import sys
import zlib


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def step_series(rows, api="pipelined"):
    """{variant: [(rows, rsp_us, baseline_us), ...]} sorted by rows, for one
    way of driving the API ("pipelined", "sync" or "onetrip"; lines without an api
    parameter count as any)."""
    out = {}
    for r in rows:
        if r["bench"] != "step":
            continue
        p = r["params"]
        if p.get("api", api) != api:
            continue
        out.setdefault(p["variant"], []).append(
            (p["rows"], r["median_ns"] / 1e3, r["baseline_median_ns"] / 1e3))
    for v in out.values():
        v.sort()
    return out


def read_series(rows):
    """[(readers, rsp_ns, baseline_ns, rsp_Mreads, baseline_Mreads)] sorted."""
    out = []
    for r in rows:
        if r["bench"] != "read":
            continue
        out.append((r["params"]["readers"], r["median_ns"], r["baseline_median_ns"],
                    r["ops_per_s"] / 1e6, r["baseline_ops_per_s"] / 1e6))
    out.sort()
    return out


VARIANT_LABEL = {"one_label": "one label, 64 B slots",
                 "fork": "two labels + pre/post fork, 1 KiB slots",
                 "preplan": "preplan + promotion, 64 B slots"}
COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189)]


def hexc(c):
    return "#%02x%02x%02x" % c


# --------------------------------------------------------------------------
# matplotlib path
# --------------------------------------------------------------------------

def plot_mpl(steps, reads, outdir, title_suffix, sync_steps=None, onetrip_steps=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6), dpi=100)
    for i, (variant, pts) in enumerate(sorted(steps.items())):
        c = hexc(COLOURS[i % len(COLOURS)])
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "-o", color=c,
                label="rsp, pipelined posts: " + VARIANT_LABEL.get(variant, variant))
        if sync_steps and variant in sync_steps:
            sp = sync_steps[variant]
            ax.plot([p[0] for p in sp], [p[1] for p in sp], ":^", color=c, alpha=0.7,
                    label="rsp, sync wrappers: " + VARIANT_LABEL.get(variant, variant))
        if onetrip_steps and variant in onetrip_steps:
            op = onetrip_steps[variant]
            ax.plot([p[0] for p in op], [p[1] for p in op], "-.v", color=c, alpha=0.85,
                    label="rsp, one trip a step (rsp_step_next): "
                    + VARIANT_LABEL.get(variant, variant))
        ax.plot(xs, [p[2] for p in pts], "--s", color=c, alpha=0.7,
                label="mutex baseline: " + VARIANT_LABEL.get(variant, variant))
    # The targets at 256 rows (docs/performance.md).
    ax.plot([256], [10], "kx", markersize=10, label="target: one label, 256 rows < 10 us")
    ax.plot([256], [50], "k+", markersize=12, label="target: fork step, 256 rows < 50 us")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    xs_all = sorted({p[0] for pts in steps.values() for p in pts})
    ax.set_xticks(xs_all)
    ax.set_xticklabels([str(x) for x in xs_all])
    ax.set_xlabel("rows per step")
    ax.set_ylabel("median time per step (us)")
    ax.set_title("step: admit + plan + commit" + title_suffix)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "step.png"))
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.5), dpi=100)
    xs = [p[0] for p in reads]
    a1.plot(xs, [p[1] for p in reads], "-o", color=hexc(COLOURS[0]), label="rsp (RCU)")
    a1.plot(xs, [p[2] for p in reads], "--s", color=hexc(COLOURS[1]), label="rwlock baseline")
    a1.set_xscale("log", base=2)
    a1.set_xticks(xs)
    a1.set_xticklabels([str(x) for x in xs])
    a1.set_ylim(bottom=0)
    a1.set_xlabel("reader threads (2 cores)")
    a1.set_ylabel("median ns per read")
    a1.set_title("read cost")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=8)
    a2.plot(xs, [p[3] for p in reads], "-o", color=hexc(COLOURS[0]), label="rsp (RCU)")
    a2.plot(xs, [p[4] for p in reads], "--s", color=hexc(COLOURS[1]), label="rwlock baseline")
    a2.set_xscale("log", base=2)
    a2.set_xticks(xs)
    a2.set_xticklabels([str(x) for x in xs])
    a2.set_ylim(bottom=0)
    a2.set_xlabel("reader threads (2 cores)")
    a2.set_ylabel("million reads per second (all readers)")
    a2.set_title("read throughput, a plan published every 50 us")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8)
    if title_suffix:
        fig.suptitle("read: live plan addressing" + title_suffix)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "read.png"))
    plt.close(fig)


# --------------------------------------------------------------------------
# Fallback: a tiny rasteriser and PNG writer
# --------------------------------------------------------------------------

# 5x7 glyphs: 7 rows of 5 columns ("#" on). Lower case is drawn upper case.
_F = """
0 .###. #...# #..## #.#.# ##..# #...# .###.
1 ..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.
2 .###. #...# ....# ...#. ..#.. .#... #####
3 ##### ...#. ..#.. ...#. ....# #...# .###.
4 ...#. ..##. .#.#. #..#. ##### ...#. ...#.
5 ##### #.... ####. ....# ....# #...# .###.
6 ..##. .#... #.... ####. #...# #...# .###.
7 ##### ....# ...#. ..#.. .#... .#... .#...
8 .###. #...# #...# .###. #...# #...# .###.
9 .###. #...# #...# .#### ....# ...#. .##..
A .###. #...# #...# ##### #...# #...# #...#
B ####. #...# #...# ####. #...# #...# ####.
C .###. #...# #.... #.... #.... #...# .###.
D ###.. #..#. #...# #...# #...# #..#. ###..
E ##### #.... #.... ####. #.... #.... #####
F ##### #.... #.... ####. #.... #.... #....
G .###. #...# #.... #.### #...# #...# .####
H #...# #...# #...# ##### #...# #...# #...#
I .###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.
J ..### ...#. ...#. ...#. ...#. #..#. .##..
K #...# #..#. #.#.. ##... #.#.. #..#. #...#
L #.... #.... #.... #.... #.... #.... #####
M #...# ##.## #.#.# #.#.# #...# #...# #...#
N #...# #...# ##..# #.#.# #..## #...# #...#
O .###. #...# #...# #...# #...# #...# .###.
P ####. #...# #...# ####. #.... #.... #....
Q .###. #...# #...# #...# #.#.# #..#. .##.#
R ####. #...# #...# ####. #.#.. #..#. #...#
S .#### #.... #.... .###. ....# ....# ####.
T ##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..
U #...# #...# #...# #...# #...# #...# .###.
V #...# #...# #...# #...# #...# .#.#. ..#..
W #...# #...# #...# #.#.# #.#.# #.#.# .#.#.
X #...# #...# .#.#. ..#.. .#.#. #...# #...#
Y #...# #...# .#.#. ..#.. ..#.. ..#.. ..#..
Z ##### ....# ...#. ..#.. .#... #.... #####
. ..... ..... ..... ..... ..... .##.. .##..
, ..... ..... ..... ..... .##.. ..#.. .#...
: ..... .##.. .##.. ..... .##.. .##.. .....
- ..... ..... ..... .###. ..... ..... .....
+ ..... ..#.. ..#.. ##### ..#.. ..#.. .....
/ ....# ...#. ...#. ..#.. .#... .#... #....
( ...#. ..#.. .#... .#... .#... ..#.. ...#.
) .#... ..#.. ...#. ...#. ...#. ..#.. .#...
= ..... ..... ##### ..... ##### ..... .....
_ ..... ..... ..... ..... ..... ..... #####
% ##..# ##.#. ...#. ..#.. .#... .#.## #..##
"""
_FONT = {}
for _line in _F.strip().splitlines():
    _ch, _rows = _line[0], _line[2:].split()
    _FONT[_ch] = [[c == "#" for c in r] for r in _rows]
_FONT[" "] = [[False] * 5 for _ in range(7)]


def _glyph(ch):
    return _FONT.get(ch) or _FONT.get(ch.upper()) or _FONT[" "]


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1, dash=0):
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dash or (n // dash) % 2 == 0:
                for ox in range(-(width // 2), width - width // 2):
                    for oy in range(-(width // 2), width - width // 2):
                        self.set(x0 + ox, y0 + oy, c)
            n += 1
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def rect(self, x, y, w, h, c):
        for yy in range(int(y), int(y + h)):
            for xx in range(int(x), int(x + w)):
                self.set(xx, yy, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=1, vertical=False):
        for k, ch in enumerate(s):
            g = _glyph(ch)
            for r in range(7):
                for col in range(5):
                    if g[r][col]:
                        for a in range(scale):
                            for b in range(scale):
                                if vertical:
                                    self.set(x + r * scale + a, y - (k * 6 + col) * scale - b, c)
                                else:
                                    self.set(x + (k * 6 + col) * scale + a, y + r * scale + b, c)

    def save(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(tag, data):
            body = tag + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
        png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        with open(path, "wb") as f:
            f.write(png)


def _fmt(v):
    if v >= 100:
        return "%d" % round(v)
    if v >= 1:
        return ("%.1f" % v).rstrip("0").rstrip(".")
    return ("%.2f" % v).rstrip("0").rstrip(".")


def raster_plot(path, title, xlabel, ylabel, series, xlog=True, ylog=True, ymin0=False):
    """series: [(label, colour, dashed, [(x, y), ...])]."""
    W, H = 900, 560
    L, R, T, B = 80, 20, 40, 190
    cv = Canvas(W, H)
    xs = [x for s in series for x, _ in s[3]]
    ys = [y for s in series for _, y in s[3] if y > 0]
    if not xs or not ys:
        cv.text(L, T, "no data", scale=2)
        cv.save(path)
        return
    fx = (lambda v: math.log2(v)) if xlog else (lambda v: v)
    fy = (lambda v: math.log10(v)) if ylog else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    if ylog:
        y0, y1 = math.floor(fy(min(ys))), math.ceil(fy(max(ys)))
    else:
        y0, y1 = (0.0 if ymin0 else min(ys)), max(ys) * 1.1
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    pw, ph = W - L - R, H - T - B
    X = lambda v: L + (fx(v) - x0) / (x1 - x0) * pw
    Y = lambda v: T + ph - (fy(v) - y0) / (y1 - y0) * ph
    grey, black = (220, 220, 220), (0, 0, 0)
    # grid and ticks
    for x in sorted(set(xs)):
        cv.line(X(x), T, X(x), T + ph, grey)
        lab = _fmt(x)
        cv.text(int(X(x)) - 3 * len(lab), T + ph + 6, lab)
    if ylog:
        yt = [10 ** e for e in range(int(y0), int(y1) + 1)]
    else:
        step = (y1 - y0) / 5
        yt = [y0 + i * step for i in range(6)]
    for y in yt:
        cv.line(L, Y(y), L + pw, Y(y), grey)
        lab = _fmt(y)
        cv.text(L - 6 - 6 * len(lab), int(Y(y)) - 3, lab)
    cv.line(L, T, L, T + ph, black)
    cv.line(L, T + ph, L + pw, T + ph, black)
    cv.text(L, 12, title, scale=2)
    cv.text(L + pw // 2 - 3 * len(xlabel), T + ph + 22, xlabel)
    cv.text(14, T + ph // 2 + 3 * len(ylabel), ylabel, vertical=True)
    for label, colour, dashed, pts in series:
        pts = [(x, y) for x, y in pts if y > 0]
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            cv.line(X(xa), Y(ya), X(xb), Y(yb), colour, width=2, dash=6 if dashed else 0)
        for x, y in pts:
            cv.rect(X(x) - 3, Y(y) - 3, 7, 7, colour)
    ly = T + ph + 44
    for label, colour, dashed, _ in series:
        cv.line(L, ly + 3, L + 30, ly + 3, colour, width=2, dash=6 if dashed else 0)
        cv.text(L + 40, ly, label)
        ly += 14
    cv.save(path)


def plot_raster(steps, reads, outdir, title_suffix, sync_steps=None, onetrip_steps=None):
    series = []
    for i, (variant, pts) in enumerate(sorted(steps.items())):
        c = COLOURS[i % len(COLOURS)]
        name = VARIANT_LABEL.get(variant, variant)
        series.append(("rsp, pipelined: " + name, c, False, [(p[0], p[1]) for p in pts]))
        series.append(("mutex baseline: " + name, c, True, [(p[0], p[2]) for p in pts]))
    raster_plot(os.path.join(outdir, "step.png"), "step: admit + plan + commit" + title_suffix,
                "rows per step", "median us per step", series)
    rs = [("rsp (RCU): ns per read", COLOURS[0], False, [(p[0], p[1]) for p in reads]),
          ("rwlock baseline: ns per read", COLOURS[1], True, [(p[0], p[2]) for p in reads])]
    raster_plot(os.path.join(outdir, "read.png"), "read cost, a plan every 50 us" + title_suffix,
                "reader threads (2 cores)", "median ns per read", rs, ylog=False, ymin0=True)


# --------------------------------------------------------------------------
# prefix_trace: token hit rate against the store's size, LRU and value
# --------------------------------------------------------------------------

TRACE_TIERS = ("small", "medium", "large")


def trace_series(rows):
    """{(workload, policy): [(tier index 1..3, token_hit_rate), ...]}."""
    out = {}
    for r in rows:
        if r["bench"] != "prefix_trace":
            continue
        p = r["params"]
        out.setdefault((p["workload"], p["policy"]), []).append(
            (TRACE_TIERS.index(p["tier"]) + 1, r["token_hit_rate"]))
    return {k: sorted(v) for k, v in out.items()}


def plot_trace(rows, outdir, title_suffix):
    """prefix_trace.png (built-in rasteriser): one colour a workload, LRU
    dashed, value solid; x: the small, medium and large store."""
    series = trace_series(rows)
    if not series:
        return None
    workloads = sorted({w for w, _ in series})
    out = []
    for (w, policy), pts in sorted(series.items()):
        c = COLOURS[workloads.index(w) % len(COLOURS)]
        out.append(("%s, %s" % (w, policy), c, policy == "lru", pts))
    path = os.path.join(outdir, "prefix_trace.png")
    raster_plot(path, "prefix_trace: token hit rate, LRU (dashed) and value" + title_suffix,
                "store: 1 small, 2 medium, 3 large", "token hit rate", out, xlog=False,
                ylog=False, ymin0=True)
    return path


# --------------------------------------------------------------------------
# Markdown tables and the target check (docs/performance.md)
# --------------------------------------------------------------------------

def _us(ns):
    if ns >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    if ns >= 1e3:
        return "%.2f us" % (ns / 1e3)
    return "%.1f ns" % ns


def _rate(r):
    if r >= 1e6:
        return "%.2f M/s" % (r / 1e6)
    if r >= 1e3:
        return "%.1f k/s" % (r / 1e3)
    return "%.0f /s" % r


def markdown(rows):
    out = []
    by = {}
    for r in rows:
        by.setdefault(r["bench"], []).append(r)
    if "rtt" in by:
        out += ["### rtt", "",
                "| owner | rsp median | rsp p99 | floor | floor median | floor p99 | floor / rsp |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["rtt"]:
            out.append("| %s | %s | %s | %s | %s | %s | %.2f |" % (
                r["params"]["owner"], _us(r["median_ns"]), _us(r["p99_ns"]), r["baseline"],
                _us(r["baseline_median_ns"]), _us(r["baseline_p99_ns"]), r["ratio"]))
        out.append("")
    if "ingest_remove" in by:
        out += ["### ingest_remove", "",
                "| client threads | rids/msg | rsp ns/rid op | rsp rid ops/s | mutex ns/rid op | "
                "mutex rid ops/s | ratio |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["ingest_remove"]:
            out.append("| %d | %d | %s | %s | %s | %s | %.2f |" % (
                r["params"]["threads"], r["params"].get("rids_per_msg", 1), _us(r["median_ns"]),
                _rate(r["ops_per_s"]),
                _us(r["baseline_median_ns"]), _rate(r["baseline_ops_per_s"]), r["ratio"]))
        out.append("")
    if "step" in by:
        out += ["### step", "",
                "| variant | api | rows | rsp median | rsp p99 | mutex median | mutex p99 | ratio |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["step"]:
            p = r["params"]
            out.append("| %s | %s | %d | %s | %s | %s | %s | %.2f |" % (
                p["variant"], p.get("api", ""), p["rows"], _us(r["median_ns"]), _us(r["p99_ns"]),
                _us(r["baseline_median_ns"]), _us(r["baseline_p99_ns"]), r["ratio"]))
        out.append("")
    if "read" in by:
        out += ["### read", "",
                "| readers | rsp ns/read | rsp p99 | rsp reads/s | rwlock ns/read | rwlock p99 | "
                "rwlock reads/s | ratio | plans/s rsp / rwlock |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["read"]:
            out.append("| %d | %.1f | %.1f | %s | %.1f | %.1f | %s | %.2f | %d / %d |" % (
                r["params"]["readers"], r["median_ns"], r["p99_ns"], _rate(r["ops_per_s"]),
                r["baseline_median_ns"], r["baseline_p99_ns"], _rate(r["baseline_ops_per_s"]),
                r["ratio"], r.get("plans_per_s", 0), r.get("baseline_plans_per_s", 0)))
        out.append("")
    if "prefix_reuse" in by:
        out += ["### prefix_reuse (8 rows a step, 32 new tokens a row)", "",
                "| prefix tokens | rsp step (restores) | recompute step | speed-up | step time "
                "saved | tokens saved | state bytes saved | bytes restored |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["prefix_reuse"]:
            out.append("| %d | %s | %s | %.1fx | %s | %d | %d | %d |" % (
                r["params"]["prefix_tokens"], _us(r["median_ns"]), _us(r["baseline_median_ns"]),
                r["ratio"], _us(r.get("step_ns_saved", 0)), r.get("tokens_saved_per_step", 0),
                r.get("state_bytes_saved_per_step", 0), r.get("bytes_restored_per_step", 0)))
        out.append("")
    if "prefix_trace" in by:
        out += ["### prefix_trace (token hit rate)", "",
                "| workload | tier (checkpoints) | LRU | value | value / LRU |",
                "| --- | --- | --- | --- | --- |"]
        for r in by["prefix_trace"]:
            p = r["params"]
            if p["policy"] == "value":
                lru = r.get("lru_token_hit_rate", 0)
                out.append("| %s | %s (%d) | %.3f | %.3f | %s |" % (
                    p["workload"], p["tier"], p["checkpoints"], lru, r["token_hit_rate"],
                    "%.2fx" % (r["token_hit_rate"] / lru) if lru else "-"))
        out.append("")
    if "zero_fork" in by:
        out += ["### zero_fork (1 MiB slots)", "",
                "| op | slots | rsp median | rsp GB/s | plain median | plain GB/s | plain / rsp |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in by["zero_fork"]:
            p = r["params"]
            out.append("| %s (%s) | %d | %s | %.1f | %s | %.1f | %.2f |" % (
                p["op"], r["baseline"], p["slots"], _us(r["median_ns"]), r.get("gb_per_s", 0),
                _us(r["baseline_median_ns"]), r.get("baseline_gb_per_s", 0), r["ratio"]))
        out.append("")
    return "\n".join(out)


def targets(rows):
    """[(target, measured, met)] for the issue's targets."""
    res = []

    def find(bench, **kw):
        return [r for r in rows if r["bench"] == bench and
                all(r["params"].get(k) == v for k, v in kw.items())]

    for api in ("pipelined", "sync"):
        for r in find("step", variant="one_label", rows=256, api=api):
            res.append(("step, 256 rows, one label (%s) < 10 us" % api, _us(r["median_ns"]),
                        r["median_ns"] < 10000))
            res.append(("step, 256 rows, one label (%s) within 2x of mutex" % api,
                        "%.2fx of mutex" % (r["median_ns"] / r["baseline_median_ns"]),
                        r["median_ns"] <= 2 * r["baseline_median_ns"]))
        for r in find("step", variant="fork", rows=256, api=api):
            res.append(("fork step, 256 rows, 1 KiB slots (%s) < 50 us" % api,
                        _us(r["median_ns"]), r["median_ns"] < 50000))
    # The synchronous API at one round trip a step (rsp_step_next).
    for r in find("step", variant="one_label", rows=1, api="onetrip"):
        res.append(("step, 1 row, one label (onetrip sync) <= 2.5 us", _us(r["median_ns"]),
                    r["median_ns"] <= 2500))
    for r in find("step", variant="one_label", rows=256, api="onetrip"):
        res.append(("step, 256 rows, one label (onetrip sync) <= 9 us", _us(r["median_ns"]),
                    r["median_ns"] <= 9000))
        for q in find("step", variant="one_label", rows=256, api="pipelined"):
            f = r["median_ns"] / q["median_ns"]
            res.append(("step, 256 rows, one label (onetrip sync) <= 1.5x pipelined",
                        "%.2fx" % f, f <= 1.5))
    reads = sorted(find("read"), key=lambda r: r["params"]["readers"])
    one = [r for r in reads if r["params"]["readers"] == 1]
    for r in reads:
        n = r["params"]["readers"]
        if n >= 2:
            res.append(("read, %d readers: >= 2x rwlock" % n, "%.2fx" % r["ratio"], r["ratio"] >= 2))
        if one and n > 1:
            f = r["median_ns"] / one[0]["median_ns"]
            res.append(("read, %d readers: per-read cost <= 1.5x 1-reader" % n, "%.2fx" % f,
                        f <= 1.5))
    for r in find("rtt", owner="asleep"):
        f = r["median_ns"] / r["baseline_median_ns"]
        res.append(("rtt, owner asleep: <= 1.5x futex ping-pong", "%.2fx (%s vs %s)" % (
            f, _us(r["median_ns"]), _us(r["baseline_median_ns"])), f <= 1.5))
    for r in find("rtt", owner="busy"):
        res.append(("rtt, owner busy: < 2 us", _us(r["median_ns"]), r["median_ns"] < 2000))
    for r in find("ingest_remove"):
        k = r["params"].get("rids_per_msg", 1)
        form = "" if k == 1 else " (%d rids a message)" % k
        res.append(("ingest_remove, %d threads%s: >= 1x mutex" % (r["params"]["threads"], form),
                    "%.2fx" % r["ratio"], r["ratio"] >= 1))
    for r in find("zero_fork"):
        res.append(("zero_fork, %s %d slots: ratio >= 0.9" % (r["params"]["op"], r["params"]["slots"]),
                    "%.2f" % r["ratio"], r["ratio"] >= 0.9))
    # Checkpoints (docs/checkpoints.md).
    for r in find("ckpt_copy"):
        p = r["params"]
        how = ("device layer only" if p.get("path") == "device" else
               "%d step(s) posted" % p.get("steps_posted", 1))
        res.append(("ckpt_copy, 1 MiB take + restore, %s tier, %s: >= 0.9x memcpy"
                     % (p["tier"], how), "%.2fx" % r["ratio"], r["ratio"] >= 0.9))
    lookups = sorted(find("ckpt_lookup"), key=lambda r: r["params"]["readers"])
    for r in lookups:
        res.append(("ckpt_lookup, %d readers: <= 100 ns" % r["params"]["readers"],
                    "%.1f ns" % r["median_ns"], r["median_ns"] <= 100))
    if len(lookups) > 1:
        f = max(r["median_ns"] for r in lookups) / min(r["median_ns"] for r in lookups)
        res.append(("ckpt_lookup, 1-8 readers: flat (max/min <= 1.5)", "%.2f" % f, f <= 1.5))
    for r in find("ckpt_churn"):
        res.append(("ckpt_churn, 100,000 evicting takes%s: <= 2 us a take" % (
            ", demotion" if r["params"]["demote"] else ""), _us(r["median_ns"]),
            r["median_ns"] <= 2000))
    return res


def targets_markdown(rows):
    out = ["| target | measured | met |", "| --- | --- | --- |"]
    for name, measured, met in targets(rows):
        out.append("| %s | %s | %s |" % (name, measured, "yes" if met else "**no**"))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("jsonl", help="rsp-bench --json output")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots"))
    ap.add_argument("--title", default="", help="appended to each title, e.g. the machine")
    ap.add_argument("--raster", action="store_true", help="use the built-in rasteriser")
    ap.add_argument("--markdown", action="store_true",
                    help="print the result tables and the target check as Markdown, no plots")
    args = ap.parse_args()
    rows = load(args.jsonl)
    if args.markdown:
        print(markdown(rows))
        print("### Targets\n")
        print(targets_markdown(rows))
        return 0
    steps, reads = step_series(rows), read_series(rows)
    sync_steps = step_series(rows, "sync")
    onetrip_steps = step_series(rows, "onetrip")
    os.makedirs(args.out, exist_ok=True)
    trace = plot_trace(rows, args.out, (" (%s)" % args.title) if args.title else "")
    if trace:
        print("plot.py: wrote %s (built-in rasteriser)" % trace)
        if not steps and not reads:
            return 0
    if not steps or not reads:
        print("plot.py: no step or read lines in %s" % args.jsonl, file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    suffix = (" (%s)" % args.title) if args.title else ""
    use_mpl = not args.raster
    if use_mpl:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            use_mpl = False
    (plot_mpl if use_mpl else plot_raster)(steps, reads, args.out, suffix, sync_steps,
                                               onetrip_steps)
    print("plot.py: wrote %s/step.png and %s/read.png (%s)" % (args.out, args.out,
          "matplotlib" if use_mpl else "built-in rasteriser"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
