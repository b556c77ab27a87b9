#!/usr/bin/env bash
# demo-check.sh runs the demo (hack/demo) with -check RUNS times in a row and
# reports how many runs printed the hub tables, with the error of each run
# that did not. After every run it checks that the run left nothing behind:
# no process and no file under the run's own TMPDIR (the demo, its clusters
# and the daemon put everything there); whatever it finds is reported, and
# stopped or removed.
#
# Usage: hack/demo-check.sh [-n RUNS] [-logs DIR] [-deadline DURATION] [DEMO FLAGS ...]
#   -n RUNS            how many runs (default 10)
#   -logs DIR          where the logs of failed runs go (default bin/demo-check)
#   -deadline DURATION hard limit per run for timeout(1) (default 10m); at the
#                      limit the demo gets SIGTERM and cleans up, and SIGKILL
#                      60s later
#   DEMO FLAGS         passed to the demo, e.g. -binary bin/endpoint-aggregator -timeout 1m
# `make demo-check RUNS=20` builds the binaries first and calls this.
# Exit status: 0 if every run printed the tables and left nothing behind.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=10
logs=bin/demo-check
deadline=10m
demo_flags=()
while (($#)); do
	case "$1" in
	-n) runs="$2"; shift 2 ;;
	-logs) logs="$2"; shift 2 ;;
	-deadline) deadline="$2"; shift 2 ;;
	-h | -help | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) demo_flags+=("$1"); shift ;;
	esac
done
if ! [[ "${runs}" =~ ^[1-9][0-9]*$ ]]; then
	echo "demo-check: -n wants a positive number, not '${runs}'" >&2
	exit 2
fi

mkdir -p "${logs}"
rm -f "${logs}"/run-*.log
demo_bin="${logs}/demo"
echo "demo-check: building hack/demo ..."
"${GO:-go}" build -o "${demo_bin}" ./hack/demo || exit 1

child=""
interrupted=""
# Ctrl-C or SIGTERM: let the running demo clean up (timeout(1) passes the
# signal on), then stop after this run.
on_signal() {
	interrupted=1
	if [[ -n "${child}" ]]; then kill -TERM "${child}" 2>/dev/null; fi
}
trap on_signal INT TERM

# leftovers DIR: stop the processes whose command line mentions DIR (those of
# this run only: DIR is the run's own TMPDIR) and remove DIR; print what was
# found. Returns 1 if anything was left behind.
leftovers() {
	local dir="$1" found=0 pids pid
	pids="$(pgrep -f -- "${dir}" || true)"
	if [[ -n "${pids}" ]]; then
		found=1
		for pid in ${pids}; do
			echo "    left running: pid ${pid}: $(tr '\0' ' ' </proc/"${pid}"/cmdline 2>/dev/null | cut -c1-160)"
			kill -TERM "${pid}" 2>/dev/null
		done
		sleep 5
		for pid in ${pids}; do kill -KILL "${pid}" 2>/dev/null; done
	fi
	if [[ -n "$(ls -A "${dir}" 2>/dev/null)" ]]; then
		found=1
		echo "    left behind in TMPDIR: $(ls -A "${dir}" | tr '\n' ' ')"
	fi
	rm -rf "${dir}"
	return "${found}"
}

ok=0 leaked=0 done_runs=0
failures=()
for ((i = 1; i <= runs; i++)); do
	log="${logs}/run-$(printf '%02d' "${i}").log"
	rundir="$(mktemp -d "${TMPDIR:-/tmp}/endpoint-aggregator-demo-check.XXXXXX")"
	start=${SECONDS}
	TMPDIR="${rundir}" timeout -k 60s "${deadline}" "${demo_bin}" -check "${demo_flags[@]}" >"${log}" 2>&1 </dev/null &
	child=$!
	# wait returns early when a trapped signal arrives; wait again until the
	# demo has cleaned up.
	while :; do
		wait "${child}"
		rc=$?
		kill -0 "${child}" 2>/dev/null || break
	done
	child=""
	secs=$((SECONDS - start))
	done_runs=${i}

	if [[ ${rc} -eq 0 ]] && grep -q 'ServiceImports (' "${log}"; then
		ok=$((ok + 1))
		echo "run ${i}/${runs}: printed the hub tables (${secs}s)"
	else
		line="$(grep -m1 '^demo -check: FAIL' "${log}" | sed 's/^demo -check: FAIL after [^:]*: //')"
		[[ -n "${line}" ]] || line="$(grep -m1 '^demo: ' "${log}" | sed 's/^demo: //')"
		case "${rc}" in
		124) line="killed by the ${deadline} deadline${line:+; }${line}" ;;
		137) line="SIGKILLed after the ${deadline} deadline${line:+; }${line}" ;;
		esac
		[[ -n "${line}" ]] || line="exit status ${rc}, no error line"
		failures+=("run ${i}: ${line} (log: ${log})")
		echo "run ${i}/${runs}: FAILED after ${secs}s: ${line}"
	fi
	if ! leftovers "${rundir}"; then
		leaked=$((leaked + 1))
		echo "run ${i}/${runs}: LEFT THINGS BEHIND (see above; now stopped and removed)"
	elif [[ ${rc} -eq 0 ]]; then
		rm -f "${log}"
	fi
	if [[ -n "${interrupted}" ]]; then
		echo "demo-check: interrupted after run ${i}"
		break
	fi
done
rm -f "${demo_bin}"

echo
echo "demo-check: ${ok}/${done_runs} runs printed the hub tables"
for f in "${failures[@]}"; do echo "  ${f}"; done
if ((leaked > 0)); then
	echo "demo-check: ${leaked}/${done_runs} runs left processes or files behind"
fi
if ((ok == done_runs && leaked == 0)) && [[ -z "${interrupted}" ]]; then
	exit 0
fi
exit 1
