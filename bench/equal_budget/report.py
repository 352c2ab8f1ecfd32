"""The equal-memory map's report (map.md and one map-<model>.svg per model family), rebuilt from the runs
alone; map.py calls write() after its runs."""
import json
import math
import os

MIB = 1024.0 * 1024.0
TASK_NAMES = {"fashion": "Fashion-MNIST", "mnist": "MNIST", "letter": "Letter"}


def final(r, split="val"):
    return r["curve"][-1][split]


def best_of(runs):
    """The run a method's setting is chosen by: the best validation accuracy after the last round (ties:
    the smaller lr, then the fewer steps)."""
    return max(runs, key=lambda r: (final(r), -r["lr"], -r["steps"]))


def within(curve, field, limit):
    acc = curve[0]["test"]
    for p in curve:
        if p[field] <= limit * (1 + 1e-12):
            acc = p["test"]
    return acc


def pct(v):
    return f"{100 * v:.2f}%"


def variant_name(r):
    micro = f", micro-batches of {r['micro_batch']} (width {r['trained_width']})" if r.get("micro_batch") else ""
    if r["method"] == "fedavg":
        return "FedAvg" + micro
    if r["method"] == "central":
        return "central"
    if r["method"] == "slt":
        wide = r.get("widen") or r["groups"]
        slt = r["ist"].get("slt", {})
        held = f", frozen layers in {slt['frozen_codec']}" if slt.get("frozen_codec", "f32") != "f32" else ""
        return f"SLT, {wide}× as wide, head {slt.get('head_fraction', 0.25)}{held}{micro}"
    how = "rolling cut" if r["ist"].get("cut") == "rolling" else f"cut kept {r['ist'].get('repartition_every', 1)} rounds"
    return f"IST, {r['groups']} groups, {how}{micro}"


class Map:
    def __init__(self, store, variants, grid, fine=None):
        self.store, self.variants, self.grid, self.fine = store, variants, grid, fine

    def scored_every_round(self, r):
        """r's curve scored after every round (fine.jsonl), or None if that rerun has not run."""
        f = self.fine.runs.get(grid_key(r)) if self.fine else None
        return f["curve"] if f else None

    def runs(self, specs):
        keys = (grid_key(s) for s in specs)
        return [self.store.runs[k] for k in keys if k in self.store.runs]

    def winner(self, cell, v, unconstrained=False):
        """The variant's best run by validation accuracy, with its seeds 2 and 3 when they ran; None if the grid is not complete."""
        specs = [dict(s, unconstrained=unconstrained) for s in self.grid(cell, v)]
        runs = self.runs(specs)
        if len(runs) < len(specs):
            return None
        runs = [r for r in runs if not r.get("infeasible")]  # SLT stages the budget cannot hold
        if not runs:
            return INFEASIBLE
        best = best_of(runs)
        seeds = [best] + self.runs([dict({k: field(best, k) for k in GRID_KEYS}, seed=s) for s in (2, 3)])
        return seeds

    def central(self, task, model, width):
        cell = (task, model, width, 1, "iid")
        runs = self.runs(self.grid(cell, {"method": "central", "groups": 1, "ist": {}}))
        return best_of(runs) if runs else None


# A method's grid ran and no setting could run within the budget (an SLT stage B(W) cannot hold).
INFEASIBLE = ["infeasible"]

GRID_KEYS = ("task", "model", "width", "devices", "split", "method", "groups", "ist", "lr", "steps", "rounds", "seed", "unconstrained",
             "micro_batch", "widen")


def grid_key(r):
    return json.dumps({k: field(r, k) for k in GRID_KEYS}, sort_keys=True)


def field(r, k):
    return r.get(k, 0 if k == "micro_batch" else False)


def mean_test(seeds, field=None, limit=None, curve=None):
    vals = [final(r, "test") if field is None else within(curve(r), field, limit) for r in seeds]
    return sum(vals) / len(vals)


def cell_row(m, cell, central_top):
    task, model, width, devices, split = cell
    wins = [(v, m.winner(cell, v)) for v in m.variants(model)]
    # A cell is shown once FedAvg and a memory-bounded method have run their whole grids; variants not
    # run yet (the map grows across sittings) are named beside it.
    def name(v):
        return variant_name(dict(v, micro_batch=v.get("micro", 0), trained_width="W′", widen=v.get("widen", 0)))
    missing = [name(v) for v, w in wins if not w]
    unheld = [name(v) for v, w in wins if w is INFEASIBLE]
    wins = [(v, w) for v, w in wins if w and w is not INFEASIBLE]  # a method the budget cannot run drops out
    fed = next((w for v, w in wins if v["method"] == "fedavg" and not v.get("micro")), None)
    others = [w for v, w in wins if v["method"] != "fedavg" or v.get("micro")]
    if not fed or not others:
        return None
    best = max(others, key=lambda w: final(w[0]))  # chosen on validation, seed 1, like every setting
    c = m.central(task, model, width)
    bound = c is not None and central_top is not None and final(central_top, "test") - final(c, "test") >= 0.02
    n = min(len(fed), len(best))
    fa, ot = fed[:n], best[:n]
    eq_bytes = min(fa[0]["curve"][-1]["bytes"], ot[0]["curve"][-1]["bytes"])
    # Equal bytes and time from the curves scored after every round where both winners have them; the
    # modelled seconds include measured compute, so the rerun's total is not the first run's to the digit.
    fine = all(m.scored_every_round(r) for r in fa + ot)
    curve = m.scored_every_round if fine else (lambda r: r["curve"])
    eq_time = min(curve(r)[-1]["seconds"] for r in (fa[0], ot[0]))
    return {
        "cell": cell, "budget": fa[0]["budget_bytes"], "bound": bound, "central": c, "fed": fa, "best": ot, "seeds": n,
        "after": (mean_test(fa), mean_test(ot)),
        "bytes": (mean_test(fa, "bytes", eq_bytes, curve), mean_test(ot, "bytes", eq_bytes, curve), eq_bytes),
        "time": (mean_test(fa, "seconds", eq_time, curve), mean_test(ot, "seconds", eq_time, curve), eq_time),
        "all": [(v, w) for v, w in wins], "missing": missing, "every_round": fine, "unheld": unheld,
    }


def delta(pair):
    d = 100 * (pair[1] - pair[0])
    return f"{d:+.2f}"


def unconstrained_section(m, tasks, width, shipped):
    md = [f"## Where every device holds the whole model (MLP of width {width}, 8 devices, IID)", "",
          "IST with the shipped settings (2 groups, the cut kept 20 rounds, the last tenth of the rounds whole-model, the rate "
          "ending at 0.2 of lr) and with 2 rolling groups, against FedAvg on the same model; each at its best setting of the grid "
          "by validation accuracy; test accuracy after equal rounds.", "",
          "| task | FedAvg | IST, shipped settings | Δ | IST, 2 rolling groups | Δ |", "|---|---|---|---|---|---|"]
    for task in tasks:
        cell = (task, "mlp", width, 8, "iid")
        wins = [m.winner(cell, v, unconstrained=True) for v in shipped]
        if not all(wins):
            continue
        f, i, r = (w[0] for w in wins)
        md.append(f"| {TASK_NAMES.get(task, task)} | {pct(final(f, 'test'))} ({f['lr']}, {f['epochs']} ep) | "
                  f"{pct(final(i, 'test'))} ({i['lr']}, {i['epochs']} ep) | {100 * (final(i, 'test') - final(f, 'test')):+.2f} | "
                  f"{pct(final(r, 'test'))} ({r['lr']}, {r['epochs']} ep) | {100 * (final(r, 'test') - final(f, 'test')):+.2f} |")
    return md + [""]


def write(store, out, tasks, models, widths, fleets, splits, central_widths, variants, grid, unconstrained_width=0, shipped=(), fine=None):
    m = Map(store, variants, grid, fine)
    md = ["# The equal-memory map", "",
          "Generated by bench/equal_budget/map.py from runs.jsonl. Accuracy is on each task's test set; every setting is chosen on "
          "the validation split. Δ = best memory-bounded strategy minus FedAvg, in points. Times are **modelled** (1 Mbit/s, "
          "100 ms per device), not measured. Equal bytes and time take each winner at its last evaluation within the smaller "
          "of the two totals, from the winners' reruns scored after every round (fine.jsonl); a cell marked ‡ has not had them "
          "yet and is scored every few rounds, which puts the method with the larger total up to that many rounds short.", ""]
    rows_by_model = {}
    for task in tasks:
        for model in models:
            if model == "cnn" and task == "letter":
                continue
            refs = [(w, m.central(task, model, w)) for w in central_widths[model]]
            refs = [(w, r) for w, r in refs if r]
            top = max((r for _, r in refs), key=lambda r: final(r, "test"), default=None)
            md += [f"## {TASK_NAMES.get(task, task)}, {model.upper()}", ""]
            if refs:
                md += ["Central training (one device, all the data, no budget), test accuracy at its best setting:", "",
                       "| width | " + " | ".join(str(w) for w, _ in refs) + " |", "|---|" + "---|" * len(refs),
                       "| accuracy | " + " | ".join(pct(final(r, "test")) for _, r in refs) + " |", ""]
            not_run = set()
            md += ["| W (budget) | capacity-bound | fleet | split | FedAvg (lr, local epochs) | best memory-bounded (global model; lr, local epochs) | "
                   "Δ equal rounds | Δ equal bytes | Δ equal modelled time | seeds |", "|---|---|---|---|---|---|---|---|---|---|"]
            for width in widths:
                for devices in fleets:
                    for split in splits:
                        row = cell_row(m, (task, model, width, devices, split), top)
                        if not row:
                            continue
                        rows_by_model.setdefault(model, []).append(row)
                        f0, b0 = row["fed"][0], row["best"][0]
                        if row["missing"]:
                            not_run.update(row["missing"])
                        coarse = "" if row["every_round"] else "‡"
                        md.append(f"| {width}{'†' if row['missing'] else ''} ({row['budget'] / MIB:.3f} MiB) | {'yes' if row['bound'] else 'no'} | {devices} | {split} | "
                                  f"{pct(row['after'][0])} ({f0['lr']}, {f0['epochs']}) | {variant_name(b0)}: {pct(row['after'][1])} "
                                  f"({b0['global']}; {b0['lr']}, {b0['epochs']}) | {delta(row['after'])} | "
                                  f"{delta(row['bytes'])}{coarse} ({row['bytes'][2] / 1e6:.0f} MB) | {delta(row['time'])}{coarse} "
                                  f"({row['time'][2] / 60:.1f} min) | {row['seeds']} |")
            if not_run:
                md += ["", "† Not run yet in this cell: " + "; ".join(sorted(not_run)) + "."]
            md.append("")
    if unconstrained_width:
        md += unconstrained_section(m, tasks, unconstrained_width, shipped)
    md += ["## Every variant's best run per cell (test accuracy after equal rounds, seed 1)", ""]
    for model, rows in rows_by_model.items():
        for row in rows:
            cell = row["cell"]
            md.append(f"- {TASK_NAMES.get(cell[0], cell[0])} {model} W={cell[2]} N={cell[3]} {cell[4]}: " +
                      "; ".join(f"{variant_name(w[0])} {pct(final(w[0], 'test'))} (val {pct(final(w[0]))})" for _, w in row["all"]) +
                      "".join(f"; {name}: no setting fits B(W)" for name in row["unheld"]))
    with open(os.path.join(out, "map.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    for model, rows in rows_by_model.items():
        plot(os.path.join(out, f"map-{model}.svg"), model, rows, m)


def plot(path, model, rows, m):
    """One panel per (task, split): test accuracy against W (log scale), FedAvg solid, the best
    memory-bounded strategy dashed, one colour per fleet, central training in grey."""
    panels = sorted({(r["cell"][0], r["cell"][4]) for r in rows})
    colours = {8: "#1f77b4", 32: "#2ca02c", 128: "#d62728"}
    pw, ph, ml, mt, mb = 360, 300, 56, 46, 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{pw * len(panels)}" height="{ph + 40}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="16" font-size="13">{model.upper()} at equal device memory: test accuracy by FedAvg\'s width W (budget B(W))</text>',
           '<text x="10" y="32" font-size="11">solid: FedAvg; dashed: the best memory-bounded method; grey: central; colour: devices</text>']
    for i, (task, split) in enumerate(panels):
        rs = [r for r in rows if r["cell"][0] == task and r["cell"][4] == split]
        ws = sorted({r["cell"][2] for r in rs})
        ys = [v for r in rs for v in r["after"]] + [final(r["central"], "test") for r in rs if r["central"]]
        lo, hi = math.floor(min(ys) * 50) / 50, math.ceil(max(ys) * 50) / 50 + 1e-9
        x0, x1, y0, y1 = pw * i + ml, pw * (i + 1) - 16, mt, ph - mb

        def sx(w):
            return x0 + (math.log2(w) - math.log2(ws[0])) / max(1e-9, math.log2(ws[-1]) - math.log2(ws[0])) * (x1 - x0)

        def sy(v):
            return y1 - (v - lo) / (hi - lo) * (y1 - y0)
        svg.append(f'<text x="{x0}" y="{mt - 8}">{TASK_NAMES.get(task, task)}, {split}</text>')
        svg.append(f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="black"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>')
        for k in range(6):
            v = lo + (hi - lo) * k / 5
            svg.append(f'<text x="{x0 - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{100 * v:.1f}</text>')
        for w in ws:
            svg.append(f'<text x="{sx(w):.1f}" y="{y1 + 14}" text-anchor="middle">{w}</text>')
        cen = sorted({(r["cell"][2], final(r["central"], "test")) for r in rs if r["central"]})
        if cen:
            svg.append('<polyline fill="none" stroke="#999" stroke-width="1.5" points="' +
                       " ".join(f"{sx(w):.1f},{sy(v):.1f}" for w, v in cen) + '"/>')
        for devices in sorted({r["cell"][3] for r in rs}):
            line = sorted((r["cell"][2], r["after"]) for r in rs if r["cell"][3] == devices)
            for j, dash in ((0, ""), (1, ' stroke-dasharray="5,3"')):
                svg.append(f'<polyline fill="none" stroke="{colours.get(devices, "#000")}" stroke-width="1.8"{dash} points="' +
                           " ".join(f"{sx(w):.1f},{sy(a[j]):.1f}" for w, a in line) + '"/>')
            svg.append(f'<text x="{x1 - 40}" y="{y1 - 10 - 12 * list(colours).index(devices) if devices in colours else 0}" '
                       f'fill="{colours.get(devices, "#000")}">N = {devices}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
