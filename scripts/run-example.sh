#!/usr/bin/env bash
# Runs nodelet on this machine with config.example.yaml and the static pods in examples/.
#
#   scripts/run-example.sh          install what is missing (containerd, runc, CNI plugins, ...),
#                                   build nodelet and the local images, start a project-local
#                                   containerd, start nodelet in the background, and show the pods
#   scripts/run-example.sh stop     stop nodelet, remove its pods and stop that containerd
#
# As root on Debian 12. Everything lives under /var/lib/nodelet-demo and /run/nodelet-demo, with
# its own containerd socket and CNI bridge, so it never touches a system containerd. Edit or add
# manifests in examples/ while it runs: nodelet picks the change up within a second.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export NODELET_TEST_VAR=/var/lib/nodelet-demo
export NODELET_TEST_RUN=/run/nodelet-demo
export NODELET_TEST_BRIDGE=nodelet-demo0
export NODELET_TEST_SUBNET=10.90.0.0/16
export NODELET_TEST_CNI_NETWORK=nodelet-demo

STATE=/var/lib/nodelet-demo
PIDFILE=/run/nodelet-demo/nodelet.pid
LOG=$STATE/nodelet.log
ENDPOINT=unix:///run/nodelet-demo/containerd.sock
NODELET=target/release/nodelet

stop_nodelet() {
	if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
		kill "$(cat "$PIDFILE")"
		for _ in $(seq 50); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -f "$PIDFILE"
}

case "${1:-start}" in
stop)
	stop_nodelet
	# The pods outlive nodelet by design (KillMode=process); stopping the demo containerd
	# removes them and everything they used.
	scripts/test-env.sh down
	echo "stopped nodelet and the demo containerd"
	exit 0
	;;
start) ;;
*)
	sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac

[ "$(id -u)" = 0 ] || { echo "run-example.sh: must run as root" >&2; exit 1; }
scripts/install-deps.sh
echo "building nodelet (release)..."
cargo build --release --locked --bin nodelet
scripts/test-env.sh up >/dev/null
stop_nodelet
mkdir -p "$STATE" /run/nodelet-demo
CONFIG=config.example.yaml
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
	# nodelet refuses a cgroup v1 host, as the kubelet does since 1.35, unless the configuration
	# opts out; the example (meant for cgroup v2 nodes) does not, so the demo adds it here.
	CONFIG=$STATE/config.yaml
	{
		cat config.example.yaml
		printf '\n# Added by scripts/run-example.sh: this host runs cgroup v1.\nfailCgroupV1: false\n'
	} >"$CONFIG"
	echo "cgroup v1 host: running with $CONFIG (config.example.yaml + failCgroupV1: false)"
fi
"$NODELET" validate --config "$CONFIG"
"$NODELET" run --config "$CONFIG" \
	--container-runtime-endpoint "$ENDPOINT" \
	--static-pod-path "$PWD/examples" \
	--root-dir "$STATE/root" \
	--pod-logs-dir "$STATE/pods-logs" \
	>>"$LOG" 2>&1 &
echo $! >"$PIDFILE"
echo "nodelet started (pid $(cat "$PIDFILE"), log $LOG); waiting for the example pods..."
for _ in $(seq 60); do
	out="$("$NODELET" pods --config "$CONFIG" 2>/dev/null || true)"
	if [ "$(grep -c -E ' (Running|Completed) ' <<<"$out")" -ge 3 ]; then break; fi
	sleep 1
done
"$NODELET" pods --config "$CONFIG"
cat <<MSG

The pods run in containerd ($ENDPOINT). Try:
  $NODELET pods --config $CONFIG
  curl -s http://127.0.0.1:10255/pods | head
  ctr --address /run/nodelet-demo/containerd.sock -n k8s.io containers ls
Stop everything with: scripts/run-example.sh stop
MSG
