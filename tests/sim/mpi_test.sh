#!/bin/sh
# tessera-sim spread over Open MPI's ranks ends where one process does, to the last bit: the model file
# and every metrics line but the measured seconds, for `mpirun -n 1` and `mpirun -n 2` against the plain
# run — IST with its groups, FedAvg on a random cohort of the fleet (devices_per_round) with
# differential privacy's clipping and noise, and successive layer training within budgets.
#   mpi_test.sh TESSERA_SIM
set -eu
sim=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Root in a container: Open MPI asks for both confirmations.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none  # one machine: shared memory only
check() {  # NAME [KEY=VALUE ...]
  name=$1
  shift
  for how in plain 1 2; do
    launch=""
    # Unbound, as the plain run: the evaluation sums over as many threads as the process may use.
    [ "$how" = plain ] || launch="mpirun --oversubscribe --bind-to none -n $how"
    # shellcheck disable=SC2086
    $launch "$sim" rounds=3 local_steps=20 eval_every=1 metrics="$out/$name-$how.jsonl" output="$out/$name-$how.safetensors" "$@" \
      > "$out/$name-$how.out" 2> "$out/$name-$how.err" || { echo "FAIL: $name ($how): $(tail -n 3 "$out/$name-$how.err")"; exit 1; }
  done
  for how in 1 2; do
    cmp -s "$out/$name-plain.safetensors" "$out/$name-$how.safetensors" || { echo "FAIL: $name: the model of -n $how differs"; exit 1; }
    /usr/bin/python3 - "$out/$name-plain.jsonl" "$out/$name-$how.jsonl" <<'PY' || { echo "FAIL: $name: the metrics of -n $how differ"; exit 1; }
import json, sys
def rows(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        r.pop("seconds", None)  # measured, not computed
        out.append(r)
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
sys.exit(0 if a == b and len(a) == 3 else 1)
PY
  done
  grep -q "2 ranks" "$out/$name-2.out" || { echo "FAIL: $name: -n 2 did not run on two ranks"; exit 1; }
  echo "$name: mpirun -n 1 and -n 2 end with the plain run's model and metrics, to the bit"
}
check ist devices=6
check fedavg-cohort-dp strategy=fedavg devices=8 devices_per_round=3 'dp={"noise_multiplier": 0.5, "clip": 1.0, "sample_rate": 1.0}'
check slt strategy=slt devices=4 'model={"inputs": 784, "hidden": [64, 64], "outputs": 10}' budgets_mib=[0.45] micro_batch=4 'slt={"stage_rounds": [2, 1]}'
# Refused by name rather than spread wrongly.
if mpirun --oversubscribe -n 2 "$sim" rounds=1 devices=4 'secure_aggregation={"enabled": true}' > "$out/secure.out" 2>&1; then
  echo "FAIL: secure aggregation over two ranks was not refused"; exit 1
fi
grep -q "secure_aggregation is not spread over ranks yet" "$out/secure.out" || { echo "FAIL: the refusal does not name secure_aggregation"; exit 1; }
# A run that fails on one rank only (rank 0 alone opens the metrics file) ends every rank, not just its own.
if timeout 60 mpirun --oversubscribe -n 2 "$sim" rounds=1 devices=4 metrics=/nonexistent/m.jsonl > "$out/one.out" 2>&1; then
  echo "FAIL: a metrics file that cannot be opened was not an error"; exit 1
elif [ $? -eq 124 ]; then
  echo "FAIL: a failure on rank 0 left the other rank waiting (killed after 60 s)"; exit 1
fi
echo "PASS: tessera-sim over Open MPI ranks equals one process"
