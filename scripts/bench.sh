#!/usr/bin/env bash
# nodelet's benchmarks, side by side with the real kubelet v1.37.2 and the bare containerd
# measured in the same run. Prints the table and writes docs/benchmarks.md (date, machine,
# versions, this command).
#
#   scripts/bench.sh [PART...] [OPTIONS]
#
# PART: start reaction footprint api eviction (default: all, in that order; each can be re-run
# alone and replaces only its own block of docs/benchmarks.md).
#   start      pod start, 1 and 50 pods at once, against the kubelet and a minimal CRI client
#   reaction   exit → /pods (and the kubelet's), liveness failure → kill, readiness → /pods,
#              deletion → stop
#   footprint  idle, 110 pods with probes (2-minute window) and a restart with them, each on
#              nodelet and the kubelet; then 500 pause pods (heavy: ~15 min)
#   api        status writes and API requests in cluster mode, nodelet and the kubelet each
#              joined to the real control plane of scripts/k8s.sh (counted from its audit log)
#   eviction   the cgroup v2 VM (qemu, software emulation): 10 eviction cycles of nodelet in
#              one boot, then 10 of the kubelet joined to scripts/k8s.sh's control plane
# OPTIONS (defaults are the issue's minimums): --runs N (5), --exits N (200),
#   --reaction-runs N (20), --many-pods N (500), --window SECONDS (120), --settle SECONDS (30),
#   --eviction-runs N (10), --no-write (print only), --profile SECONDS (perf record nodelet
#   after each footprint window; reports in target/bench-profiles/).
#
# As root on Debian 12, after the README's set-up. It installs what is missing, builds the
# images and nodelet with the `dist` profile (fat LTO, one codegen unit: the packaged build,
# Cargo.toml), and starts a containerd of its own (socket, state, CNI bridge and subnet apart
# from the test one: NODELET_BENCH_* below, or the NODELET_TEST_* variables when they are set),
# which it stops again at the end if it started it; beside it, Debian 12's containerd 1.6 on a
# second instance (same names with -1.6), and the parts `start` and `reaction` run on both in
# the same run (the tables' runtime column; NODELET_BENCH_COMPAT=0: the current one only).
# The kubelet column: scripts/k8s.sh builds the kubelet v1.37.2 (or reuses its cache) and
# NODELET_BENCH_KUBELET names it; the kubelet runs on the current containerd only, never at
# the same time as nodelet. The api and eviction parts run against scripts/k8s.sh's control
# plane (port base NODELET_TEST_K8S_PORT_BASE, else NODELET_BENCH_K8S_PORT_BASE, 22443), which
# this script starts when it does not run and stops again at the end. Everything a part starts
# (agent processes, pods, the VM) is removed when the part ends or the script is interrupted.
# Not part of the test command: the numbers depend on the machine and its load.
# NODELET_BENCH_BIN: run that node_bench binary, built before, instead of building one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# The benchmark's own containerd instance unless the caller chose one.
export NODELET_TEST_VAR="${NODELET_TEST_VAR:-${NODELET_BENCH_VAR:-/var/lib/nodelet-bench}}"
export NODELET_TEST_RUN="${NODELET_TEST_RUN:-${NODELET_BENCH_RUN:-/run/nodelet-bench}}"
export NODELET_TEST_BRIDGE="${NODELET_TEST_BRIDGE:-${NODELET_BENCH_BRIDGE:-nodeletbench0}}"
export NODELET_TEST_SUBNET="${NODELET_TEST_SUBNET:-${NODELET_BENCH_SUBNET:-10.198.0.0/16}}"
export NODELET_TEST_CNI_NETWORK="${NODELET_TEST_CNI_NETWORK:-${NODELET_BENCH_CNI_NETWORK:-nodelet-bench}}"
# The control plane of the api part: apart from the test command's (20443), conformance.sh's
# (19443) and scripts/k8s.sh's default (16443).
export NODELET_TEST_K8S_PORT_BASE="${NODELET_TEST_K8S_PORT_BASE:-${NODELET_BENCH_K8S_PORT_BASE:-22443}}"
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
require_root

case " $* " in
*" -h "* | *" --help "*)
	sed -n '2,38s/^# \{0,1\}//p' "$0"
	exit 0
	;;
esac

STARTED_CONTAINERD=0
STARTED_COMPAT=0
STARTED_K8S=0
BENCH_PID=
# The second runtime of the run: Debian 12's containerd 1.6 on an instance of its own, for the
# parts measured on every runtime (start, reaction); NODELET_BENCH_COMPAT=0 leaves it out.
compat_instance=(
	NODELET_TEST_CONTAINERD=1.6 NODELET_TEST_VAR="$NODELET_TEST_VAR-1.6"
	NODELET_TEST_RUN="$NODELET_TEST_RUN-1.6" NODELET_TEST_BRIDGE="${NODELET_TEST_BRIDGE:0:12}c16"
	NODELET_TEST_SUBNET=10.199.0.0/16 NODELET_TEST_CNI_NETWORK="$NODELET_TEST_CNI_NETWORK-1.6"
)
cleanup() {
	local status=$?
	if [ -n "$BENCH_PID" ]; then
		# The benchmark runs in its own session: this reaches nodelet processes and the VM too.
		kill -TERM -- "-$BENCH_PID" 2>/dev/null || true
		sleep 1
		kill -KILL -- "-$BENCH_PID" 2>/dev/null || true
	fi
	if [ "$STARTED_CONTAINERD" = 1 ]; then
		scripts/containerd.sh stop >&2 || true
	fi
	if [ "$STARTED_COMPAT" = 1 ]; then
		env "${compat_instance[@]}" scripts/containerd.sh stop >&2 || true
	fi
	if [ "$STARTED_K8S" = 1 ]; then
		scripts/k8s.sh down >&2 || true
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$NODELET_TEST_VAR"
ctd_responsive || STARTED_CONTAINERD=1
scripts/install-deps.sh >&2
scripts/images.sh build >&2
# The real kubelet of the kubelet column (a cached build is reused).
scripts/k8s.sh build >&2
NODELET_BENCH_KUBELET="$(scripts/k8s.sh path)/kubelet"
export NODELET_BENCH_KUBELET
scripts/containerd.sh start >&2
scripts/images.sh import >&2
eval "$(scripts/containerd.sh env)"
NODELET_BENCH_RUNTIMES="=$NODELET_TEST_CRI"
if [ "${NODELET_BENCH_COMPAT:-1}" != 0 ]; then
	env "${compat_instance[@]}" bash -c '. scripts/lib.sh; ctd_responsive' || STARTED_COMPAT=1
	env "${compat_instance[@]}" scripts/containerd.sh start >&2
	env "${compat_instance[@]}" scripts/images.sh import >&2
	NODELET_BENCH_RUNTIMES="$NODELET_BENCH_RUNTIMES,=$(env "${compat_instance[@]}" scripts/containerd.sh env |
		sed -n 's/^export NODELET_TEST_CRI=//p')"
fi
export NODELET_BENCH_RUNTIMES

# Whether the arguments ask for PART: named, `all`, or no part named at all (every part).
wants_part() { # part args...
	local part="$1" a named=0
	shift
	for a in "$@"; do
		case "$a" in
		all) return 0 ;;
		start | reaction | footprint | api | eviction)
			named=1
			[ "$a" != "$part" ] || return 0
			;;
		esac
	done
	[ "$named" = 0 ]
}
# The control plane of the api part (its audit log counts each agent's requests) and of the
# eviction part's kubelet (which evicts only API pods; it joins from inside the VM).
if wants_part api "$@" || wants_part eviction "$@"; then
	scripts/k8s.sh status >/dev/null 2>&1 || STARTED_K8S=1
	scripts/k8s.sh up >&2
	eval "$(scripts/k8s.sh env)"
fi

echo "bench.sh: containerd $CTD_SOCK, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
export NODELET_BENCH_COMMAND="scripts/bench.sh${*:+ $*}"
if [ -n "${NODELET_BENCH_BIN:-}" ]; then
	# A node_bench binary built before (the path `cargo bench --profile dist --bench node_bench
	# --no-run` prints), run as it is: in a tree whose sources change while the benchmark runs,
	# cargo would build nodelet again (fat LTO: tens of minutes) before running it.
	[ -x "$NODELET_BENCH_BIN" ] || die "NODELET_BENCH_BIN=$NODELET_BENCH_BIN is no executable"
	setsid "$NODELET_BENCH_BIN" --bench "$@" &
else
	nice -n 5 cargo bench --locked --profile dist --bench node_bench --no-run >&2
	setsid cargo bench --locked --profile dist --bench node_bench -- "$@" &
fi
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=
