#!/usr/bin/env bash
# The fuzz targets in fuzz/ (cargo fuzz, libFuzzer with AddressSanitizer), one per decoder of
# outside input: pod manifests (YAML and JSON), the KubeletConfiguration, quantities, durations,
# CRI log lines, the APIs' query strings, kubelet API requests; and a pod spec with extreme
# integers through its plan, actions, grace periods and probe timings (pod_plan).
#
#   fuzz.sh [SECONDS]          build every target (debug, quick to compile) and run each for
#                              SECONDS (default 5): the short run of the test command
#   fuzz.sh long SECONDS [TARGET...]
#                              an optimised build, each target (default: all) for SECONDS
#   fuzz.sh build              only the short run's build (scripts/test.sh starts it early)
#
# Each run starts from the committed seeds (fuzz/seeds/<target>) and keeps what it learns in
# fuzz/target/corpus/<target>. A crash, panic, timeout (10 s) or run over 2 GiB fails the script;
# libFuzzer saves the input under fuzz/artifacts/<target>/ and prints how to replay it. The last
# lines name each target's executions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

CARGO_FUZZ_VERSION=0.13.2
mode=short
seconds=5
if [ "${1:-}" = build ]; then
	mode=build
	shift
elif [ "${1:-}" = long ]; then
	mode=long
	seconds="${2:?fuzz.sh long SECONDS [TARGET...]}"
	shift 2
elif [ $# -gt 0 ]; then
	seconds="$1"
	shift
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
	echo "fuzz.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
	cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
# libFuzzer's instrumentation and the sanitizer need nightly rustc flags. The machine's nightly
# toolchain when rustup has one; else the stable compiler with its unstable flags unlocked.
if rustup run nightly rustc --version >/dev/null 2>&1; then
	fuzz=(cargo +nightly fuzz)
else
	echo "fuzz.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
	export RUSTC_BOOTSTRAP=1
	fuzz=(cargo fuzz)
fi

if [ "$mode" = long ]; then
	profile=(-O)
else
	profile=(--dev)
fi
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
	mapfile -t targets < <("${fuzz[@]}" list)
fi

"${fuzz[@]}" build "${profile[@]}"
if [ "$mode" = build ]; then
	exit 0
fi
summary=()
for target in "${targets[@]}"; do
	corpus="fuzz/target/corpus/$target"
	mkdir -p "$corpus"
	log="fuzz/target/$target.log"
	echo "fuzz.sh: $target for ${seconds}s" >&2
	status=0
	"${fuzz[@]}" run "${profile[@]}" "$target" "$corpus" "fuzz/seeds/$target" -- \
		-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		>"$log" 2>&1 || status=$?
	if [ "$status" -ne 0 ]; then
		tail -n 60 "$log" >&2
		echo "fuzz.sh: $target FAILED (exit $status); the input is under fuzz/artifacts/$target/" >&2
		exit 1
	fi
	runs="$(grep -ho 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')"
	summary+=("$(printf '%-16s %10s executions in %ss, corpus %s inputs' "$target" "$runs" "$seconds" "$(find "$corpus" -type f | wc -l)")")
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
