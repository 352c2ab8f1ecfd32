#!/usr/bin/env python3
"""The equal-memory map: FedAvg on the widest model every device holds against the strategies that train
a bigger model in the same device memory, over tasks, budgets, fleets and data splits.

Every cell (task, model family, FedAvg's width W, which sets every device's budget B(W), fleet size,
split) runs each method at every point of one shared grid (learning rate x local steps, the same
rounds), seed 1; each method's setting is chosen on the validation split (accuracy after the last
round) and reported on the test set. Where the two winners are within a point of each other, both
run seeds 2 and 3 as well and the cell reports the means. `central` (one device with all the data,
no budget) at every width says where capacity binds: a width is capacity-bound on a task when its
central accuracy is at least 2 points below the widest width's.

Runs are kept in results/map/runs.jsonl (one line each, keyed by every setting): a run already there
is not run again, so the map grows across invocations and the report is rebuilt from the file alone.

Equal bytes and equal modelled time compare each winner at its last evaluation within the smaller of
the two totals. Evaluated every 10 rounds, the method whose total sets that point is scored at its
end and the other up to 10 rounds short of it, a bias against whichever moves more bytes. So the two
winners of every cell (with their seeds) run again scored after every round, into fine.jsonl; the
rerun must end at the same accuracy to the last digit (scoring does not touch training), and the
report takes equal bytes and time from these curves.

  bench/equal_budget/map.py [--tasks letter,fashion,mnist] [--models mlp] [--widths 16,32,64,128]
                            [--fleets 8,32,128] [--splits iid,dir0.3] [--methods fedavg,ist,micro,slt]
                            [--jobs 2] [--report-only] [--results DIR]
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402  (beside this file)
from report import best_of, final  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
CELL = os.path.join(ROOT, "build", "release", "bench", "bench_equal_budget_cell")

LRS = [0.03, 0.1]
EPOCHS = [1, 3]  # local work per round: passes over the device's own shard (local steps = epochs x shard / batch)
ROUNDS = 60
EVAL_EVERY = 10
BATCH = 32
CENTRAL_WIDTHS = [8, 16, 32, 64, 128, 256, 512]
# Each model family's protocol, the same for every method of its cells. The CNN (conv2d(W) pool
# conv2d(2W) pool dense(4W)) costs ten to a hundred times the MLP per example at the same W, so its map
# is smaller: 20 rounds of half a local epoch, one epoch setting, W 4 and 8, central widths up to 32,
# and a subset of the variants (cnn_variants).
PROTOCOL = {"mlp": {"rounds": ROUNDS, "epochs": EPOCHS, "central_widths": CENTRAL_WIDTHS, "eval_every": EVAL_EVERY},
            "cnn": {"rounds": 20, "epochs": [0.5], "central_widths": [4, 8, 16, 32], "eval_every": 5}}
TRAIN_EXAMPLES = {"fashion": 60000, "mnist": 60000, "letter": 16000}
VALIDATION_FRACTION = 0.1  # bench_equal_budget_cell's
# IST's variants: the global model's width is groups x W; the cut rolls (FedRolex's windows), or is a
# random one kept for 20 rounds in 2 groups (the shipped IST settings, less their whole-model rounds,
# which no device here could run).
IST_VARIANTS = [{"groups": g, "ist": {"cut": "rolling"}} for g in (2, 4, 8)] + [{"groups": 2, "ist": {"repartition_every": 20}}]
# Steps in micro-batches (run_config.micro_batch): the same steps with a micro-batch's activations in
# memory, so B(W) holds a wider model (FedAvg) or wider subnets (IST).
MICRO = 4
# Where every device holds the whole model (--unconstrained-width W, 8 devices, IID): FedAvg against IST
# with the shipped settings (examples/sim-fashion-ist.json: 2 groups, the cut kept 20 rounds, the last
# tenth of the rounds whole-model, the rate ending at 0.2 of lr) and with 2 rolling groups.
SHIPPED = [{"method": "fedavg", "groups": 1, "ist": {}},
           {"method": "ist", "groups": 2, "ist": {"repartition_every": 20, "whole_model_rounds": ROUNDS // 10, "lr_final_fraction": 0.2}},
           {"method": "ist", "groups": 2, "ist": {"cut": "rolling"}}]
# Successive layer training (strategy slt), in micro-batches like the two above: a global model 1.5 times
# as wide as FedAvg's micro-batched one (its frozen first layer, held in f32 for the forward pass, then
# takes 3/4 of what FedAvg's trained one does; twice as wide no budget of the map holds), the stage's
# layer cut into groups where B(W) cannot hold it, the head a quarter of each layer above the stage
# (slt.head_fraction), the rounds split evenly between the stages.
# With the frozen layers held in q8 (slt.frozen_codec) they take about a quarter of their f32 bytes:
# a global model 3 or 4 times as wide fits B(W).
SLT_VARIANTS = [{"groups": 1, "widen": 1.5, "ist": {"slt": {"head_fraction": 0.25}, "cut": "rolling"}}] + \
    [{"groups": 1, "widen": w, "ist": {"slt": {"head_fraction": 0.25, "frozen_codec": "q8"}, "cut": "rolling"}} for w in (3.0, 4.0)]
TIE = 0.01  # winners closer than this (test accuracy) get seeds 2 and 3


def key(run):
    return json.dumps({k: run.get(k, 0 if k == "micro_batch" else False) for k in key_fields()}, sort_keys=True)


class Store:
    def __init__(self, path):
        self.path, self.lock, self.runs = path, threading.Lock(), {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        r = json.loads(line)
                        self.runs[key(r)] = r

    def add(self, run):
        with self.lock:
            self.runs[key(run)] = run
            with open(self.path, "a") as f:
                f.write(json.dumps(run, separators=(",", ":")) + "\n")


def local_steps(task, devices, epochs):
    held = round(VALIDATION_FRACTION * TRAIN_EXAMPLES[task])
    return max(1, round(epochs * (TRAIN_EXAMPLES[task] - held) / devices / BATCH))


def spec(task, model, width, devices, split, method, groups=1, ist=None, lr=0.05, epochs=1, seed=1, micro=0, widen=0):
    s = {"task": task, "model": model, "width": width, "devices": devices, "split": split, "method": method, "groups": groups,
         "ist": ist or {}, "lr": lr, "steps": local_steps(task, devices, epochs), "rounds": PROTOCOL[model]["rounds"], "seed": seed,
         "unconstrained": False, "micro_batch": micro}
    if widen:
        s["widen"] = widen
    return s


def run_cell(store, s, log, every=None):
    if key(s) in store.runs:
        return store.runs[key(s)]
    every = every or PROTOCOL[s["model"]]["eval_every"]
    out = os.path.join(store.tmp, f"run-{threading.get_ident()}.json")
    cmd = [CELL, "--task", s["task"], "--model", s["model"], "--width", str(s["width"]), "--devices", str(s["devices"]),
           "--split", s["split"], "--method", s["method"], "--groups", str(s["groups"]), "--lr", str(s["lr"]),
           "--steps", str(s["steps"]), "--rounds", str(s["rounds"]), "--eval-every", str(every), "--seed", str(s["seed"]),
           "--ist", json.dumps(s["ist"]), "--datasets", os.path.join(ROOT, "build", "datasets"), "--out", out] + \
        (["--unconstrained"] if s["unconstrained"] else []) + (["--micro-batch", str(s["micro_batch"])] if s["micro_batch"] else []) + \
        (["--widen", str(s["widen"])] if s.get("widen") else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1", EIGEN_NUM_THREADS="1"))
    if p.returncode != 0:
        raise SystemExit(f"map: {' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    with open(out) as f:
        r = json.load(f)
    os.remove(out)
    r["epochs"] = s.get("epochs")
    store.add(r)
    if r.get("infeasible"):
        log(f"{label(r)}: infeasible ({r['infeasible']})")
        return r
    last = r["curve"][-1]
    log(f"{label(r)}: val {100 * last['val']:.2f}% test {100 * last['test']:.2f}% ({r['wall_s']:.0f} s)")
    return r


def run_fine(store, fine, r, log):
    """Run r again scored after every round, into the fine store; its end must be r's to the last digit."""
    f = run_cell(fine, dict(json.loads(key(r)), epochs=r["epochs"]), log, every=1)
    if (final(f, "val"), final(f, "test")) != (final(r, "val"), final(r, "test")):
        raise SystemExit(f"map: {label(r)} ended at val {final(r, 'val')} test {final(r, 'test')}, scored every round at "
                         f"val {final(f, 'val')} test {final(f, 'test')}: scoring changed the run")
    return f


def label(r):
    m = r["method"] if r["method"] not in ("ist", "slt") else f"{r['method']}/{r['groups']} {json.dumps(r['ist'], separators=(',', ':'))}"
    if r.get("micro_batch"):
        m += f" micro {r['micro_batch']} (width {r.get('trained_width')})"
    return (f"{r['task']} {r['model']} W={r['width']} N={r['devices']} {r['split']} {m} lr {r['lr']} steps {r['steps']}"
            f" seed {r['seed']}")


def cnn_variants(methods):
    """The CNN's: FedAvg, IST in 2 rolling groups, both in micro-batches, SLT 1.5 times as wide with its frozen layers
    in f32 and 3 times as wide in q8. A convolution's activations, not its weights, are most of what a stage holds,
    so q8 buys the CNN little: 3 times as wide no budget of its map holds (the runs say so), 1.5 times does."""
    keep = [v for v in variants(methods) if v["method"] == "fedavg" or (v["method"] == "ist" and v["groups"] == 2 and v["ist"].get("cut") == "rolling")
            or (v["method"] == "slt" and v.get("widen") in (1.5, 3.0))]
    return keep


def variants(methods):
    out = []
    if "fedavg" in methods:
        out.append({"method": "fedavg", "groups": 1, "ist": {}})
    if "ist" in methods:
        out += [{"method": "ist", **v} for v in IST_VARIANTS]
    if "micro" in methods:
        out.append({"method": "fedavg", "groups": 1, "ist": {}, "micro": MICRO})
        out.append({"method": "ist", "groups": 2, "ist": {"cut": "rolling"}, "micro": MICRO})
    if "slt" in methods:
        out += [{"method": "slt", **v, "micro": MICRO} for v in SLT_VARIANTS]
    return out


def grid(cell, v, seed=1):
    return [dict(spec(*cell, v["method"], v["groups"], v["ist"], lr, e, seed, v.get("micro", 0), v.get("widen", 0)), epochs=e)
            for lr in LRS for e in PROTOCOL[cell[1]]["epochs"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="letter,fashion,mnist")
    ap.add_argument("--models", default="mlp")
    ap.add_argument("--widths", default="16,32,64,128")
    ap.add_argument("--fleets", default="8,32,128")
    ap.add_argument("--splits", default="iid,dir0.3")
    ap.add_argument("--methods", default="fedavg,ist,micro,slt")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--unconstrained-width", type=int, default=256, help="the model of the comparison without a memory limit (0: none)")
    ap.add_argument("--results", default=os.path.join(HERE, "results", "map"))
    a = ap.parse_args()
    os.makedirs(a.results, exist_ok=True)
    store = Store(os.path.join(a.results, "runs.jsonl"))
    store.tmp = a.results
    fine = Store(os.path.join(a.results, "fine.jsonl"))
    fine.tmp = a.results
    lock = threading.Lock()

    def log(text):
        with lock:
            print(text, flush=True)

    tasks, models, splits = a.tasks.split(","), a.models.split(","), a.splits.split(",")
    methods = a.methods.split(",")

    def variants_of(model):
        return cnn_variants(methods) if model == "cnn" else variants(methods)
    widths, fleets = [int(w) for w in a.widths.split(",")], [int(n) for n in a.fleets.split(",")]
    cells = [c for c in itertools.product(tasks, models, widths, fleets, splits) if not (c[1] == "cnn" and c[0] == "letter")]
    if not a.report_only:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            # The capacity reference first: central training at every width of every task and model.
            refs = [s for t, m in itertools.product(tasks, models) if not (m == "cnn" and t == "letter") for w in PROTOCOL[m]["central_widths"]
                    for s in grid((t, m, w, 1, "iid"), {"method": "central", "groups": 1, "ist": {}})]
            list(pool.map(lambda s: run_cell(store, s, log), refs))
            if a.unconstrained_width:
                free = [dict(s, unconstrained=True) for t in tasks for v in SHIPPED
                        for s in grid((t, "mlp", a.unconstrained_width, 8, "iid"), v)]
                list(pool.map(lambda s: run_cell(store, s, log), free))
            for cell in cells:
                vs = variants_of(cell[1])
                list(pool.map(lambda s: run_cell(store, s, log), [s for v in vs for s in grid(cell, v)]))
                feasible = [[r for r in (store.runs[key(s)] for s in grid(cell, v)) if not r.get("infeasible")] for v in vs]
                winners = [best_of(runs) for runs in feasible if runs]
                fed = [w for w in winners if w["method"] == "fedavg" and not w.get("micro_batch")]
                other = [w for w in winners if w["method"] != "fedavg" or w.get("micro_batch")]
                if fed and other:
                    top = max(other, key=final)
                    if abs(final(top, "test") - final(fed[0], "test")) < TIE:
                        again = [dict(json.loads(key(w)), seed=sd, epochs=w["epochs"]) for w in (fed[0], top) for sd in (2, 3)]
                        list(pool.map(lambda s: run_cell(store, s, log), again))
                if fed and other:
                    row = report.cell_row(report.Map(store, variants_of, grid), cell, None)
                    if row:
                        list(pool.map(lambda r: run_fine(store, fine, r, log), row["fed"] + row["best"]))
    report.write(store, a.results, tasks, models, widths, fleets, splits, {m: PROTOCOL[m]["central_widths"] for m in models}, variants_of, grid,
                 a.unconstrained_width, SHIPPED, fine)


def key_fields():
    return ("task", "model", "width", "devices", "split", "method", "groups", "ist", "lr", "steps", "rounds", "seed", "unconstrained",
            "micro_batch", "widen")


if __name__ == "__main__":
    main()
