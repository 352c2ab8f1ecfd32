#!/usr/bin/env python3
"""Summarises tessera-sim metrics files: a table, curves as CSV and as SVG plots.

    summarize.py OUT_DIR NAME=metrics.jsonl [NAME=metrics.jsonl ...]

For each run: the best and the final test accuracy, the round it was reached, and the training examples
processed and bytes moved (down + up, all devices) until the best round. Curves: test accuracy against
examples processed and against bytes moved.
"""
import json
import math
import os
import sys


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    examples = 0
    moved = 0
    out = []
    for r in rows:
        examples += r["examples"]
        moved += r["bytes_down"] + r["bytes_up"]
        if r.get("test_accuracy") is not None:
            out.append({"round": r["round"], "examples": examples, "bytes": moved, "accuracy": r["test_accuracy"],
                        "bytes_round_device": (r["bytes_down"] + r["bytes_up"]) / max(1, r["devices"]),
                        "seconds": r["seconds"]})
    return rows, out


def svg_plot(path, title, xlabel, series, xkey, logx=False):
    w, h, ml, mb, mt, mr = 760, 460, 70, 50, 30, 230
    pts = [p for _, s in series for p in s if (p[xkey] > 0 or not logx)]
    if not pts:
        return
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    xs = [fx(p[xkey]) for p in pts]
    x0, x1 = min(xs), max(xs)
    y0 = max(0.5, min(p["accuracy"] for p in pts) - 0.02)
    y1 = min(1.0, max(p["accuracy"] for p in pts) + 0.01)
    if x1 == x0:
        x1 = x0 + 1
    sx = lambda v: ml + (fx(v) - x0) / (x1 - x0) * (w - ml - mr)
    sy = lambda v: h - mb - (v - y0) / (y1 - y0) * (h - mb - mt)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{ml}" y="18" font-size="14">{title}</text>',
           f'<line x1="{ml}" y1="{h-mb}" x2="{w-mr}" y2="{h-mb}" stroke="black"/>',
           f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h-mb}" stroke="black"/>',
           f'<text x="{(ml + w - mr) / 2}" y="{h - 12}" text-anchor="middle">{xlabel}</text>']
    for i in range(6):
        v = y0 + (y1 - y0) * i / 5
        out.append(f'<text x="{ml - 6}" y="{sy(v) + 4}" text-anchor="end">{100 * v:.1f}%</text>')
        out.append(f'<line x1="{ml}" y1="{sy(v)}" x2="{w - mr}" y2="{sy(v)}" stroke="#ddd"/>')
    for i in range(6):
        fv = x0 + (x1 - x0) * i / 5
        v = 10 ** fv if logx else fv
        label = f"{v:.3g}"
        out.append(f'<text x="{ml + (fv - x0) / (x1 - x0) * (w - ml - mr)}" y="{h - mb + 16}" text-anchor="middle">{label}</text>')
    for k, (name, s) in enumerate(series):
        c = colors[k % len(colors)]
        p = " ".join(f"{sx(q[xkey]):.1f},{sy(q['accuracy']):.1f}" for q in s if q[xkey] > 0 or not logx)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{p}"/>')
        out.append(f'<text x="{w - mr + 10}" y="{mt + 16 * k + 10}" fill="{c}">{name}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def main():
    out_dir = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        if os.path.exists(path):
            runs.append((name, *load(path)))
    print(f"| run | best acc | round | examples to best | MB moved to best | final acc | rounds | MB per device-round |")
    print(f"|---|---|---|---|---|---|---|---|")
    for name, rows, evals in runs:
        if not evals:
            continue
        best = max(evals, key=lambda e: e["accuracy"])
        print(f"| {name} | {100 * best['accuracy']:.2f}% | {best['round']} | {best['examples'] / 1e6:.2f} M | "
              f"{best['bytes'] / 1e6:.0f} | {100 * evals[-1]['accuracy']:.2f}% | {rows[-1]['round']} | "
              f"{evals[-1]['bytes_round_device'] / 1e6:.2f} |")
    with open(os.path.join(out_dir, "curves.csv"), "w") as f:
        f.write("run,round,examples,bytes,test_accuracy\n")
        for name, _, evals in runs:
            for e in evals:
                f.write(f"{name},{e['round']},{e['examples']},{e['bytes']},{e['accuracy']}\n")
    series = [(name, evals) for name, _, evals in runs if evals]
    svg_plot(os.path.join(out_dir, "accuracy_vs_examples.svg"), "Fashion-MNIST test accuracy against examples processed",
             "training examples processed (all devices)", series, "examples")
    moved = [(n, s) for n, s in series if any(e["bytes"] > 0 for e in s)]
    svg_plot(os.path.join(out_dir, "accuracy_vs_bytes.svg"), "Fashion-MNIST test accuracy against bytes moved",
             "bytes moved, down + up, all devices (log scale)", moved, "bytes", logx=True)
    print(f"\ncurves: {out_dir}/curves.csv, {out_dir}/accuracy_vs_examples.svg, {out_dir}/accuracy_vs_bytes.svg")


if __name__ == "__main__":
    main()
