#!/usr/bin/env bash
# Checks formatting and lints (cargo fmt --check, cargo clippy -D warnings; the fuzz crate's in
# the faults lane), then runs every test of nodelet: unit tables, component tests (fake runtime,
# paused clock), CLI tests, testbox's and the fixture's tests, the integration tests against a
# real containerd with the project's own images, the fault tests, the VM tests, and a short run
# of every fuzz target (scripts/fuzz.sh). As root on Debian 12; installs and starts what it
# needs, and stops the project-local containerds again at the end (set NODELET_TEST_KEEP=1 to
# leave them running).
#
# The test binaries run in three lanes at once, each one binary after another (within a binary
# its tests run in parallel, as under `cargo test`): the VM scenarios (each boots its own qemu
# guest); the fault tests (they stop their containerd, so they get an instance of their own),
# then the containerd 1.6 compatibility subset (lifecycle, probes, security context, pod resize, cluster mode on
# Debian 12's containerd 1.6, an instance of its own), then a subset of Kubernetes' own node
# conformance tests against nodelet (scripts/conformance.sh subset, an instance of its own), then
# the fuzz targets' build and short run; and all the rest against the shared test containerd. The integration tests run on
# containerd 2.x from Debian's newest suite (scripts/containerd-current.sh) with Debian 12's runc.
# The exact containerd and runc of each lane are printed at the start and with every binary's
# wall time at the end; the lanes' output is in target/test-lanes/.
#
# Arguments are test-name filters: then `cargo test --workspace` runs with them, one binary after
# another against the shared containerd, and the fuzz run is left out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
repo="$PWD"
# A whole run compiles everything once: the incremental cache would only take disk (4.9 of the
# 14 GB a run left in target/ with it).
export CARGO_INCREMENTAL=0

# What the run has of the disk: a full run writes many GB (docs/testing.md, "Disk"), and a
# machine short of it fails in the build with "No space left on device"; this says so first.
disk_report() { # WHEN
	echo "test.sh: disk $1: $(df -h --output=avail "$repo" | tail -n 1 | tr -d ' ') free;" \
		"target $(du -sh target 2>/dev/null | cut -f1)," \
		"Go's caches $(du -sch "$(go env GOCACHE 2>/dev/null || echo /nonexistent)" \
			"$(go env GOMODCACHE 2>/dev/null || echo /nonexistent)" 2>/dev/null | tail -n 1 | cut -f1)," \
		"${NODELET_TEST_K8S_CACHE:-/var/cache/nodelet-k8s} $(du -sh "${NODELET_TEST_K8S_CACHE:-/var/cache/nodelet-k8s}" 2>/dev/null | cut -f1)"
}
disk_report "at the start"

# containerd, runc, CNI plugins, protoc (for containerd-client's build), busybox, gcc, qemu, ...
scripts/install-deps.sh
eval "$(scripts/test-env.sh up)"
main_runtime="$(scripts/containerd.sh version)"
echo "test.sh: integration tests on $main_runtime"

if [ $# -gt 0 ]; then
	[ "${NODELET_TEST_KEEP:-0}" = 1 ] || trap 'scripts/k8s.sh down || true; scripts/test-env.sh down' EXIT
	# The real control plane (built once into its cache, tests/real_cluster.rs).
	scripts/k8s.sh up >&2
	eval "$(scripts/k8s.sh env)"
	cargo test --workspace --locked -- "$@"
	exit
fi

# Formatting and lints first: they fail in seconds to minutes, the lanes in tens of minutes.
# The fuzz crate (a workspace of its own, fuzz/) is linted in the faults lane, after its run.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# The fault tests' containerd: its own root, state, socket, CNI network and bridge (scripts/lib.sh).
faults_instance=(
	NODELET_TEST_VAR=/var/lib/nodelet-test-faults NODELET_TEST_RUN=/run/nodelet-test-faults
	NODELET_TEST_BRIDGE=nodelet1 NODELET_TEST_SUBNET=10.90.0.0/16
	NODELET_TEST_CNI_NETWORK=nodelet-faults
)
faults_env="$(env "${faults_instance[@]}" scripts/test-env.sh up --no-registry)"
# The containerd 1.6 compatibility subset's: Debian 12's containerd, its own instance too.
ctd16_instance=(
	NODELET_TEST_CONTAINERD=1.6
	NODELET_TEST_VAR=/var/lib/nodelet-test-ctd16 NODELET_TEST_RUN=/run/nodelet-test-ctd16
	NODELET_TEST_BRIDGE=nodelet2 NODELET_TEST_SUBNET=10.92.0.0/16
	NODELET_TEST_CNI_NETWORK=nodelet-ctd16
)
ctd16_env="$(env "${ctd16_instance[@]}" scripts/test-env.sh up --no-registry)"
faults_runtime="$(env "${faults_instance[@]}" scripts/containerd.sh version)"
ctd16_runtime="$(env "${ctd16_instance[@]}" scripts/containerd.sh version)"
runtimes() {
	echo "test.sh: the runtime of each lane:"
	echo "  main    $main_runtime"
	echo "  faults  $faults_runtime"
	echo "  ctd16   $ctd16_runtime"
	echo "  vm      the guest's own containerd and runc (printed in the vm lane's log)"
}
runtimes

lanes_dir=target/test-lanes
rm -rf "$lanes_dir"
mkdir -p "$lanes_dir"
# The background lanes; an early exit stops them. The trap runs
# under `set -e` too, so a command in it that may fail must not be the last of a list.
background=()
kill_tree() { # PID: the process and everything below it, children first
	local child
	for child in $(pgrep -P "$1" 2>/dev/null || true); do
		kill_tree "$child"
	done
	kill -TERM "$1" 2>/dev/null || true
}
stop_background() {
	local pid
	for pid in "${background[@]}"; do
		kill_tree "$pid"
	done
}
# Kubernetes' own conformance subset's instance (scripts/conformance.sh: its own containerd,
# control plane and registry), named in full so that nothing of the main instance leaks in.
# Not the paths and ports of a whole run (scripts/conformance.sh run); the two agents share the
# host's /var/log/pods, so the subset waits for a whole run that goes on (conformance.sh's lock).
conformance_instance=(
	NODELET_TEST_VAR=/var/lib/nodelet-test-conformance NODELET_TEST_RUN=/run/nodelet-test-conformance
	NODELET_TEST_BRIDGE=nodeletc1 NODELET_TEST_SUBNET=10.95.0.0/16
	NODELET_TEST_CNI_NETWORK=nodelet-test-conformance NODELET_TEST_REGISTRY_PORT=5452
	NODELET_TEST_K8S_PORT_BASE=20443
)
conformance() { env -u NODELET_TEST_KUBECONFIG -u NODELET_TEST_K8S_SERVER "${conformance_instance[@]}" scripts/conformance.sh "$@"; }
down() {
	conformance down >/dev/null 2>&1 || true
	scripts/k8s.sh down || true
	scripts/test-env.sh down || true
	env "${faults_instance[@]}" scripts/test-env.sh down || true
	env "${ctd16_instance[@]}" scripts/test-env.sh down || true
}
if [ "${NODELET_TEST_KEEP:-0}" != 1 ]; then
	trap 'stop_background; down' EXIT
else
	trap stop_background EXIT
fi
# Interrupted (Ctrl-C, a CI timeout): the EXIT trap stops the lanes at once, since the script
# only ever `wait`s for them (a signal interrupts `wait`, not a foreground command).
trap 'exit 130' INT
trap 'exit 143' TERM

# The VM's node root (scripts/vm/root.sh: cached in /var/cache/nodelet-vm; a first build takes
# about two minutes of mmdebstrap), built beside the cargo build; the vm lane's first scenario
# waits on its lock, and builds it itself (failing loudly) if this did not.
scripts/vm/root.sh path >"$lanes_dir/vm-root.log" 2>&1 &
background+=($!)
# The real Kubernetes v1.37.2 control plane (scripts/k8s.sh: cached in /var/cache/nodelet-k8s; a
# first build takes 10-12 minutes at the lowest priority), built beside the cargo build and
# started before the lanes.
scripts/k8s.sh build >"$lanes_dir/k8s-build.log" 2>&1 &
k8s_build=$!
background+=("$k8s_build")
# Kubernetes' node e2e binary, ginkgo and the stand-in images' programs (scripts/conformance.sh
# build: the same cache; niced), for the conformance subset in the faults lane.
# Once both are built their binaries are in that cache, and Go's build cache (5-6 GB of
# compiled packages) only takes disk for the rest of the run: it is emptied.
(
	scripts/k8s.sh build >/dev/null 2>&1
	conformance build && go clean -cache
) >"$lanes_dir/conformance-build.log" 2>&1 &
background+=($!)

cargo build --workspace --locked --all-targets || {
	disk_report "after the failed build"
	exit 1
}
disk_report "after the build"
if ! wait "$k8s_build"; then
	tail -n 40 "$lanes_dir/k8s-build.log" >&2
	echo "test.sh: building the control plane failed (log: $lanes_dir/k8s-build.log)" >&2
	exit 1
fi
scripts/k8s.sh up >&2
eval "$(scripts/k8s.sh env)"
cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
	python3 scripts/test-binaries.py "$repo" >"$lanes_dir/binaries"

# run_lane LANE [RUNTIME]: the lane's binaries one after another, each from its package's
# directory as `cargo test` runs it; a failed binary does not stop the lane. Appends "lane name
# seconds status runtime" to $lanes_dir/times (RUNTIME: containerd's version, e.g. 2.1.9; "-"
# when the lane has none of its own) and reports each end on the terminal (fd 3).
exec 3>&1
run_lane() {
	local lane="$1" runtime="${2:--}" failed=0 l dir name exe start status
	while read -r l dir name exe; do
		[ "$l" = "$lane" ] || continue
		echo "     Running $name ($exe)"
		start=$SECONDS
		status=0
		(cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" </dev/null) || status=$?
		echo "$lane $name $((SECONDS - start)) $status containerd-$runtime" >>"$lanes_dir/times"
		if [ "$status" -eq 0 ]; then
			echo "test.sh: [$lane] $name ok in $((SECONDS - start)) s (containerd $runtime)" >&3
		else
			echo "test.sh: [$lane] $name FAILED (exit $status) after $((SECONDS - start)) s (containerd $runtime)" >&3
			failed=1
		fi
	done <"$lanes_dir/binaries"
	return "$failed"
}

run_lane vm guest >"$lanes_dir/vm.log" 2>&1 &
vm_lane=$!
background+=("$vm_lane")
# The fuzz targets' instrumented build shares nothing with the test build, so it comes after the
# fault tests and the containerd 1.6 subset, and runs beside the other two lanes.
(
	failed=0
	(
		eval "$faults_env"
		export "${faults_instance[@]}"
		run_lane faults "$NODELET_TEST_CONTAINERD_VERSION"
	) || failed=1
	(
		eval "$ctd16_env"
		export "${ctd16_instance[@]}"
		run_lane ctd16 "$NODELET_TEST_CONTAINERD_VERSION"
	) || failed=1
	# Kubernetes' own tests: the conformance subset against nodelet on an instance of its own
	# (its build waits for the one started beside the cargo build).
	start=$SECONDS
	echo "     Running scripts/conformance.sh subset (output: target/conformance/subset)"
	if conformance subset; then
		echo "faults conformance-subset $((SECONDS - start)) 0 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] Kubernetes conformance subset ok in $((SECONDS - start)) s" >&3
	else
		echo "faults conformance-subset $((SECONDS - start)) 1 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] Kubernetes conformance subset FAILED after $((SECONDS - start)) s" >&3
		failed=1
	fi
	conformance down >/dev/null 2>&1 || true
	start=$SECONDS
	echo "     Running scripts/fuzz.sh 5 (output: $lanes_dir/fuzz.log)"
	# The fuzz build and the fuzz crate's lints are compile jobs that take both cores for
	# minutes; niced, they leave the emulated VMs beside them the CPU they need (CI, 2026-12-03:
	# three VM scenarios timed out on a host that ran everything twice as slowly as usual).
	if nice -n 15 scripts/fuzz.sh 5 >"$lanes_dir/fuzz.log" 2>&1; then
		tail -n 12 "$lanes_dir/fuzz.log"
		echo "faults fuzz-targets $((SECONDS - start)) 0 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] fuzz targets (build, 5 s each) ok in $((SECONDS - start)) s" >&3
	else
		tail -n 80 "$lanes_dir/fuzz.log"
		echo "faults fuzz-targets $((SECONDS - start)) 1 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] fuzz targets FAILED after $((SECONDS - start)) s" >&3
		failed=1
	fi
	# The fuzz crate's lints: a check build of its own (fuzz/target/debug), on stable.
	start=$SECONDS
	echo "     Running cargo fmt and cargo clippy on fuzz/"
	if cargo fmt --manifest-path fuzz/Cargo.toml --all -- --check &&
		nice -n 15 cargo clippy --manifest-path fuzz/Cargo.toml --all-targets --locked -- -D warnings; then
		echo "faults fuzz-lints $((SECONDS - start)) 0 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] fuzz crate fmt and clippy ok in $((SECONDS - start)) s" >&3
	else
		echo "faults fuzz-lints $((SECONDS - start)) 1 -" >>"$lanes_dir/times"
		echo "test.sh: [faults] fuzz crate fmt or clippy FAILED after $((SECONDS - start)) s" >&3
		failed=1
	fi
	exit "$failed"
) >"$lanes_dir/faults.log" 2>&1 &
faults_lane=$!
background+=("$faults_lane")

# The main lane's output goes to the terminal as it comes.
(
	failed=0
	if ! cargo test --workspace --locked --doc; then
		echo "main doc-tests 0 1 -" >>"$lanes_dir/times"
		failed=1
	fi
	run_lane main "$NODELET_TEST_CONTAINERD_VERSION" || failed=1
	exit "$failed"
) &
main_lane=$!
background+=("$main_lane")

lane_status=0
wait "$main_lane" || lane_status=1
for lane in vm faults; do
	pid=$vm_lane
	[ "$lane" = faults ] && pid=$faults_lane
	status=0
	wait "$pid" || status=$?
	echo
	echo "==================== lane $lane (target/test-lanes/$lane.log) ===================="
	cat "$lanes_dir/$lane.log"
	[ "$status" -eq 0 ] || lane_status=1
done

background=()

echo
echo "test.sh: wall time of each test binary (seconds; lane, name, exit status, the runtime it ran on):"
sort -k3,3nr "$lanes_dir/times" |
	awk '{printf "  %-7s %-45s %5s s  %-6s  %s\n", $1, $2, $3, ($4 == 0 ? "ok" : "FAILED"), $5}'
runtimes
disk_report "at the end"
if [ "$lane_status" -ne 0 ]; then
	echo "test.sh: FAILED:" >&2
	awk '$4 != 0 {print "  " $2 " (lane " $1 ")"}' "$lanes_dir/times" >&2
	exit 1
fi
echo "test.sh: all tests passed"
