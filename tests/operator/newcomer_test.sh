#!/bin/sh
# The newcomer's path: a hub from the README's command (examples/hub.json, FedAvg) and three agents from
# examples/agent.json, two of them wrong the way a first deployment goes wrong: device-1 with a memory
# budget the model does not fit in (1 MiB), device-2 set up from another CA (`tessera-pki init` run twice).
# Within 20 s the operator must be able to read what is wrong and what the hub waits for:
#   the hub's log    one line per problem, naming the device (id, address, certificate serial) and the fix;
#   api/status       run.waiting_for, and fleet.turned_away with both, each with its reason;
#   the status page  (headless Chromium) a "Waiting" notice and one "Turned away" notice for each;
#   the agents' logs each wrong agent says why it was turned away.
# The hub's whole log is printed, to show how little there is to read.
# Skipped (exit 77, with the reason) without Chromium, curl or Fashion-MNIST; tests/run installs them.
# Usage: newcomer_test.sh HUB EDGE SIM PKI EXAMPLES_DIR
set -eu
hub=$1 edge=$2 sim=$3 pki=$4 examples=$5
for p in chromium curl python3; do
  command -v "$p" >/dev/null || { echo "SKIPPED: $p is not installed (toolchains/install-deps --tests installs it)"; exit 77; }
done
[ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] ||
  { echo "SKIPPED: Fashion-MNIST is not installed (dataset-fashion-mnist)"; exit 77; }

work=$(mktemp -d)
pids=
# shellcheck disable=SC2086
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  for f in hub.err device-0.err device-1.err device-2.err; do
    [ -s "$work/$f" ] && { echo "--- $f"; tail -n 30 "$work/$f"; }
  done
  exit 1
}
cd "$work"

"$pki" init --dir pki >/dev/null
"$pki" issue-hub --dir pki --name 127.0.0.1 >/dev/null
"$pki" issue-device --dir pki --id device-0 >/dev/null
"$pki" issue-device --dir pki --id device-1 >/dev/null
"$pki" init --dir other-pki --cn "another CA" >/dev/null  # the newcomer's second `init`
"$pki" issue-device --dir other-pki --id device-2 >/dev/null
"$sim" shards --out shards --config "$examples/sim-fashion-ist.json" devices=3 >/dev/null

# The README's command for FedAvg, with the ports left to the system (the test may not take 7443 and 9464).
cp "$examples/hub.json" hub.json
: >hub.out
"$hub" --config hub.json rounds=100 listen=127.0.0.1:0 http.listen=127.0.0.1:0 strategy=fedavg repartition_every=1 whole_model_rounds=0 \
  >hub.out 2>hub.err &
hub_pid=$!
pids="$hub_pid"
endpoint=
for _ in $(seq 100); do
  endpoint=$(sed -n 's/^tessera-hub: .*operator endpoint \(https*:\/\/[^ ]*\/\)$/\1/p' hub.out)
  [ -n "$endpoint" ] && break
  kill -0 "$hub_pid" 2>/dev/null || fail "the hub exited"
  sleep 0.1
done
[ -n "$endpoint" ] || fail "the hub did not start with an operator endpoint"
port=$(sed -n 's/^tessera-hub: .* on 127.0.0.1:\([0-9]*\),.*/\1/p' hub.out)
started=$(date +%s)

# examples/agent.json with each device's own files; device-1 offers 1 MiB (FedAvg's whole model needs more), device-2 was set up from
# the other CA (its certificate and its tls.ca).
for d in 0 1 2; do
  ca=pki; budget=16
  [ "$d" = 2 ] && ca=other-pki
  [ "$d" = 1 ] && budget=1
  python3 - "$examples/agent.json" "$d" "$port" "$ca" "$budget" <<'PY'
import json, sys
template, d, port, ca, budget = sys.argv[1:6]
cfg = json.load(open(template))
cfg["hub"] = f"127.0.0.1:{port}"
cfg["tls"] = {"ca": f"{ca}/ca.pem", "cert": f"{ca}/device-{d}.pem", "key": f"{ca}/device-{d}.key"}
cfg["data"] = json.load(open(f"shards/device-{d}/data.json"))
cfg["memory_budget_mib"] = float(budget)
json.dump(cfg, open(f"agent-{d}.json", "w"), indent=2)
PY
  "$edge" run --config "agent-$d.json" 2>"device-$d.err" &
  pids="$pids $!"
done

# What the operator reads: the hub's log, then api/status, within 20 s.
status=
for _ in $(seq 200); do
  status=$(curl -sS "${endpoint}api/status" || true)
  echo "$status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
codes = sorted(t["code"] for t in s["fleet"]["turned_away"])
sys.exit(0 if s["run"]["waiting_for"] and codes == ["over_budget", "tls.peer_distrusts_ca"] and s["fleet"]["connected"] == 1 else 1)
' 2>/dev/null && break
  status=
  sleep 0.1
done
[ -n "$status" ] || fail "api/status did not show the wait and both devices turned away within 20 s: $(curl -sS "${endpoint}api/status")"
took=$(($(date +%s) - started))
[ "$took" -le 20 ] || fail "the operator could read it only after $took s"

grep -q "device device-1 (127.0.0.1:[0-9]*, certificate serial [0-9a-f]*): cannot train this model: .*needs .*; the budget is 0.9[0-9]* MiB: turned away until its budget changes" hub.err ||
  fail "the hub's log does not name device-1 and its budget"
grep -q "connection refused: TLS handshake with 127.0.0.1:[0-9]*: the peer does not trust /O=Tessera/CN=Tessera CA, which issued this side's certificate (/O=Tessera/CN=tessera-hub, valid until .*): the two sides' tls.ca differ" hub.err ||
  fail "the hub's log does not say the peer distrusts its CA"
grep -q "turned this device away: this device cannot train the hub's model: .*(raise its memory_budget_mib" device-1.err ||
  fail "device-1's log does not say why it was turned away"
grep -q "no secure link to the hub at 127.0.0.1:$port: TLS handshake with 127.0.0.1:$port: the peer's certificate (/O=Tessera/CN=tessera-hub, valid until .*) was issued by /O=Tessera/CN=Tessera CA, not by this side's tls.ca (/O=Tessera/CN=another CA)" device-2.err ||
  fail "device-2's log does not name both CAs"
echo "$status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["run"]["waiting_for"].startswith("round 1 waits up to device_wait_s for more devices: 1 ready (1 connected) of max_devices 4"), s["run"]
away = {t["code"]: t for t in s["fleet"]["turned_away"]}
assert away["over_budget"]["who"] == "device-1" and away["over_budget"]["serial"], away
assert "cannot train this model" in away["over_budget"]["reason"], away
assert away["tls.peer_distrusts_ca"]["who"] == "127.0.0.1" and "tls.ca differ" in away["tls.peer_distrusts_ca"]["reason"], away
' || fail "api/status: $status"

dom=dom.html
chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --virtual-time-budget=8000 \
  --dump-dom "$endpoint" > "$dom" 2>chromium.err || fail "chromium --dump-dom: $(tail -n 3 chromium.err)"
grep -q 'class="notice n-warn waiting"' "$dom" || fail "the status page shows no Waiting notice"
grep -q 'class="notice n-warn turned-away" data-who="device-1"' "$dom" || fail "the status page does not show device-1 turned away"
grep -q 'class="notice n-warn turned-away" data-who="127.0.0.1"' "$dom" || fail "the status page does not show the foreign certificate"

echo "--- the hub's log after $took s ($(wc -l < hub.err) lines):"
cat hub.err
echo "--- device-1: $(grep -m1 'turned this device away' device-1.err)"
echo "--- device-2: $(grep -m1 'no secure link to the hub' device-2.err)"
echo "PASS: within $took s the hub's log, api/status and the status page name both wrong devices and what the hub waits for"
