#!/bin/sh
# hub_test's "operator access" cases with the endpoint on a non-loopback address: a network namespace of
# this test's own with loopback and a veth pair whose both ends stay inside it (one holds 10.x.y.1/24),
# nothing else. There, http.tls auto must
# serve HTTPS, and no certificate, a device's and another CA's must be refused, an operator's accepted.
# Needs root and iproute2; elsewhere it is skipped (exit 77) with the reason.
# Usage: netns_access_test.sh HUB_TEST
set -eu
hub_test=$1
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIPPED: needs root and iproute2 to create a network namespace"
  exit 77
fi
tag=tso$$
address=10.$((200 + $$ % 50)).$(( ($$ / 50) % 250 )).1
err=$(mktemp)
cleanup() { ip netns del "$tag" 2>/dev/null || true; rm -f "$err"; }
trap cleanup EXIT
if ! ip netns add "$tag" 2>"$err"; then
  echo "SKIPPED: cannot create a network namespace here: $(cat "$err")"
  exit 77
fi
ip netns exec "$tag" ip link set lo up
ip netns exec "$tag" ip link add "${tag}a" type veth peer name "${tag}b"
ip netns exec "$tag" ip addr add "$address/24" dev "${tag}a"
ip netns exec "$tag" ip link set "${tag}a" up
ip netns exec "$tag" ip link set "${tag}b" up
echo "operator endpoint on $address in namespace $tag"
# The agents of these cases reach the hub's device port on 127.0.0.1, which the namespace has too.
ip netns exec "$tag" env TESSERA_OPERATOR_TEST_ADDRESS="$address" "$hub_test" --test-case="operator access*"
