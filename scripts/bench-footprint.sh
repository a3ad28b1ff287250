#!/usr/bin/env bash
# Measures nodelet's own footprint on this machine: the `dist` build (fat LTO, one codegen unit,
# as packaged; Cargo.toml) in standalone mode against the project-local containerd, first with
# no pods, then with N static pods (testbox serving HTTP with an HTTP readiness probe each, so
# the probe workers run too).
#
#   scripts/bench-footprint.sh [N] [SECONDS]     N pods (default 20), steady-state window (default 60)
#
# Prints: resident memory (VmRSS) idle and with N pods, the peak (VmHWM), the time from writing the
# N manifests to all pods Running and Ready, nodelet's CPU use over the steady-state window
# (from /proc/PID/stat utime+stime), and the cost of GET /stats/summary with the N pods: the
# first request (one verbose ContainerStatus per container), then the median wall time of 20
# more and nodelet's CPU time per request, and the median with ?only_cpu_and_memory=true. As root, after `scripts/test.sh` or `scripts/test-env.sh up`
# has installed containerd and imported the images. Not part of the test run: numbers depend on
# the machine and its load.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PODS=${1:-20}
WINDOW=${2:-60}
case "$PODS$WINDOW" in *[!0-9]*) echo "usage: $0 [N] [SECONDS]" >&2; exit 2 ;; esac

eval "$(scripts/test-env.sh up)"
cargo build --profile dist --locked --bin nodelet >&2
NODELET=$PWD/target/dist/nodelet

WORK=$(mktemp -d /tmp/nodelet-footprint-XXXXXX)
NODE=footprint-$$
PID=
cleanup() {
	rm -f "$WORK"/manifests/*.yaml
	if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
		# Give nodelet time to stop and remove the pods, then stop it.
		for _ in $(seq 120); do
			[ "$("$NODELET" pods --server "http://127.0.0.1:$PORT" 2>/dev/null | grep -c ' Running ' || true)" = 0 ] && break
			sleep 0.5
		done
		kill "$PID"
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/manifests"
cat >"$WORK/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: $NODELET_TEST_CRI
staticPodPath: $WORK/manifests
podLogsDir: $WORK/logs
containerLogLinksDir: $WORK/containers
rootDir: $WORK/root
nodeName: $NODE
address: 127.0.0.1
readOnlyPort: $PORT
healthzPort: 0
port: 0
# This machine is a cgroup v1 host, which nodelet (as the kubelet since 1.35) refuses by default.
failCgroupV1: false
YAML
"$NODELET" run --config "$WORK/config.yaml" 2>"$WORK/nodelet.log" &
PID=$!

kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$PID/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }

for _ in $(seq 100); do
	"$NODELET" pods --server "http://127.0.0.1:$PORT" >/dev/null 2>&1 && break
	sleep 0.1
done
sleep 5
IDLE=$(kib VmRSS)

START=$(date +%s.%N)
for i in $(seq "$PODS"); do
	cat >"$WORK/manifests/p$i.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: p$i
spec:
  containers:
  - name: web
    image: $NODELET_TEST_TESTBOX_IMAGE
    imagePullPolicy: Never
    args: [serve, --http, "8080"]
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 10
YAML
done
READY=
for _ in $(seq 1200); do
	if [ "$("$NODELET" pods --server "http://127.0.0.1:$PORT" 2>/dev/null | grep -c ' 1/1 *Running ' || true)" = "$PODS" ]; then
		READY=$(date +%s.%N)
		break
	fi
	sleep 0.1
done
[ -n "$READY" ] || { echo "not all $PODS pods became Ready; log: $WORK/nodelet.log" >&2; tail -20 "$WORK/nodelet.log" >&2; exit 1; }

sleep 5
TICKS0=$(cpu_ticks)
sleep "$WINDOW"
TICKS1=$(cpu_ticks)
HZ=$(getconf CLK_TCK)

echo "nodelet $(git describe --always --dirty) dist profile, $(nproc) cores, $(scripts/containerd.sh version)"
echo "RSS idle (no pods):              $(mib "$IDLE")"
echo "RSS with $PODS pods (steady):       $(mib "$(kib VmRSS)")"
echo "peak RSS (VmHWM):                $(mib "$(kib VmHWM)")"
awk -v a="$START" -v b="$READY" -v n="$PODS" 'BEGIN { printf "manifests written -> %d pods Ready: %.2f s\n", n, b - a }'
awk -v t=$((TICKS1 - TICKS0)) -v hz="$HZ" -v w="$WINDOW" 'BEGIN { printf "CPU over %d s steady state:     %.2f%% of one core\n", w, 100 * t / hz / w }'

# /stats/summary with the N pods.
SUMMARY=http://127.0.0.1:$PORT/stats/summary
FIRST=$(curl -sf -o "$WORK/summary.json" -w '%{time_total}' "$SUMMARY")
BYTES=$(wc -c <"$WORK/summary.json")
LISTED=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["pods"]))' "$WORK/summary.json")
sleep 1
TICKS0=$(cpu_ticks)
for _ in $(seq 20); do
	curl -sf -o /dev/null -w '%{time_total}\n' "$SUMMARY"
done >"$WORK/summary-times"
TICKS1=$(cpu_ticks)
MEDIAN=$(sort -n "$WORK/summary-times" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
awk -v f="$FIRST" -v m="$MEDIAN" -v n="$LISTED" -v b="$BYTES" 'BEGIN { printf "/stats/summary (%d pods, %d bytes): first %.1f ms, then median %.1f ms\n", n, b, f * 1000, m * 1000 }'
awk -v t=$((TICKS1 - TICKS0)) -v hz="$HZ" 'BEGIN { printf "nodelet CPU per /stats/summary:  %.1f ms\n", 1000 * t / hz / 20 }'
# ... and with only CPU and memory (no ImageFsInfo, ListContainerStats, statfs or directory walks).
for _ in $(seq 20); do
	curl -sf -o /dev/null -w '%{time_total}\n' "$SUMMARY?only_cpu_and_memory=true"
done >"$WORK/summary-small-times"
SMALL=$(sort -n "$WORK/summary-small-times" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
awk -v m="$SMALL" 'BEGIN { printf "/stats/summary?only_cpu_and_memory=true: median %.1f ms\n", m * 1000 }'
