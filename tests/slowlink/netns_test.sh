#!/bin/sh
# An agent in its own network namespace behind a kernel rate limit (tbf, 1 Mbit/s each way on a veth
# pair) trains 2 rounds with a hub in the test's namespace. Checks that the rounds complete over TLS
# and that the bytes moved per round are consistent with the kernel's rate (the link is real, not
# emulated in user space). Needs root and iproute2; elsewhere it is skipped (exit 77) with the reason.
# Usage: netns_test.sh HUB EDGE SIM PKI
set -eu
hub=$1 edge=$2 sim=$3 pki=$4
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED: needs root and iproute2 (ip, tc) to create a network namespace with a tbf qdisc"
  exit 77
fi
tag=tsr$$
net=10.$((200 + $$ % 50)).$(( ($$ / 50) % 250 ))
work=$(mktemp -d)
cleanup() {
  [ -n "${agent_pid:-}" ] && kill "$agent_pid" 2>/dev/null || true
  [ -n "${hub_pid:-}" ] && kill "$hub_pid" 2>/dev/null || true
  ip netns del "$tag" 2>/dev/null || true
  ip link del "${tag}h" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$tag" 2>"$work/err"; then
  echo "SKIPPED: cannot create a network namespace here: $(cat "$work/err")"
  exit 77
fi
ip link add "${tag}h" type veth peer name "${tag}d"
ip link set "${tag}d" netns "$tag"
ip addr add "$net.1/24" dev "${tag}h"
ip link set "${tag}h" up
ip netns exec "$tag" ip addr add "$net.2/24" dev "${tag}d"
ip netns exec "$tag" ip link set "${tag}d" up
ip netns exec "$tag" ip link set lo up
tc qdisc add dev "${tag}h" root tbf rate 1mbit burst 16kb latency 500ms
ip netns exec "$tag" tc qdisc add dev "${tag}d" root tbf rate 1mbit burst 16kb latency 500ms

"$pki" init --dir "$work/pki" >/dev/null
"$pki" issue-hub --dir "$work/pki" --name "$net.1" >/dev/null
"$pki" issue-device --dir "$work/pki" --id board >/dev/null
"$sim" shards --out "$work/shards" devices=1 data.examples=1000 >/dev/null
data=$(tr -d '\n' < "$work/shards/device-0/data.json")

# The file exists before the hub starts: the background shell creates it only when it gets to run, and
# the first sed below must find it (set -e ends the script on its error).
: >"$work/hub.out"
"$hub" listen="$net.1:0" tls.ca="$work/pki/ca.pem" tls.cert="$work/pki/hub.pem" tls.key="$work/pki/hub.key" \
  tls.crl="$work/pki/ca.crl" model.hidden='[64,64]' rounds=2 min_devices=1 max_devices=1 device_wait_s=0 \
  local_steps=10 batch=16 round_deadline_s=120 metrics="$work/metrics.jsonl" >"$work/hub.out" 2>"$work/hub.err" &
hub_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n "s/^tessera-hub: .* on $net.1:\([0-9]*\),.*/\1/p" "$work/hub.out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/hub.err"; echo "FAIL: the hub did not start"; exit 1; }
ip netns exec "$tag" "$edge" run hub="$net.1:$port" hub_name="$net.1" tls.ca="$work/pki/ca.pem" \
  tls.cert="$work/pki/board.pem" tls.key="$work/pki/board.key" "data=$data" exit_after_rounds=2 2>"$work/agent.err" &
agent_pid=$!
for _ in $(seq 600); do
  kill -0 "$hub_pid" 2>/dev/null || break
  sleep 0.2
done
if kill -0 "$hub_pid" 2>/dev/null; then
  cat "$work/hub.err" "$work/agent.err"
  echo "FAIL: 2 rounds did not complete within 120 s"
  exit 1
fi
wait "$hub_pid" || { cat "$work/hub.err" "$work/agent.err"; echo "FAIL: the hub failed"; exit 1; }
cat "$work/hub.out"
# Each round moves the whole model (one device) down and up: at 1 Mbit/s that takes bytes·8/1e6 s.
awk -F'[:,]' '
  { for (i = 1; i < NF; i++) {
      if ($i ~ /"bytes_down"/) down = $(i+1); if ($i ~ /"bytes_up"/) up = $(i+1)
      if ($i ~ /"seconds"/) secs = $(i+1); if ($i ~ /"stragglers"/) s = $(i+1) }
    need = (down + up) * 8 / 1e6
    printf "round: %d bytes down and %d up in %.2f s (%.2f s at 1 Mbit/s)\n", down, up, secs, need
    # tbf lets a 16 kB burst through at once: allow a little less than the exact time.
    if (s != 0 || secs < 0.85 * need) { print "FAIL: faster than the kernel rate, or a straggler"; bad = 1 }
    n++ }
  END { if (n != 2) { print "FAIL: expected 2 rounds, got " n; bad = 1 } exit bad }' "$work/metrics.jsonl"
echo "PASS: 2 rounds over a 1 Mbit/s tbf link in a network namespace"
