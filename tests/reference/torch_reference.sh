#!/bin/sh
# Every layer against PyTorch (Debian's python3-torch: toolchains/install-deps --tests): networks of
# each layer kind — 2-D convolutions (same and valid padding, stride 1 and 2, one and several input
# channels), 1-D ones over a sequence, max and global average pooling, flatten, dense, with LayerNorm
# and without, and the `hidden` MLP — give Tessera's logits, loss and gradients for one batch
# (layers_dump) and PyTorch's from the same weights and inputs (torch_reference.py).
#   torch_reference.sh LAYERS_DUMP SOURCE_DIR
# Exit 77 (skipped) where PyTorch is not installed.
set -eu
dump=$1
here=$2/tests/reference
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIPPED: PyTorch is not installed (python3-torch: toolchains/install-deps --tests installs it)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

case_() {  # NAME BATCH SPEC_JSON
  mkdir -p "$out/$1"
  printf '%s\n' "$3" > "$out/$1/spec.json"
  "$dump" "$out/$1/spec.json" "$out/$1" "$2" 11
}
case_ image-rgb 16 '{"input_shape": [3, 12, 10], "outputs": 5, "layers": [
  {"conv2d": {"channels": 6, "kernel": 3}}, {"max_pool": 2},
  {"conv2d": {"channels": 8, "kernel": 3, "stride": 2, "padding": "valid"}}, {"flatten": true}, {"dense": 16}]}'
case_ image-gap 7 '{"input_shape": [1, 28, 28], "outputs": 10, "layers": [
  {"conv2d": {"channels": 8, "kernel": 5, "stride": 2}}, {"conv2d": {"channels": 12, "kernel": 3}}, {"max_pool": 3},
  {"global_avg_pool": true}, {"dense": 12}]}'
case_ image-no-norm 16 '{"input_shape": [2, 9, 9], "outputs": 3, "compensation": "none", "layers": [
  {"conv2d": {"channels": 5, "kernel": 3, "padding": "valid"}}, {"max_pool": 2}, {"flatten": true}]}'
case_ sequence 16 '{"input_shape": [20, 6], "outputs": 4, "layers": [
  {"conv1d": {"channels": 8, "kernel": 5, "padding": "valid"}}, {"max_pool": 2},
  {"conv1d": {"channels": 8, "kernel": 3, "stride": 2}}, {"global_avg_pool": true}]}'
case_ sequence-flat 9 '{"input_shape": [28, 28], "outputs": 10, "layers": [
  {"conv1d": {"channels": 16, "kernel": 3, "stride": 2}}, {"flatten": true}, {"dense": 20}, {"dense": 10}]}'
case_ mlp 16 '{"inputs": 30, "hidden": [16, 8], "outputs": 5}'
"$python" "$here/torch_reference.py" "$out"/*
