#!/usr/bin/env bash
# Runs every test of nodelet: unit tables, component tests (fake runtime, paused clock), CLI
# tests, testbox's tests, the integration tests against a real containerd with the project's
# own images, the VM tests, and a short run of every fuzz target (scripts/fuzz.sh). As root on
# Debian 12; installs and starts what it needs, and stops the project-local containerd again at
# the end (set NODELET_TEST_KEEP=1 to leave it running). Arguments are test-name filters for
# `cargo test`; with any, the fuzz run is left out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# containerd, runc, CNI plugins, protoc (for containerd-client's build), busybox, gcc.
scripts/install-deps.sh
eval "$(scripts/test-env.sh up)"
# The fuzz targets' build runs in the background (below); an early exit stops it. The trap
# runs under `set -e` too, so a command in it that may fail must not be the last of a list.
fuzz_build=
stop_fuzz_build() {
	if [ -n "$fuzz_build" ]; then
		pkill -TERM -P "$fuzz_build" 2>/dev/null || true
		kill "$fuzz_build" 2>/dev/null || true
	fi
}
if [ "${NODELET_TEST_KEEP:-0}" != 1 ]; then
	trap 'stop_fuzz_build; scripts/test-env.sh down' EXIT
else
	trap stop_fuzz_build EXIT
fi

cargo build --workspace --locked --all-targets
if [ $# -eq 0 ]; then
	# The fuzz targets' instrumented build shares nothing with the test build; at the lowest
	# priority it runs on the CPU the tests leave idle (they mostly wait on containers).
	mkdir -p target
	nice -n 19 scripts/fuzz.sh build >target/fuzz-build.log 2>&1 &
	fuzz_build=$!
fi
cargo test --workspace --locked -- "$@"
if [ -n "$fuzz_build" ]; then
	build=$fuzz_build
	fuzz_build=
	if ! wait "$build"; then
		tail -n 40 target/fuzz-build.log >&2
		echo "test.sh: the fuzz targets did not build (target/fuzz-build.log)" >&2
		exit 1
	fi
	scripts/fuzz.sh 5
fi
