#!/bin/sh
# The exported model is usable elsewhere: a model trained by tessera-sim on Fashion-MNIST, loaded by
# examples/load_model.py with numpy alone, classifies the test set exactly as tessera-sim measured.
#   export_test.sh TESSERA_SIM SOURCE_DIR
set -eu
sim=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$sim" rounds=2 local_steps=30 devices=2 eval_every=1 metrics="$out/m.jsonl" output="$out/model.safetensors" >/dev/null
/usr/bin/python3 - "$out" "$root/examples/load_model.py" <<'PY'
import json, subprocess, sys
out, loader = sys.argv[1], sys.argv[2]
sim = json.loads(open(f"{out}/m.jsonl").read().splitlines()[-1])["test_accuracy"] * 100
text = subprocess.run(["/usr/bin/python3", loader, f"{out}/model.safetensors"], check=True, capture_output=True, text=True).stdout
numpy = float(text.split("test accuracy (numpy): ")[1].split("%")[0])
print(f"tessera-sim {sim:.2f}%, numpy {numpy:.2f}%")
sys.exit(0 if abs(sim - numpy) <= 0.02 else 1)  # at most 2 of 10 000 examples on a rounding tie
PY
