#!/usr/bin/env python3
"""Loads a Tessera model (safetensors) with numpy alone and evaluates it on a test set.

    python3 examples/load_model.py run/demo/model.safetensors          # Fashion-MNIST's test set
    python3 examples/load_model.py model.safetensors --images t10k-images-idx3-ubyte.gz --labels t10k-labels-idx1-ubyte.gz
    python3 examples/load_model.py model.safetensors --csv test.csv --header --label-column 8
    python3 examples/load_model.py model.safetensors --npy features.npy labels.npy

With the `safetensors` and `torch` packages the same file loads with safetensors.torch.load_file;
the tensors are named layers.N.weight / layers.N.bias (shapes as torch.nn.Linear, torch.nn.Conv1d and
torch.nn.Conv2d, N counting the dense and convolutional layers) and, when the model uses layer
normalisation, layers.N.norm.weight / layers.N.norm.bias (per channel: GroupNorm with one group). A model trained with
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


def norm_relu(tensors, i, h, layer_norm):
    """A hidden layer's LayerNorm (each example over its channels and positions, a gain and a shift per
    channel: GroupNorm with one group) and ReLU; h is (N, channels, positions...)."""
    if layer_norm:
        axes = tuple(range(1, h.ndim))
        mu = h.mean(axis=axes, keepdims=True)
        var = h.var(axis=axes, keepdims=True)
        per_channel = (1, -1) + (1,) * (h.ndim - 2)
        h = (h - mu) / np.sqrt(var + 1e-5) * tensors[f"layers.{i}.norm.weight"].reshape(per_channel) \
            + tensors[f"layers.{i}.norm.bias"].reshape(per_channel)
    return np.maximum(h, 0)


def conv(h, w, b, stride, padding):
    """A convolution as torch.nn.Conv1d/Conv2d: h (N, C, L) or (N, C, H, W), w OIW or OIHW; "same" pads
    (k - 1) / 2 zeros on each side."""
    window = np.lib.stride_tricks.sliding_window_view
    k = w.shape[2:]
    pad = [(kk - 1) // 2 if padding == "same" else 0 for kk in k]
    h = np.pad(h, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    if w.ndim == 4:
        win = window(h, k, axis=(2, 3))[:, :, ::stride, ::stride]  # (N, C, OH, OW, KH, KW)
        return np.einsum("ncyxij,ocij->noyx", win, w, optimize=True) + b[None, :, None, None]
    win = window(h, k[0], axis=2)[:, :, ::stride]  # (N, C, OL, K)
    return np.einsum("nclk,ock->nol", win, w, optimize=True) + b[None, :, None]


def max_pool(h, size):
    if h.ndim == 4:
        n, c, height, width = h.shape
        h = h[:, :, : height // size * size, : width // size * size]
        return h.reshape(n, c, height // size, size, width // size, size).max(axis=(3, 5))
    n, c, length = h.shape
    return h[:, :, : length // size * size].reshape(n, c, length // size, size).max(axis=3)


def forward_layers(tensors, spec, h):
    """A convolutional network: spec["layers"] on examples shaped as spec["input_shape"] ([n], [steps,
    features] or [channels, height, width]), in PyTorch's layout (a sequence becomes (N, features, steps))."""
    layer_norm = spec["compensation"] in ("layer_norm", "layer_norm_scale")
    shape = spec["input_shape"]
    n = h.shape[0]
    if len(shape) == 2:
        h = h.reshape(n, shape[0], shape[1]).transpose(0, 2, 1)
    elif len(shape) == 3:
        h = h.reshape(n, *shape)
    i = 0
    for layer in spec["layers"]:
        ((kind, arg),) = layer.items()
        if kind in ("conv1d", "conv2d"):
            h = conv(h, tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"], arg.get("stride", 1), arg.get("padding", "same"))
        elif kind == "dense":  # on one position (the only input a dense layer takes) its channels in order
            h = h.reshape(n, -1) @ tensors[f"layers.{i}.weight"].T + tensors[f"layers.{i}.bias"]
        elif kind == "max_pool":
            h = max_pool(h, arg)
        elif kind == "global_avg_pool":
            h = h.mean(axis=tuple(range(2, h.ndim)))
        elif kind == "flatten":
            h = h.reshape(n, -1)
        if kind in ("conv1d", "conv2d", "dense"):
            h = norm_relu(tensors, i, h, layer_norm)
            i += 1
    return h.reshape(n, -1) @ tensors[f"layers.{i}.weight"].T + tensors[f"layers.{i}.bias"]


def forward(tensors, spec, x):
    h = x.astype(np.float32)
    if "input.mean" in tensors:  # the model's own input standardization, part of it like its weights
        h = (h - tensors["input.mean"]) / tensors["input.std"]
    if spec.get("layers"):
        return forward_layers(tensors, spec, h)
    layers = len(spec["hidden"]) + 1
    layer_norm = spec["compensation"] in ("layer_norm", "layer_norm_scale")
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
