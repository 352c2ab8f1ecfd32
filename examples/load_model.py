#!/usr/bin/env python3
"""Loads a Tessera model (safetensors) with numpy alone and evaluates it on a test set.

    python3 examples/load_model.py run/demo/model.safetensors          # Fashion-MNIST's test set
    python3 examples/load_model.py model.safetensors --images t10k-images-idx3-ubyte.gz --labels t10k-labels-idx1-ubyte.gz
    python3 examples/load_model.py model.safetensors --csv test.csv --header --label-column 8
    python3 examples/load_model.py model.safetensors --npy features.npy labels.npy

With the `safetensors` and `torch` packages the same file loads with safetensors.torch.load_file;
the tensors are named layers.N.weight / layers.N.bias (shapes as torch.nn.Linear) and, when the model
uses layer normalisation, layers.N.norm.weight / layers.N.norm.bias. A model trained with
input_normalization "standardize" holds the fleet's statistics as input.mean and input.std: inputs are
standardized with them, (x - mean) / std in float32, before the first layer. The spec is in the metadata.
IDX images are scaled to [0, 1] (as the agents' default scale_unit); CSV and .npy values are used as
they are (their normalization none), so pass --scale-unit for data the federation read with scale_unit.
"""
import argparse
import gzip
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {t['dtype']}, expected F32")
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors, meta


def forward(tensors, spec, x):
    layers = len(spec["hidden"]) + 1
    layer_norm = spec["compensation"] in ("layer_norm", "layer_norm_scale")
    h = x.astype(np.float32)
    if "input.mean" in tensors:  # the model's own input standardization, part of it like its weights
        h = (h - tensors["input.mean"]) / tensors["input.std"]
    for i in range(layers):
        h = h @ tensors[f"layers.{i}.weight"].T + tensors[f"layers.{i}.bias"]
        if i + 1 < layers:
            if layer_norm:
                mu = h.mean(axis=1, keepdims=True)
                var = h.var(axis=1, keepdims=True)
                h = (h - mu) / np.sqrt(var + 1e-5) * tensors[f"layers.{i}.norm.weight"] + tensors[f"layers.{i}.norm.bias"]
            h = np.maximum(h, 0)
    return h


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        magic = f.read(4)
        dims = struct.unpack(">" + "I" * magic[3], f.read(4 * magic[3]))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--images", default="/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
    p.add_argument("--labels", default="/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")
    p.add_argument("--csv", help="a CSV test set instead (numeric cells, one label column)")
    p.add_argument("--header", action="store_true", help="CSV: skip the first line")
    p.add_argument("--label-column", type=int, default=0, help="CSV: the column of the label")
    p.add_argument("--npy", nargs=2, metavar=("FEATURES", "LABELS"), help="a .npy test set instead")
    p.add_argument("--scale-unit", action="store_true", help="CSV/.npy: divide the values by 255 first")
    a = p.parse_args()
    tensors, meta = read_safetensors(a.model)
    spec = json.loads(meta["tessera.spec"])
    if a.csv:
        table = np.loadtxt(a.csv, delimiter=",", skiprows=1 if a.header else 0, dtype=np.float32, ndmin=2)
        y = table[:, a.label_column]
        x = np.delete(table, a.label_column, axis=1)
    elif a.npy:
        x = np.load(a.npy[0]).reshape(-1, spec["inputs"]).astype(np.float32)
        y = np.load(a.npy[1])
    else:
        x = read_idx(a.images).reshape(-1, spec["inputs"]).astype(np.float32) / np.float32(255.0)
        y = read_idx(a.labels)
    if a.scale_unit and (a.csv or a.npy):
        x = x / np.float32(255.0)
    out = forward(tensors, spec, x)
    print(f"{a.model}: {len(tensors)} tensors, spec {spec}")
    if spec.get("task", "classification") == "regression":
        mse = float(((out[:, 0].astype(np.float64) - y) ** 2).mean())
        print(f"test mean squared error (numpy): {mse:.6g} on {len(y)} examples")
    else:
        pred = out.argmax(axis=1)
        print(f"test accuracy (numpy): {100.0 * (pred == y).mean():.2f}% on {len(y)} examples")


if __name__ == "__main__":
    sys.exit(main())
