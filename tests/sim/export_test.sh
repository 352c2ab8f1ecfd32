#!/bin/sh
# The exported model is usable elsewhere: models trained by tessera-sim on Fashion-MNIST, loaded by
# examples/load_model.py with numpy alone, classify the test set exactly as tessera-sim measured: the
# shipped MLP, a 2-D convolutional network, one whose input has 4 channels, and a 1-D one over the
# image's rows as a sequence (their tensors in PyTorch's layouts: OIHW, OIW, channel-major flatten).
#   export_test.sh TESSERA_SIM SOURCE_DIR
set -eu
sim=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cnn='model={"input_shape": [1, 28, 28], "outputs": 10, "layers": [{"conv2d": {"channels": 6, "kernel": 3}}, {"max_pool": 2},
  {"conv2d": {"channels": 8, "kernel": 3, "stride": 2}}, {"flatten": true}, {"dense": 32}]}'
seq='model={"input_shape": [28, 28], "outputs": 10, "layers": [{"conv1d": {"channels": 16, "kernel": 5, "padding": "valid"}},
  {"max_pool": 2}, {"conv1d": {"channels": 16, "kernel": 3}}, {"global_avg_pool": true}]}'
check() {  # NAME [KEY=VALUE ...]: trains, exports, and compares
  name=$1
  shift
  "$sim" rounds=2 local_steps=30 devices=2 eval_every=1 metrics="$out/$name.jsonl" output="$out/$name.safetensors" "$@" >/dev/null
  /usr/bin/python3 - "$out" "$name" "$root/examples/load_model.py" <<'PY'
import json, subprocess, sys
out, name, loader = sys.argv[1], sys.argv[2], sys.argv[3]
sim = json.loads(open(f"{out}/{name}.jsonl").read().splitlines()[-1])["test_accuracy"] * 100
text = subprocess.run(["/usr/bin/python3", loader, f"{out}/{name}.safetensors"], check=True, capture_output=True, text=True).stdout
numpy = float(text.split("test accuracy (numpy): ")[1].split("%")[0])
print(f"{name}: tessera-sim {sim:.2f}%, numpy {numpy:.2f}%")
sys.exit(0 if abs(sim - numpy) <= 0.02 else 1)  # at most 2 of 10 000 examples on a rounding tie
PY
}
# An image of several channels: the 784 values read as 4 channels of 14 × 14 (channel-major, as numpy's
# reshape), which the network moves channels-last and the file holds as OIHW with 4 input channels.
rgba='model={"input_shape": [4, 14, 14], "outputs": 10, "layers": [{"conv2d": {"channels": 8, "kernel": 3}}, {"max_pool": 2},
  {"flatten": true}, {"dense": 16}]}'
check mlp
check cnn "$cnn" whole_model_rounds=0
check seq "$seq" whole_model_rounds=0
check rgba "$rgba" whole_model_rounds=0
