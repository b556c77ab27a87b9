#!/usr/bin/env bash
# gotest.sh runs `go test` with the given arguments, streams its output and
# keeps it in bin/test-logs/NAME.log. When the run fails it prints, last, what
# a reader of only the tail of the output needs: each failed test with the
# lines it logged, and any panic. Parallel tests interleave the daemon's own
# log lines with everything else, so the first failure is otherwise far above
# the end of the output.
#
# Usage: hack/gotest.sh NAME GO-TEST-ARGS...
# Exit status: that of go test.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

name="$1"
shift
mkdir -p bin/test-logs
log="bin/test-logs/${name}.log"

"${GO:-go}" test "$@" 2>&1 | tee "${log}"
rc="${PIPESTATUS[0]}"
if [[ "${rc}" != 0 ]]; then
	echo
	echo "== ${name}: what failed (the whole output is in ${log})"
	# A failed test's block: its "--- FAIL" line and the indented lines that
	# follow it. A panic: its first line and the next 40.
	awk '
		/^[[:space:]]*--- FAIL/ { block = 1; print; next }
		block && /^[[:space:]]/ { print; next }
		{ block = 0 }
		/^panic:/ { trace = 41 }
		trace > 0 { print; trace-- }
		/^(FAIL|ok)[[:space:]]/ { print }
	' "${log}" | head -n 400
fi
exit "${rc}"
