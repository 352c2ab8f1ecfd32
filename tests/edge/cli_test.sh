#!/bin/sh
# tessera-edge's commands that need no hub, end to end:
#   train-local  trains a subnet of the size --fraction gives on a CSV file inside --budget-mib, learns a
#                task a model that does not train cannot (validation accuracy), and refuses a budget it
#                cannot fit and options it cannot use, each with its reason and a non-zero exit; the
#                same for a convolutional network, at its exact budget and one byte short;
#   baseline     prints the process's peak memory with no model: more than nothing, and below a
#                train-local run's by at least the arena that run reports.
# Usage: cli_test.sh TESSERA_EDGE
set -eu
edge=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  for f in out err; do [ -s "$work/$f" ] && { echo "--- $f"; tail -n 20 "$work/$f"; }; done
  exit 1
}
# A number from the first line of file $1 that matches sed expression $2.
field() { sed -n "$2" "$1" | head -n 1; }
at_least() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$1" "$2"; }

"$edge" --help | grep -q "train-local" || fail "--help does not list train-local"
if "$edge" frobnicate 2>"$work/err"; then fail "ran an unknown command"; fi
grep -q "unknown command 'frobnicate'" "$work/err" || fail "no reason for an unknown command"

# Three classes in 8 features, each a noisy prototype (features f with f % 3 == class are 1), the
# label in the last column: a linear model separates them; chance is a third.
awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { c = i % 3; line = "";
       for (f = 0; f < 8; f++) line = line sprintf("%.4f,", (f % 3 == c ? 1 : 0) + 0.8 * (rand() - 0.5));
       print line c } }' > "$work/data.csv"
csv="--format csv --features $work/data.csv --label-column 8"

# 1. Trains half of every hidden layer of 8-32-3 (layer norm): 8-16-3, 227 parameters (W 16x8, b,
#    gain and shift 16 each, W 3x16, b 3), and learns the task.
# shellcheck disable=SC2086
"$edge" train-local --widths 8,32,3 --fraction 0.5 $csv --validation 0.2 --epochs 3 --batch 32 --lr 0.05 \
  --budget-mib 4 --progress-every 25 --seed 3 >"$work/out" 2>"$work/err" || fail "train-local exited non-zero"
cat "$work/out"
grep -q "^subnet 8-16-3 (227 parameters), batch 32" "$work/out" || fail "not the half-width subnet 8-16-3 of 227 parameters"
used=$(field "$work/out" 's/^memory: .* = \([0-9]*\) of \([0-9]*\) budget.*/\1/p')
budget=$(field "$work/out" 's/^memory: .* = \([0-9]*\) of \([0-9]*\) budget.*/\2/p')
[ "$budget" = $((4 * 1024 * 1024)) ] || fail "the budget is $budget bytes, not 4 MiB"
[ -n "$used" ] && [ "$used" -gt 0 ] && [ "$used" -le "$budget" ] || fail "it used $used bytes of a $budget-byte budget"
# 2400 training examples (80%), 3 epochs of 32: 225 steps.
grep -q "^trained 225 steps, 7200 examples" "$work/out" || fail "not 3 epochs of the 2400 training examples in 225 steps"
first=$(field "$work/out" 's/^step .* loss \([0-9.]*\) .*/\1/p')
last=$(sed -n 's/^step .* loss \([0-9.]*\) .*/\1/p' "$work/out" | tail -n 1)
at_least "$first" "$(python3 -c "print(2 * $last)")" || fail "the loss went from $first to $last: it did not halve"
accuracy=$(field "$work/out" 's/^validation: 600 examples, loss [0-9.]*, accuracy \([0-9.]*\)%/\1/p')
[ -n "$accuracy" ] || fail "no validation line for the 600 held-out examples"
at_least "$accuracy" 90 || fail "validation accuracy $accuracy%: the task is learnt to over 90%, chance is 33%"
peak=$(field "$work/out" 's/^peak resident memory \([0-9.]*\) MiB; anonymous now [0-9]* KiB$/\1/p')
[ -n "$peak" ] || fail "no peak memory line"

# 2. The same at --lr 0 trains nothing: its loss stays where it starts.
# shellcheck disable=SC2086
"$edge" train-local --widths 8,32,3 --fraction 0.5 $csv --validation 0.2 --epochs 3 --lr 0 --budget-mib 4 \
  --progress-every 25 --seed 3 >"$work/still" 2>"$work/err" || fail "train-local --lr 0 exited non-zero"
first0=$(field "$work/still" 's/^step .* loss \([0-9.]*\) .*/\1/p')
last0=$(sed -n 's/^step .* loss \([0-9.]*\) .*/\1/p' "$work/still" | tail -n 1)
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 0.1 * a else 1)" "$first0" "$last0" ||
  fail "at --lr 0 the loss went from $first0 to $last0"

# 2b. The same run with each step in parts of 4 examples: the same 225 steps of 32, in less memory, to
# the same loss (the parts' gradients summed: the same step up to the order of its sums).
# shellcheck disable=SC2086
"$edge" train-local --widths 8,32,3 --fraction 0.5 $csv --validation 0.2 --epochs 3 --batch 32 --micro-batch 4 --lr 0.05 \
  --budget-mib 4 --progress-every 25 --seed 3 >"$work/parts" 2>"$work/err" || fail "train-local --micro-batch 4 exited non-zero"
grep -q "^subnet 8-16-3 (227 parameters), batch 32 in parts of 4" "$work/parts" || fail "the parts are not announced"
grep -q "^trained 225 steps, 7200 examples" "$work/parts" || fail "--micro-batch changed the steps or the examples"
used_parts=$(field "$work/parts" 's/^memory: .* = \([0-9]*\) of \([0-9]*\) budget.*/\1/p')
[ -n "$used_parts" ] && [ "$used_parts" -lt "$used" ] || fail "in parts of 4 it used $used_parts bytes, not less than the $used of whole batches"
loss_whole=$(sed -n 's/^trained .* mean loss \([0-9.]*\)$/\1/p' "$work/out")
loss_parts=$(sed -n 's/^trained .* mean loss \([0-9.]*\)$/\1/p' "$work/parts")
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 1e-3 * a else 1)" "$loss_whole" "$loss_parts" ||
  fail "in parts the mean loss is $loss_parts, whole batches $loss_whole"

# 3. A budget the arena cannot fit, and options it cannot use: refused with the reason, exit non-zero.
# shellcheck disable=SC2086
if "$edge" train-local --widths 8,2048,3 $csv --budget-mib 0.05 >/dev/null 2>"$work/err"; then fail "trained over its budget"; fi
grep -q "budget" "$work/err" || fail "no reason for the budget refusal: $(cat "$work/err")"
# shellcheck disable=SC2086
if "$edge" train-local --widths 8,32,3 $csv --fraction 2 >/dev/null 2>"$work/err"; then fail "took --fraction 2"; fi
grep -q -- "--fraction: 2 is outside" "$work/err" || fail "no reason for --fraction 2: $(cat "$work/err")"
if "$edge" train-local --widths 8,32,3 --format csv >/dev/null 2>"$work/err"; then fail "ran without --features"; fi
grep -q -- "--features is required" "$work/err" || fail "no reason for a missing --features: $(cat "$work/err")"
if "$edge" train-local --widths 8 --features "$work/data.csv" --format csv >/dev/null 2>"$work/err"; then fail "took one width"; fi

# 4. A convolutional network from a configuration's model (--model takes one): the 8 features as a
#    sequence of 8 steps, conv1d 16 (kernel 3), pooling, dense 16; half of each is conv1d 8 and dense 8:
#    355 parameters (8 x 3 + 8, LayerNorm's 16; 8 x (4 positions x 8) + 8, 16; 3 x 8 + 3). It learns
#    the task; at a budget of exactly what it reported it trains, at one byte less it is refused,
#    naming both byte counts.
printf '%s' '{"model": {"input_shape": [8, 1], "outputs": 3, "layers": [{"conv1d": {"channels": 16, "kernel": 3}},
  {"max_pool": 2}, {"flatten": true}, {"dense": 16}]}}' >"$work/conv.json"
conv() {  # conv BUDGET_MIB [MORE OPTIONS]
  budget_mib=$1
  shift
  # shellcheck disable=SC2086
  "$edge" train-local --model "$work/conv.json" --fraction 0.5 $csv --validation 0.2 --batch 32 --lr 0.05 --seed 3 \
    --budget-mib "$budget_mib" "$@" >"$work/out" 2>"$work/err"
}
conv 4 --epochs 3 --progress-every 75 || fail "train-local of the convolutional network exited non-zero"
cat "$work/out"
grep -q '^subnet \[8,1\] conv1d 8 k3, max_pool 2, flatten, dense 8, 3 (355 parameters), batch 32' "$work/out" ||
  fail "not the half-channel subnet of 355 parameters"
accuracy=$(field "$work/out" 's/^validation: 600 examples, loss [0-9.]*, accuracy \([0-9.]*\)%/\1/p')
[ -n "$accuracy" ] && at_least "$accuracy" 90 || fail "the convolutional network's validation accuracy is '$accuracy'%, not over 90%"
need=$(field "$work/out" 's/^memory: arena [0-9]* bytes + stack [0-9]* bytes + data buffers [0-9]* bytes = \([0-9]*\) of.*/\1/p')
data=$(field "$work/out" 's/^memory: .* + data buffers \([0-9]*\) bytes = .*/\1/p')
arena=$((need - data))   # the arena and the stack its matrix products take: what the refusal names
exact=$(python3 -c "print(f'{$need / 1048576:.20f}')")      # n / 2^20 is exact in 20 decimals
short=$(python3 -c "print(f'{($need - 1) / 1048576:.20f}')")
conv "$exact" --steps 5 || fail "refused a budget of exactly the $need bytes it reported needing: $(cat "$work/err")"
if conv "$short" --steps 5; then fail "trained at one byte below the $need bytes it needs"; fi
grep -q "needs $arena bytes, the memory budget is $((arena - 1)) bytes" "$work/err" ||
  fail "the refusal one byte short does not name both byte counts: $(cat "$work/err")"

# 5. baseline: the process with no model. A wide model's train-local run peaks above it by at least
#    three quarters of the arena it reports (the arena's pages are written: initial weights, velocity).
"$edge" baseline >"$work/base" 2>"$work/err" || fail "baseline exited non-zero"
cat "$work/base"
base=$(field "$work/base" 's/^peak resident memory \([0-9.]*\) MiB; anonymous now [0-9]* KiB$/\1/p')
[ -n "$base" ] || fail "baseline printed no peak memory"
at_least "$base" 0.5 || fail "baseline's peak, $base MiB, is not a process's"
# shellcheck disable=SC2086
"$edge" train-local --widths 8,1536,1536,3 $csv --steps 2 --budget-mib 64 >"$work/out" 2>"$work/err" ||
  fail "the wide train-local run exited non-zero"
arena=$(field "$work/out" 's/^memory: arena \([0-9]*\) bytes.*/\1/p')
wide=$(field "$work/out" 's/^peak resident memory \([0-9.]*\) MiB; anonymous now [0-9]* KiB$/\1/p')
echo "baseline $base MiB; train-local with an arena of $arena bytes: $wide MiB"
at_least "$wide" "$(python3 -c "print($base + 0.75 * $arena / 1048576)")" ||
  fail "train-local peaked at $wide MiB, baseline at $base MiB: not the arena's $arena bytes apart"
echo "PASS: train-local trains its subnet within the budget and refuses what it cannot do; baseline is below it"
