"""The layers against PyTorch: a batch's logits, mean loss and every parameter's gradient as Tessera
computed them (layers_dump, in float32) against torch.nn.functional's in float64 from the same weights
and inputs (conv1d/conv2d, max_pool1d/2d, group_norm with one group — Tessera's LayerNorm — ReLU,
linear, cross_entropy), with autograd's gradients.

    torch_reference.py CASE_DIR...      (each written by layers_dump)

Each tensor's largest difference is measured relative to the tensor's largest magnitude; all must be
within TOLERANCE. Prints one line per case with its worst difference. Exit 1 on any miss."""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from load_model import read_safetensors  # noqa: E402  (the example's reader: the file format is one)

TOLERANCE = 1e-5  # float32 against float64, relative to the tensor's scale (measured: at most 1.1e-6)


def hidden_layer(params, i, h, layer_norm):
    if layer_norm:  # each example over its channels and positions, a gain and a shift per channel
        h = F.group_norm(h, 1, params[f"layers.{i}.norm.weight"], params[f"layers.{i}.norm.bias"], eps=1e-5)
    return F.relu(h)


def shaped(x, shape):
    """Examples as PyTorch holds them: an image (N, C, H, W), a sequence [steps, features] (N, features, steps)."""
    if len(shape) == 3:
        return x.reshape(x.shape[0], *shape)
    if len(shape) == 2:
        return x.reshape(x.shape[0], shape[0], shape[1]).transpose(1, 2)
    return x


def forward(params, spec, x):
    layer_norm = spec["compensation"] in ("layer_norm", "layer_norm_scale")
    n = x.shape[0]
    if not spec.get("layers"):  # the `hidden` shorthand: dense layers on a flat input
        h = x
        for i in range(len(spec["hidden"])):
            h = hidden_layer(params, i, F.linear(h, params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]), layer_norm)
        i = len(spec["hidden"])
        return F.linear(h, params[f"layers.{i}.weight"], params[f"layers.{i}.bias"])
    h = shaped(x, spec["input_shape"])
    i = 0
    for layer in spec["layers"]:
        kind, arg = next(iter(layer.items()))
        if kind in ("conv1d", "conv2d"):
            w, b = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
            pad = (w.shape[-1] - 1) // 2 if arg.get("padding", "same") == "same" else 0
            conv = F.conv2d if kind == "conv2d" else F.conv1d
            h = conv(h, w, b, stride=arg.get("stride", 1), padding=pad)
        elif kind == "dense":
            h = F.linear(h.reshape(n, -1), params[f"layers.{i}.weight"], params[f"layers.{i}.bias"])
        elif kind == "max_pool":
            h = F.max_pool2d(h, arg) if h.dim() == 4 else F.max_pool1d(h, arg)
        elif kind == "global_avg_pool":
            h = h.mean(dim=tuple(range(2, h.dim())))
        elif kind == "flatten":
            h = h.reshape(n, -1)
        else:
            raise ValueError(f"unknown layer kind {kind}")
        if kind in ("conv1d", "conv2d", "dense"):
            h = hidden_layer(params, i, h, layer_norm)
            i += 1
    return F.linear(h.reshape(n, -1), params[f"layers.{i}.weight"], params[f"layers.{i}.bias"])


def difference(ours, reference):
    ours = np.asarray(ours, dtype=np.float64)
    reference = reference.detach().numpy()
    if ours.shape != reference.shape:
        raise ValueError(f"shape {ours.shape} against PyTorch's {reference.shape}")
    scale = max(float(np.abs(reference).max()), 1e-12)
    return float(np.abs(ours - reference).max()) / scale


def check(case):
    weights, meta = read_safetensors(f"{case}/params.safetensors")
    grads, _ = read_safetensors(f"{case}/grads.safetensors")
    batch, _ = read_safetensors(f"{case}/batch.safetensors")
    spec = json.loads(meta["tessera.spec"])
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    x = torch.tensor(batch["x"], dtype=torch.float64)
    y = torch.tensor(batch["y"], dtype=torch.int64)
    logits = forward(params, spec, x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    results = {"logits": difference(batch["logits"], logits), "loss": difference(batch["loss"], loss.reshape(1))}
    for name, p in params.items():
        results[f"d {name}"] = difference(grads[name], p.grad)
    worst = max(results, key=results.get)
    ok = results[worst] <= TOLERANCE
    print(f"{'ok  ' if ok else 'MISS'} {case.rsplit('/', 1)[-1]}: {len(params)} tensors, worst {worst} {results[worst]:.2e} "
          f"(logits {results['logits']:.2e}, loss {results['loss']:.2e}); limit {TOLERANCE:.0e}")
    if not ok:
        for name, d in sorted(results.items(), key=lambda kv: -kv[1])[:5]:
            print(f"     {name}: {d:.2e}")
    return ok


def main():
    torch.set_num_threads(1)
    cases = sys.argv[1:]
    if not cases:
        sys.exit("usage: torch_reference.py CASE_DIR...")
    failed = [c for c in cases if not check(c)]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
