#!/usr/bin/env bash
# Runs inside the test VM as its scenario unit (systemd is PID 1; stdout is the serial console,
# which scripts/vm.sh streams to the host). Sets the node up as a user would: containerd as a
# systemd service with the run's cgroup driver, the project's images imported, nodelet installed
# from its Debian package (`dpkg -i`, built by scripts/vm.sh with scripts/package-deb.sh); then
# runs the run's command. Its last line is "NODELET-VM-RESULT: <exit status>"; before it, on failure,
# the journal of nodelet and containerd.
#
#   guest.sh RUN_DIR     RUN_DIR/env (settings), RUN_DIR/command (NUL-separated argv),
#                        RUN_DIR/command.env (NAME=VALUE lines) are written by scripts/vm.sh
set -euo pipefail
RUN_DIR="$1"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=/dev/null # written by scripts/vm.sh
source "$RUN_DIR/env"

say() { printf 'vm guest [%7.1fs]: %s\n' "$(cut -d' ' -f1 /proc/uptime)" "$*"; }

finish() {
	local status=$?
	if [ "$status" -ne 0 ]; then
		echo "==== NODELET-VM-JOURNAL-BEGIN journalctl -u nodelet -u containerd ===="
		journalctl --no-pager -o short-monotonic -u nodelet -u containerd 2>&1 || true
		echo "==== NODELET-VM-JOURNAL-END ===="
	fi
	echo "NODELET-VM-RESULT: $status"
	# The unit powers the VM off right after this script: let the serial line drain first.
	python3 -c 'import termios; termios.tcdrain(1)' 2>/dev/null || sleep 1
}
trap finish EXIT
# systemd stops the scenario with SIGTERM when it overruns its TimeoutStartSec.
trap 'say "stopped by SIGTERM (scenario timeout?)"; exit 143' TERM

# The node's versions, as the guest itself reports them (docs/testing.md quotes this line).
runc_version="$(runc --version 2>/dev/null | awk 'NR==1 {print $3}')"
containerd_version="$(containerd --version 2>/dev/null | awk '{print $3}')"
say "node: $(. /etc/os-release && echo "$PRETTY_NAME"); kernel $(uname -r); systemd $(systemctl --version | awk 'NR==1 {print $2}'); containerd ${containerd_version:-?}; runc ${runc_version:-?}"
say "systemd is PID 1 ($(cat /proc/1/comm))"
say "cgroup: $(stat -fc %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

# Everything of this run on one tmpfs: overlayfs snapshots cannot live on the overlay root, and
# the host's files below (a host test containerd's root, for one) must not show through.
VM_STATE=/var/lib/nodelet-vm
mkdir -p "$VM_STATE"
mount -t tmpfs -o mode=0755 tmpfs "$VM_STATE"
export NODELET_TEST_VAR="$VM_STATE/containerd-test" NODELET_TEST_RUN=/run/nodelet-test
export NODELET_TEST_IMAGES_TARGET="$NODELET_VM_IMAGES"
export NODELET_TEST_RESTRICT_OOM_SCORE_ADJ=false
# The guest's containerd is its root's own, on PATH (containerd.service runs /usr/bin/containerd):
# scripts/containerd.sh configures that one, whatever its version (config 3 for 2.x).
export NODELET_TEST_CONTAINERD=system
if [ "$NODELET_VM_DRIVER" = systemd ]; then
	export NODELET_TEST_SYSTEMD_CGROUP=true
else
	export NODELET_TEST_SYSTEMD_CGROUP=false
fi
# shellcheck source=scripts/lib.sh
source "$REPO_DIR/scripts/lib.sh"

modprobe -a overlay bridge veth

# `scripts/vm.sh --network host`: qemu's user-mode network, configured as its built-in DHCP
# server would (the guest 10.0.2.15/24, the gateway 10.0.2.2 forwarding to the host's loopback).
if [ "${NODELET_VM_NETWORK:-none}" = host ]; then
	modprobe virtio_net
	nic=
	for _ in $(seq 100); do
		for dev in /sys/class/net/*; do
			[ -e "$dev/device" ] && nic="${dev##*/}" && break 2
		done
		sleep 0.1
	done
	[ -n "$nic" ] || { echo "--network host: no network device appeared" >&2 && exit 1; }
	ip link set lo up
	ip link set "$nic" up
	ip addr add 10.0.2.15/24 dev "$nic"
	ip route add default via 10.0.2.2
	say "network: $nic 10.0.2.15/24, the host's loopback at 10.0.2.2"
fi

# The units were installed by the initramfs (scripts/vm/init) before systemd started.
say "containerd: containerd.service with $CTD_CONFIG (SystemdCgroup = $NODELET_TEST_SYSTEMD_CGROUP)"
case "$(systemctl show -p ExecStart --value containerd.service)" in
*"--config $CTD_CONFIG "*) ;;
*) echo "containerd.service does not run containerd with $CTD_CONFIG: scripts/vm/init and this script disagree" >&2 && exit 1 ;;
esac
"$REPO_DIR/scripts/containerd.sh" prepare
systemctl start containerd.service
# containerd 2.x reports ready (sd_notify) as it starts serving; under emulation on a loaded host
# one `ctr version` (images.sh's check, 5 s) did not get an answer right after (CI-like load,
# 2026-12-03). Give it a minute before importing.
waited=0
until ctd_responsive; do
	waited=$((waited + 1))
	[ "$waited" -lt 12 ] || { echo "containerd does not answer on $CTD_SOCK after systemctl start" >&2 && exit 1; }
	sleep 1
done
"$REPO_DIR/scripts/images.sh" import
say "images: $PAUSE_IMAGE $TESTBOX_IMAGE imported"

# nodelet as operators install it: its package (binary, unit, example configuration, logind
# drop-in). The scenario writes /etc/nodelet/config.yaml and starts the unit with systemctl.
dpkg -i "$NODELET_VM_DEB" >/dev/null || { echo "dpkg -i $NODELET_VM_DEB failed" >&2 && exit 1; }
say "nodelet: $(dpkg-query -W -f='${Package} ${Version} (${Status})' nodelet) from ${NODELET_VM_DEB##*/}; $(nodelet version 2>&1 | head -n1); $(systemctl show -p FragmentPath --value nodelet.service)"

eval "$("$REPO_DIR/scripts/containerd.sh" env)"
export NODELET_VM_GUEST=1 NODELET_VM_SCENARIO="$NODELET_VM_NAME" NODELET_VM_DRIVER NODELET_VM_STATE="$VM_STATE" NODELET_VM_NETWORK
export NODELET_VM_CONTAINERD_VERSION="$containerd_version" NODELET_VM_RUNC_VERSION="$runc_version" NODELET_VM_DEB
export HOME=/root
while IFS= read -r entry; do
	[ -n "$entry" ] && export "${entry?}"
done <"$RUN_DIR/command.env"
command=()
mapfile -d '' command <"$RUN_DIR/command"
cd "$REPO_DIR"
say "running: ${command[*]}"
if [ "$NODELET_VM_INTERACTIVE" = 1 ]; then
	"${command[@]}"
else
	"${command[@]}" </dev/null
fi
