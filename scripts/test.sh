#!/usr/bin/env bash
# Runs go test with the given arguments, keeping its whole output in a log,
# and on failure repeats what failed at the end: each failing test, and a
# timed-out package's panic with the tests it was running (which otherwise
# sits thousands of goroutine lines above the end of the output).
set -uo pipefail
log=$(mktemp -t sluice-test.XXXXXX.log)
"${GO:-go}" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo
	echo "=== what failed (the whole output: $log)"
	if grep -q '^panic: test timed out' "$log"; then
		grep -E -A 6 '^panic: test timed out' "$log" | grep -E 'timed out|running tests|^\s+Test|^\s+Benchmark'
		echo "--- where the goroutines stood in test files:"
		grep -E '_test\.go:[0-9]+' "$log" | sed 's/ +0x[0-9a-f]*$//' | sort | uniq -c | sort -rn | head -30
	fi
	grep -E -B 2 -A 8 '^\s*--- FAIL' "$log" | head -150
	grep -E '^(FAIL|ok)\s' "$log" | grep '^FAIL'
fi
exit "$rc"
