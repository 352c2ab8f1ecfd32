#!/bin/sh
# tessera-pki end to end: every command, the no-overwrite rule, key modes, and errors that exit non-zero.
set -eu
pki="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "pki_cli_test: $*" >&2; exit 1; }

"$pki" --help | grep -q issue-device || fail "--help"
"$pki" init --dir "$dir" --cn "Test CA" --days 30 >/dev/null
"$pki" issue-hub --dir "$dir" --name localhost --name 127.0.0.1 >/dev/null
"$pki" issue-device --dir "$dir" --id pi-07 >/dev/null
for f in ca.key hub.key pi-07.key; do
  [ "$(stat -c %a "$dir/$f")" = 400 ] || fail "$f is not mode 0400"
done
before=$(cat "$dir/pi-07.pem")
if "$pki" issue-device --dir "$dir" --id pi-07 2>/dev/null; then fail "overwrote without --force"; fi
[ "$(cat "$dir/pi-07.pem")" = "$before" ] || fail "certificate changed without --force"
if "$pki" init --dir "$dir" 2>/dev/null; then fail "re-initialised the CA without --force"; fi
"$pki" issue-device --dir "$dir" --id pi-07 --force >/dev/null
[ "$(cat "$dir/pi-07.pem")" != "$before" ] || fail "--force did not replace"
"$pki" revoke --dir "$dir" --cert "$dir/pi-07.pem" | grep -q "revoked serial" || fail "revoke"
if "$pki" revoke --dir "$dir" --cert "$dir/pi-07.pem" 2>/dev/null; then fail "revoked twice"; fi
if "$pki" issue-device --dir "$dir" --id 'bad/id' 2>/dev/null; then fail "accepted a bad id"; fi
if "$pki" frobnicate 2>/dev/null; then fail "accepted an unknown command"; fi
echo "pki_cli_test: ok"
