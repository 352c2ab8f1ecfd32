#!/bin/sh
# tessera-link end to end, on 127.0.0.1: it relays a TCP echo server's bytes unchanged, at the latency
# and rate it is given (measured from both ends), cuts a connection after --cut-after-bytes, counts what
# it carried in the line it prints at SIGTERM, and refuses bad options with a non-zero exit.
# Usage: link_cli_test.sh TESSERA_LINK
set -eu
link=$1
work=$(mktemp -d)
pids=
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in echo.out link.out link.err client.out; do [ -s "$work/$f" ] && { echo "--- $f"; tail -n 20 "$work/$f"; }; done
  exit 1
}
# Waits (at most 10 s) until file $1 has a line matching $2; prints that line.
wait_line() {
  for _ in $(seq 100); do
    grep -m1 "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Options it cannot use: a message and exit 1, before it listens anywhere.
"$link" --help | grep -q -- "--cut-after-bytes" || fail "--help does not list the options"
if "$link" --listen 127.0.0.1:0 2>"$work/err"; then fail "ran without --to"; fi
grep -q "are required" "$work/err" || fail "no reason for a missing --to: $(cat "$work/err")"
if "$link" --listen 127.0.0.1:0 --to 127.0.0.1:1 --rate-kbit -3 2>"$work/err"; then fail "took a negative rate"; fi
grep -q "not a non-negative number" "$work/err" || fail "no reason for a negative rate: $(cat "$work/err")"
if "$link" --listen 127.0.0.1:0 --to 127.0.0.1:99999 2>"$work/err"; then fail "took port 99999"; fi
if "$link" --listen 127.0.0.1:0 --to 127.0.0.1:1 --frobnicate 1 2>"$work/err"; then fail "took an unknown option"; fi

# An echo server: every byte back on the connection it came from.
python3 -u - >"$work/echo.out" 2>&1 <<'PY' &
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print("echo", s.getsockname()[1])
def serve(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
pids="$pids $!"
echo_port=$(wait_line "$work/echo.out" '^echo ' | cut -d' ' -f2) || fail "the echo server did not start"

# client PORT BYTES PIECE: sends BYTES bytes through the link, PIECE bytes at a time, each piece's echo
# read before the next is sent; prints the seconds it took and how many bytes came back intact (a cut
# connection ends it early).
client() {
  python3 - "$1" "$2" "$3" <<'PY'
import socket, sys, time
port, n, piece = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
data = bytes((i * 7 + 3) % 256 for i in range(n))
c = socket.create_connection(("127.0.0.1", port)); c.settimeout(20)
t0 = time.monotonic()
got = b""
try:
    for at in range(0, n, piece):
        c.sendall(data[at:at + piece])
        while len(got) < min(n, at + piece):
            b = c.recv(65536)
            if not b: raise EOFError
            got += b
except (OSError, EOFError):
    pass
print(f"{time.monotonic() - t0:.3f} {len(got)} {'intact' if got == data[:len(got)] else 'changed'}")
PY
}

# 1. 150 ms each way and 320 kbit/s (40 000 bytes/s) each way, one connection for each:
#    - four 100-byte pieces there and back, one after the other: each waits out both latencies, so at
#      least 1.2 s (without the latency, a few milliseconds);
#    - 40 000 bytes at once: past the bucket's first 4 KiB (net/token_bucket.hpp) 0.9 s of rate, and the
#      latencies: at least 1.2 s (without the rate, 0.3 s); the bound is 0.85 s.
"$link" --listen 127.0.0.1:0 --to "127.0.0.1:$echo_port" --latency-ms 150 --rate-kbit 320 --report-s 60 \
  >"$work/link.out" 2>"$work/link.err" &
link_pid=$!
pids="$pids $link_pid"
port=$(wait_line "$work/link.out" '^tessera-link: ' | sed -n 's/^tessera-link: 127\.0\.0\.1:\([0-9]*\) -> .*/\1/p') ||
  fail "tessera-link did not start"
[ -n "$port" ] && [ "$port" != 0 ] || fail "tessera-link printed no port"
# Echoes TOTAL bytes in CHUNK-byte writes through the link; all must come back intact, taking between
# LEAST and 15 s. Usage: echo_through TOTAL CHUNK LEAST WHAT WHY
echo_through() {
  client "$port" "$1" "$2" > "$work/client.out" || fail "the client failed"
  read -r seconds bytes integrity < "$work/client.out"
  echo "$4: $seconds s ($bytes back, $integrity)"
  [ "$bytes" = "$1" ] && [ "$integrity" = intact ] || fail "the echo came back as $bytes bytes, $integrity"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) <= float(sys.argv[1]) <= 15 else 1)" "$seconds" "$3" ||
    fail "$4 took $seconds s: $5"
}
echo_through 400 100 1.2 "four 100-byte round trips through 150 ms each way" "at 150 ms each way, at least 1.2 s"
echo_through 40000 40000 0.85 "40000 bytes echoed through 320 kbit/s each way" \
  "at 40 000 bytes/s each way, past a 4 KiB burst, at least 0.9 s"
kill -TERM "$link_pid"
wait "$link_pid" || fail "tessera-link did not exit 0 at SIGTERM"
counters=$(tail -n 1 "$work/link.out")
echo "its counters: $counters"
[ "$counters" = "connections 2  cuts 0  stalls 0  bytes to target 40400  from target 40400" ] ||
  fail "the counters at exit are not two connections of 40400 bytes each way: $counters"

# 2. A connection cut after 4000 bytes (both ways together), used 1000 bytes at a time: two pieces
#    there and back make the 4000, so the client gets at most those two back, and the cut is counted.
"$link" --listen 127.0.0.1:0 --to "127.0.0.1:$echo_port" --cut-after-bytes 4000 --report-s 60 \
  >"$work/link.out" 2>"$work/link.err" &
link_pid=$!
pids="$pids $link_pid"
port=$(wait_line "$work/link.out" '^tessera-link: ' | sed -n 's/^tessera-link: 127\.0\.0\.1:\([0-9]*\) -> .*/\1/p') ||
  fail "tessera-link did not start"
client "$port" 10000 1000 > "$work/client.out" || fail "the client failed"
read -r seconds bytes integrity < "$work/client.out"
echo "a connection cut after 4000 bytes: $bytes of 10000 came back ($integrity)"
[ "$integrity" = intact ] || fail "the bytes before the cut changed"
[ "$bytes" -ge 1000 ] && [ "$bytes" -le 2000 ] || fail "$bytes bytes came back, not the one or two pieces before the cut"
kill -TERM "$link_pid"
wait "$link_pid" || fail "tessera-link did not exit 0 at SIGTERM"
counters=$(tail -n 1 "$work/link.out")
echo "its counters: $counters"
case "$counters" in
  "connections 1  cuts 1  stalls 0 "*) ;;
  *) fail "the counters do not show the one cut connection: $counters" ;;
esac
echo "PASS: tessera-link relays at its latency and rate, cuts, counts and refuses bad options"
