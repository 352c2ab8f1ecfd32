#!/bin/sh
# The hub's operator endpoint as a monitoring stack and a browser see it, with real programs on 127.0.0.1:
#   prometheus  A Prometheus server scrapes a running hub over HTTPS with an operator certificate. The run is
#               paused through the endpoint (curl, operator certificate); then Prometheus' query API must give
#               the completed rounds and the last accuracy exactly as the hub's metrics file has them, and
#               `promtool check metrics` must say nothing about a scrape. /api/finish then ends the run, which
#               writes its model and exits 0.
#   chromium    Headless Chromium loads the status page of a plain loopback endpoint while two agents are held
#               (SIGSTOP) in the middle of a round: its DOM must hold one "connected" row per connected device
#               and one accuracy point per evaluated round; a screenshot is written (STATUS_PAGE_PNG, if set).
# Each part is skipped (exit 77, with the reason) when its program is missing; tests/run installs them.
# Usage: monitoring_test.sh prometheus|chromium HUB EDGE SIM PKI
set -eu
part=$1 hub=$2 edge=$3 sim=$4 pki=$5
case "$part" in
  prometheus) for p in prometheus promtool curl; do
      command -v "$p" >/dev/null || { echo "SKIPPED: $p is not installed (toolchains/install-deps --tests installs it)"; exit 77; }
    done ;;
  chromium) for p in chromium curl; do
      command -v "$p" >/dev/null || { echo "SKIPPED: $p is not installed (toolchains/install-deps --tests installs it)"; exit 77; }
    done ;;
  *) echo "usage: $0 prometheus|chromium HUB EDGE SIM PKI" >&2; exit 2 ;;
esac
validation=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
[ -r "$validation" ] || { echo "SKIPPED: Fashion-MNIST is not installed (dataset-fashion-mnist)"; exit 77; }

work=$(mktemp -d)
pids=
cleanup() {
  for p in $pids; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in hub.err agent-0.err agent-1.err prometheus.err; do
    [ -s "$work/$f" ] && { echo "--- $f"; tail -n 30 "$work/$f"; }
  done
  exit 1
}
# A TCP port nothing listens on now (for Prometheus' own web port).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

"$pki" init --dir "$work/pki" >/dev/null
"$pki" issue-hub --dir "$work/pki" --name localhost --name 127.0.0.1 >/dev/null
"$pki" issue-device --dir "$work/pki" --id device-0 >/dev/null
"$pki" issue-device --dir "$work/pki" --id device-1 >/dev/null
"$pki" issue-operator --dir "$work/pki" --id monitor >/dev/null
"$sim" shards --out "$work/shards" devices=2 data.examples=1200 >/dev/null

if [ "$part" = prometheus ]; then tls=on; else tls=auto; fi
# The file exists before the hub starts: the background shell creates it only when it gets to run, and
# the first sed below must find it (set -e ends the script on its error).
: >"$work/hub.out"
"$hub" listen=127.0.0.1:0 tls.ca="$work/pki/ca.pem" tls.cert="$work/pki/hub.pem" tls.key="$work/pki/hub.key" \
  tls.crl="$work/pki/ca.crl" model.hidden='[64,64]' rounds=100000 min_devices=2 max_devices=2 device_wait_s=0 \
  local_steps=20 batch=32 eval_every=1 round_deadline_s=600 heartbeat_s=1 idle_timeout_s=600 \
  validation.format=idx validation.features="$validation" \
  validation.labels=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz \
  metrics="$work/metrics.jsonl" output="$work/model.safetensors" http.listen=127.0.0.1:0 http.tls=$tls \
  >"$work/hub.out" 2>"$work/hub.err" &
hub_pid=$!
pids="$hub_pid"
endpoint=
for _ in $(seq 100); do
  endpoint=$(sed -n 's/^tessera-hub: .*operator endpoint \(https*:\/\/[^ ]*\/\)$/\1/p' "$work/hub.out")
  [ -n "$endpoint" ] && break
  sleep 0.1
done
[ -n "$endpoint" ] || fail "the hub did not start with an operator endpoint"
port=$(sed -n 's/^tessera-hub: .* on 127.0.0.1:\([0-9]*\),.*/\1/p' "$work/hub.out")
http_port=$(echo "$endpoint" | sed 's/.*:\([0-9]*\)\/$/\1/')

for i in 0 1; do
  data=$(tr -d '\n' < "$work/shards/device-$i/data.json")
  "$edge" run hub="127.0.0.1:$port" hub_name=127.0.0.1 tls.ca="$work/pki/ca.pem" tls.cert="$work/pki/device-$i.pem" \
    tls.key="$work/pki/device-$i.key" "data=$data" heartbeat_s=1 idle_timeout_s=600 2>"$work/agent-$i.err" &
  pids="$pids $!"
  eval "agent_$i=$!"
done

# Waits (at most $2 tenths of a second) until the metrics file has $1 rounds.
wait_rounds() {
  for _ in $(seq "$2"); do
    [ "$(wc -l < "$work/metrics.jsonl" 2>/dev/null || echo 0)" -ge "$1" ] && return 0
    kill -0 "$hub_pid" 2>/dev/null || fail "the hub exited"
    sleep 0.1
  done
  fail "fewer than $1 rounds after $(($2 / 10)) s"
}
# The last line's value of a field in the metrics file.
last_field() { python3 -c 'import json, sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1][sys.argv[2]]))' "$work/metrics.jsonl" "$1"; }

if [ "$part" = prometheus ]; then
  op="--cacert $work/pki/ca.pem --cert $work/pki/operator-monitor.pem --key $work/pki/operator-monitor.key"
  prom_port=$(free_port)
  cat > "$work/prometheus.yml" <<EOF
global: { scrape_interval: 500ms, scrape_timeout: 400ms, evaluation_interval: 1s }
scrape_configs:
  - job_name: tessera-hub
    scheme: https
    tls_config:
      ca_file: $work/pki/ca.pem
      cert_file: $work/pki/operator-monitor.pem
      key_file: $work/pki/operator-monitor.key
      server_name: localhost
    static_configs: [ { targets: ['127.0.0.1:$http_port'] } ]
EOF
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.out" 2>"$work/prometheus.err" &
  pids="$pids $!"
  wait_rounds 3 600
  # shellcheck disable=SC2086
  curl -sS --fail $op -H 'Content-Type: application/json' -d '{}' "${endpoint}api/pause" >/dev/null || fail "pause"
  for _ in $(seq 300); do
    # shellcheck disable=SC2086
    curl -sS $op "${endpoint}api/status" | grep -q '"state":"paused"' && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  curl -sS $op "${endpoint}api/status" | grep -q '"state":"paused"' || fail "the hub did not pause"
  rounds=$(wc -l < "$work/metrics.jsonl")
  accuracy=$(last_field test_accuracy)
  # Prometheus scrapes every 500 ms: within 20 s its newest samples are the paused hub's.
  query() { curl -sS --get "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" |
              python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(repr(float(r[0]["value"][1])) if r else "none")'; }
  got_rounds= got_accuracy= got_up=
  for _ in $(seq 80); do
    got_up=$(query 'up{job="tessera-hub"}' 2>/dev/null || echo none)
    got_rounds=$(query tessera_hub_rounds_completed 2>/dev/null || echo none)
    got_accuracy=$(query tessera_hub_test_accuracy_ratio 2>/dev/null || echo none)
    [ "$got_up" = 1.0 ] && [ "$got_rounds" = "$rounds.0" ] && [ "$got_accuracy" = "$accuracy" ] && break
    sleep 0.25
  done
  echo "metrics file: $rounds rounds, last test accuracy $accuracy"
  echo "Prometheus:   up $got_up, tessera_hub_rounds_completed $got_rounds, tessera_hub_test_accuracy_ratio $got_accuracy"
  [ "$got_up" = 1.0 ] || fail "Prometheus could not scrape the hub (up = $got_up)"
  [ "$got_rounds" = "$rounds.0" ] || fail "Prometheus has $got_rounds completed rounds, the metrics file $rounds"
  [ "$got_accuracy" = "$accuracy" ] || fail "Prometheus has accuracy $got_accuracy, the metrics file $accuracy"
  # shellcheck disable=SC2086
  curl -sS --fail $op "${endpoint}metrics" > "$work/scrape.txt" || fail "scrape"
  lint=$(promtool check metrics < "$work/scrape.txt" 2>&1) || fail "promtool check metrics failed: $lint"
  [ -z "$lint" ] || fail "promtool check metrics says: $lint"
  echo "promtool check metrics: nothing to report on a $(wc -c < "$work/scrape.txt")-byte scrape"
  # shellcheck disable=SC2086
  curl -sS --fail $op -H 'Content-Type: application/json' -d '{}' "${endpoint}api/finish" >/dev/null || fail "finish"
  for _ in $(seq 100); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$hub_pid" || fail "the hub did not exit 0 after /api/finish"
  [ -s "$work/model.safetensors" ] || fail "no model written after /api/finish"
  echo "PASS: Prometheus scraped the hub over HTTPS; pause and finish through the endpoint"
  exit 0
fi

# chromium: hold both agents mid-run, then the page must show what the hub has.
wait_rounds 4 600
eval "kill -STOP \$agent_0 \$agent_1"
sleep 1  # a round whose updates were already in closes; the next one waits for the held agents
rounds=$(wc -l < "$work/metrics.jsonl")
sleep 1
[ "$(wc -l < "$work/metrics.jsonl")" = "$rounds" ] || fail "rounds still completing with both agents held"
evaluated=$(python3 -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l).get("test_accuracy") is not None))' "$work/metrics.jsonl")
curl -sS "${endpoint}api/status" | grep -q '"connected":2' || fail "the hub does not count 2 connected devices"
dom="$work/dom.html"
chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --virtual-time-budget=8000 \
  --dump-dom "$endpoint" > "$dom" 2>"$work/chromium.err" || fail "chromium --dump-dom: $(tail -n 3 "$work/chromium.err")"
rows=$(grep -o 'class="device connected"' "$dom" | wc -l)
points=$(grep -o 'class="point accuracy[ "]' "$dom" | wc -l)
echo "hub: 2 devices connected, $rounds rounds, $evaluated evaluated; page: $rows connected rows, $points accuracy points"
[ "$rows" = 2 ] || fail "the page shows $rows connected devices, not 2"
[ "$points" = "$evaluated" ] || fail "the accuracy chart has $points points for $evaluated evaluated rounds"
if [ -n "${STATUS_PAGE_PNG:-}" ]; then
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --hide-scrollbars \
    --virtual-time-budget=8000 --window-size=1280,1000 --screenshot="$STATUS_PAGE_PNG" "$endpoint" 2>>"$work/chromium.err" ||
    fail "chromium --screenshot"
  echo "screenshot: $STATUS_PAGE_PNG"
fi
echo "PASS: the status page in headless Chromium shows the connected devices and every evaluated round"
