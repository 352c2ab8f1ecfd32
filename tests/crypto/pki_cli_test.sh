#!/bin/sh
# tessera-pki end to end: every command, the no-overwrite rule, key modes, and errors that exit non-zero.
set -eu
pki="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "pki_cli_test: $*" >&2; exit 1; }

"$pki" --help | grep -q issue-device || fail "--help"
"$pki" --version | grep -Eq '^tessera-pki [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
"$pki" revoke --version | grep -Eq '^tessera-pki [0-9]+\.[0-9]+\.[0-9]+$' || fail "revoke --version"
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
# Twice: said, and not an error (a script revoking a list may meet one again; pki_test: the CRL keeps it once).
"$pki" revoke --dir "$dir" --cert "$dir/pi-07.pem" | grep -q "is already revoked in $dir/ca.crl: nothing to do" || fail "revoked twice"
if "$pki" issue-device --dir "$dir" --id 'bad/id' 2>/dev/null; then fail "accepted a bad id"; fi
if "$pki" frobnicate 2>/dev/null; then fail "accepted an unknown command"; fi

# issue-operator: a client certificate for the hub's operator endpoint, its role in the URI SAN.
"$pki" --help | grep -q issue-operator || fail "--help does not list issue-operator"
"$pki" issue-operator --dir "$dir" --id alice | grep -q "operator-alice.pem" || fail "issue-operator"
[ "$(stat -c %a "$dir/operator-alice.key")" = 400 ] || fail "the operator key is not mode 0400"
if command -v openssl >/dev/null; then
  openssl x509 -in "$dir/operator-alice.pem" -noout -ext subjectAltName,extendedKeyUsage 2>/dev/null |
    grep -q "URI:urn:tessera:operator:alice" || fail "the operator certificate lacks its URI"
fi
if "$pki" issue-operator --dir "$dir" 2>/dev/null; then fail "issue-operator without --id"; fi
if "$pki" issue-operator --dir "$dir" --id 'a b' 2>/dev/null; then fail "accepted a bad operator name"; fi
if "$pki" issue-operator --dir "$dir" --id bob --name x.org 2>/dev/null; then fail "issue-operator took --name"; fi

# seal-key: 32 bytes from the CSPRNG, mode 0400, kept unless --force, never printed.
"$pki" --help | grep -q seal-key || fail "--help does not list seal-key"
hex() { od -An -v -tx1 "$1" | tr -d ' \n'; }
key="$dir/keys/hub.sealkey"
said=$("$pki" seal-key --out "$key")
echo "$said" | grep -q "$key" || fail "seal-key did not say where it wrote"
[ "$(stat -c %a "$key")" = 400 ] || fail "the sealing key is not mode 0400"
[ "$(stat -c %s "$key")" = 32 ] || fail "the sealing key is not 32 bytes"
first=$(hex "$key")
if echo "$said" | tr -d ' \n' | grep -qi "$first"; then fail "seal-key printed the key"; fi
if "$pki" seal-key --out "$key" >/dev/null 2>"$dir/refusal"; then fail "replaced a sealing key without --force"; fi
grep -q "$key exists" "$dir/refusal" || fail "the refusal does not name the file: $(cat "$dir/refusal")"
[ "$(hex "$key")" = "$first" ] || fail "the sealing key changed without --force"
"$pki" seal-key --out "$key" --force >/dev/null
[ "$(stat -c %a "$key")" = 400 ] || fail "the replaced sealing key is not mode 0400"
[ "$(hex "$key")" != "$first" ] || fail "--force did not write a fresh key"
"$pki" seal-key --out "$dir/other.sealkey" >/dev/null
[ "$(hex "$dir/other.sealkey")" != "$(hex "$key")" ] || fail "two sealing keys are the same"
if "$pki" seal-key 2>/dev/null; then fail "seal-key without --out"; fi
if "$pki" seal-key --out "$dir/third.sealkey" --dir "$dir" 2>/dev/null; then fail "seal-key took --dir"; fi
[ ! -e "$dir/third.sealkey" ] || fail "seal-key wrote a key despite a usage error"
echo "pki_cli_test: ok"
