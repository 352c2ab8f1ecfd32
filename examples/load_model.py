#!/usr/bin/env python3
"""Loads a Tessera model (safetensors) with numpy alone and evaluates it on Fashion-MNIST.

    python3 examples/load_model.py run/demo/model.safetensors
    python3 examples/load_model.py model.safetensors --images t10k-images-idx3-ubyte.gz --labels t10k-labels-idx1-ubyte.gz

With the `safetensors` and `torch` packages the same file loads with safetensors.torch.load_file;
the tensors are named layers.N.weight / layers.N.bias (shapes as torch.nn.Linear) and, when the model
uses layer normalisation, layers.N.norm.weight / layers.N.norm.bias. The spec is in the metadata.
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
    h = x
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
    a = p.parse_args()
    tensors, meta = read_safetensors(a.model)
    spec = json.loads(meta["tessera.spec"])
    x = read_idx(a.images).reshape(-1, spec["inputs"]).astype(np.float32) / 255.0
    y = read_idx(a.labels)
    pred = forward(tensors, spec, x).argmax(axis=1)
    print(f"{a.model}: {len(tensors)} tensors, spec {spec}")
    print(f"test accuracy (numpy): {100.0 * (pred == y).mean():.2f}% on {len(y)} examples")


if __name__ == "__main__":
    sys.exit(main())
