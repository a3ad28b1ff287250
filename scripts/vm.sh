#!/usr/bin/env bash
# The cgroup v2 test VM: a current Debian node (a root of Debian's newest suite built by
# scripts/vm/root.sh: its systemd, containerd, runc and kernel) booted by qemu under software
# emulation (-accel tcg) with the root's own kernel and modules, the root as a read-only 9p
# mount under a tmpfs overlay, and systemd as PID 1. The repository (and the target directory)
# are visible in the guest at the same paths (9p, under overlays of their own). In the guest,
# containerd runs as a systemd service, the project's images are imported, nodelet is installed
# from its Debian package (scripts/package-deb.sh, `dpkg -i`), and then COMMAND runs as the
# scenario.
#
#   vm.sh run [OPTIONS] -- COMMAND [ARG...]
#                      boot, run COMMAND in the guest (as root, in the repository), stream the
#                      guest's console to stdout, exit with COMMAND's exit status; on failure the
#                      guest prints `journalctl -u nodelet -u containerd` first
#   vm.sh shell [OPTIONS]
#                      the same guest, with an interactive shell on the console instead
#                      (leave it with `exit`; Ctrl-A x kills qemu)
#   vm.sh initramfs    build the root and the initramfs (when their inputs changed), print its path
#   vm.sh check        exit 0 when qemu, mmdebstrap (or a built root) and the initramfs tools are
#                      there, else name what is missing
#
# OPTIONS
#   --name NAME        run directory <vm dir>/runs/NAME (settings, console.log); default "manual"
#   --driver D         systemd (containerd SystemdCgroup = true) or cgroupfs; default systemd
#   --nodelet PATH     the nodelet binary to package and install; default <target>/debug/nodelet
#   --env NAME=VALUE   extra environment for COMMAND (repeatable)
#   --timeout SECONDS  kill the VM after this long; the scenario gets 60 s less; default 900
#   --memory MIB       guest memory; default 2048
#   --cpus N           guest CPUs; default 2
#   --network MODE     none (default: the guest has no network device) or host: qemu's user-mode
#                      network (slirp), the guest at 10.0.2.15/24 reaching the host's loopback
#                      at 10.0.2.2 (a control plane on the host, for a joined agent in the guest)
#
# Paths: <target> is $CARGO_TARGET_DIR or target/; <vm dir> is $NODELET_VM_DIR or <target>/vm.
# The node root: scripts/vm/root.sh (cached in /var/cache/nodelet-vm, or $NODELET_VM_CACHE); its
# kernel is its newest /boot/vmlinuz-V with /lib/modules/V.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-$REPO_DIR/target}")"
VM_DIR="$(realpath -m "${NODELET_VM_DIR:-$TARGET_DIR/vm}")"
QEMU=qemu-system-x86_64
INIT_SCRIPT="$REPO_DIR/scripts/vm/init"
ROOT_SCRIPT="$REPO_DIR/scripts/vm/root.sh"
GUEST_SCRIPT="$REPO_DIR/scripts/vm/guest.sh"
# What the initramfs must load to reach the 9p root and build the overlay; their dependencies
# come from modules.dep.
INITRAMFS_MODULES=(virtio_pci 9pnet_virtio 9p overlay)
RESULT_MARKER="NODELET-VM-RESULT:"

usage() {
	sed -n '2,36s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

# The node root (built by scripts/vm/root.sh unless cached); sets NODE_ROOT.
node_root() {
	NODE_ROOT="$("$ROOT_SCRIPT" path)" || die "cannot build the VM's node root (scripts/vm/root.sh)"
	[ -x "$NODE_ROOT/lib/systemd/systemd" ] || die "$NODE_ROOT has no /lib/systemd/systemd"
}

# The kernel version of the node root to boot: its newest with both an image and modules.
kernel_version() {
	local image version
	for image in "$NODE_ROOT"/boot/vmlinuz-*; do
		[ -e "$image" ] || continue
		version="${image#"$NODE_ROOT"/boot/vmlinuz-}"
		[ -f "$NODE_ROOT/lib/modules/$version/modules.dep" ] && echo "$version"
	done | sort -V | tail -n1
}

# Everything the VM needs on the host; prints what is missing and fails.
check_host() {
	local missing=()
	command -v "$QEMU" >/dev/null || missing+=("$QEMU (Debian package qemu-system-x86)")
	if [ ! -f "$("$ROOT_SCRIPT" cache-dir)/root-$("$ROOT_SCRIPT" key)/.nodelet-vm-root" ]; then
		command -v mmdebstrap >/dev/null || missing+=("mmdebstrap (Debian package mmdebstrap), to build the node root")
	fi
	command -v dpkg-deb >/dev/null || missing+=("dpkg-deb (Debian package dpkg), for nodelet's package")
	command -v objcopy >/dev/null || missing+=("objcopy (Debian package binutils), for nodelet's package")
	[ -x "$GUEST_SCRIPT" ] || missing+=("$GUEST_SCRIPT (executable)")
	command -v cpio >/dev/null || missing+=("cpio")
	busybox_static >/dev/null || missing+=("a static busybox (Debian package busybox-static)")
	if [ "${#missing[@]}" -gt 0 ]; then
		printf 'vm.sh: missing: %s\n' "${missing[@]}" >&2
		echo "vm.sh: run scripts/install-deps.sh (as root) to install them" >&2
		return 1
	fi
}

# Module files (relative to /lib/modules/V) in load order: each module's dependencies (the
# last one in modules.dep is loaded first, as modprobe does), then the module; built-in ones
# are left out.
module_load_order() {
	local version="$1" dir="$NODE_ROOT/lib/modules/$1" name line deps seen=" " i
	for name in "${INITRAMFS_MODULES[@]}"; do
		if grep -qE "/$name\.ko(\.[a-z]+)?$" "$dir/modules.builtin" 2>/dev/null; then
			continue
		fi
		line="$(grep -E "/$name\.ko(\.[a-z]+)?:" "$dir/modules.dep" | head -n1)" ||
			die "module $name is not in $dir/modules.dep"
		read -r -a deps <<<"${line#*:}"
		for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
			[[ "$seen" == *" ${deps[i]} "* ]] || { echo "${deps[i]}" && seen+="${deps[i]} "; }
		done
		[[ "$seen" == *" ${line%%:*} "* ]] || { echo "${line%%:*}" && seen+="${line%%:*} "; }
	done
}

# Builds <vm dir>/initramfs-V.cpio.gz (the node root's kernel V and its modules) unless one built
# from the same inputs is there; prints its path. Concurrent runs wait for each other (one lock).
build_initramfs() {
	local version="$1" out="$VM_DIR/initramfs-$1.cpio.gz" busybox modules=() module stamp
	local moddir="$NODE_ROOT/lib/modules/$1"
	busybox="$(busybox_static)" || die "no static busybox (run scripts/install-deps.sh)"
	mapfile -t modules < <(module_load_order "$version")
	stamp="$(
		{
			sha256sum "$INIT_SCRIPT" "$busybox"
			for module in "${modules[@]}"; do sha256sum "$moddir/$module"; done
		} | sha256sum | cut -d' ' -f1
	)"
	mkdir -p "$VM_DIR"
	exec 8>"$VM_DIR/initramfs.lock"
	flock 8
	if [ -f "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null || true)" = "$stamp" ]; then
		exec 8>&-
		echo "$out"
		return 0
	fi
	local stage="$VM_DIR/initramfs-stage.$$"
	rm -rf "$stage"
	mkdir -p "$stage"/{bin,dev,proc,sys,modules}
	cp "$busybox" "$stage/bin/busybox"
	install -m 0755 "$INIT_SCRIPT" "$stage/init"
	# The kernel opens /dev/console for init before anything is mounted.
	mknod -m 0600 "$stage/dev/console" c 5 1
	: >"$stage/modules/order"
	for module in "${modules[@]}"; do
		local file="${module##*/}" src="$moddir/$module"
		case "$file" in
		*.ko.xz) xz -dc "$src" >"$stage/modules/${file%.xz}" && file="${file%.xz}" ;;
		*.ko.zst) zstd -qdc "$src" >"$stage/modules/${file%.zst}" && file="${file%.zst}" ;;
		*.ko.gz) gzip -dc "$src" >"$stage/modules/${file%.gz}" && file="${file%.gz}" ;;
		*) cp "$src" "$stage/modules/$file" ;;
		esac
		echo "$file" >>"$stage/modules/order"
	done
	(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 --reproducible) |
		gzip -n >"$out.tmp.$$"
	mv -f "$out.tmp.$$" "$out"
	echo "$stamp" >"$out.stamp"
	rm -rf "$stage"
	exec 8>&-
	echo "$out"
}

# Options shared by run and shell; sets NAME DRIVER NODELET TIMEOUT MEMORY CPUS EXTRA_ENV COMMAND.
parse_options() {
	NAME=manual DRIVER=systemd NODELET="$TARGET_DIR/debug/nodelet" TIMEOUT=900 MEMORY=2048 CPUS=2
	EXTRA_ENV=() COMMAND=() NETWORK=none
	while [ $# -gt 0 ]; do
		case "$1" in
		--name) NAME="$2" && shift 2 ;;
		--driver) DRIVER="$2" && shift 2 ;;
		--nodelet) NODELET="$2" && shift 2 ;;
		--env) EXTRA_ENV+=("$2") && shift 2 ;;
		--timeout) TIMEOUT="$2" && shift 2 ;;
		--memory) MEMORY="$2" && shift 2 ;;
		--cpus) CPUS="$2" && shift 2 ;;
		--network) NETWORK="$2" && shift 2 ;;
		--) shift && COMMAND=("$@") && break ;;
		*) usage ;;
		esac
	done
	case "$DRIVER" in systemd | cgroupfs) ;; *) die "--driver $DRIVER: want systemd or cgroupfs" ;; esac
	case "$NETWORK" in none | host) ;; *) die "--network $NETWORK: want none or host" ;; esac
	[[ "$NAME" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--name $NAME: letters, digits, _ . - only"
	if ! [[ "$TIMEOUT" =~ ^[0-9]+$ ]] || [ "$TIMEOUT" -le 120 ]; then
		die "--timeout $TIMEOUT: want seconds, more than 120"
	fi
	local entry
	for entry in "${EXTRA_ENV[@]}"; do
		[[ "$entry" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env $entry: want NAME=VALUE"
	done
	NODELET="$(realpath -m "$NODELET")"
	[ -x "$NODELET" ] || die "$NODELET is not an executable (cargo build, or pass --nodelet)"
	local image
	for image in pause testbox; do
		[ -f "$IMAGES_OUT_DIR/$image.tar" ] || die "$IMAGES_OUT_DIR/$image.tar is missing (run scripts/images.sh build)"
	done
}

# Writes the run directory the guest reads through 9p.
write_run_dir() { # interactive
	RUN_DIR="$VM_DIR/runs/$NAME"
	mkdir -p "$RUN_DIR"
	# nodelet goes in as operators install it: its Debian package, built here from the binary
	# under test (uncompressed: it is read once, over 9p).
	rm -rf "$RUN_DIR/deb"
	DEB="$("$REPO_DIR/scripts/package-deb.sh" --binary "$NODELET" --out "$RUN_DIR/deb" --compression none)" ||
		die "building nodelet's Debian package (scripts/package-deb.sh) failed"
	{
		printf 'NODELET_VM_NAME=%q\n' "$NAME"
		printf 'NODELET_VM_DRIVER=%q\n' "$DRIVER"
		printf 'NODELET_VM_DEB=%q\n' "$RUN_DIR/deb/$(basename "$DEB")"
		printf 'NODELET_VM_IMAGES=%q\n' "$IMAGES_TARGET_DIR"
		printf 'NODELET_VM_GUEST_TIMEOUT=%q\n' "$((TIMEOUT - 60))"
		printf 'NODELET_VM_INTERACTIVE=%q\n' "$1"
		printf 'NODELET_VM_NETWORK=%q\n' "$NETWORK"
		printf 'NODELET_VM_ROOT=%q\n' "$NODE_ROOT"
	} >"$RUN_DIR/env.tmp"
	mv -f "$RUN_DIR/env.tmp" "$RUN_DIR/env"
	printf '%s\n' "${EXTRA_ENV[@]}" >"$RUN_DIR/command.env"
	if [ "${#COMMAND[@]}" -gt 0 ]; then printf '%s\0' "${COMMAND[@]}"; fi >"$RUN_DIR/command"
	rm -f "$RUN_DIR/console.log" "$RUN_DIR/qemu.pid"
}

# The host directories the guest sees at the same paths (each over 9p, under a tmpfs overlay):
# the repository (scripts, the test binaries), and the target, VM and images directories when
# they are not below it. Printed one per line, outermost first.
shared_dirs() {
	local dir kept=() k inside
	for dir in "$REPO_DIR" "$TARGET_DIR" "$VM_DIR" "$(realpath -m "$IMAGES_TARGET_DIR")"; do
		inside=0
		for k in "${kept[@]}"; do
			case "$dir/" in "$k"/*) inside=1 ;; esac
		done
		[ "$inside" = 1 ] || kept+=("$dir")
	done
	printf '%s\n' "${kept[@]}"
}

qemu_args() {
	local version="$1" initramfs="$2" dir shares=() virtfs=() i=0
	while IFS= read -r dir; do
		[[ "$dir" =~ ^/[A-Za-z0-9_./+-]*$ ]] || die "$dir: the guest can share only paths of letters, digits and _ . / + -"
		shares+=("share$i=$dir")
		virtfs+=(-virtfs "local,path=$dir,mount_tag=share$i,security_model=passthrough,readonly=on,multidevs=remap")
		i=$((i + 1))
	done < <(shared_dirs)
	local append=(
		console=ttyS0 quiet panic=-1 psi=1
		# The kernel's boot-time check that the timer interrupt arrives through the IO-APIC
		# fails when emulation falls behind on a loaded host ("IO-APIC + timer doesn't work!",
		# a panic seen in a loaded test run); the check proves nothing about the guest here.
		no_timer_check
		systemd.unified_cgroup_hierarchy=1
		systemd.unit=nodelet-vm-scenario.service
		systemd.show_status=error
		# systemd 257+ queries the console's terminal (escape sequences on the serial line, mixed
		# into the scenario's first and last lines); a dumb terminal is not queried.
		systemd.tty.term.console=dumb systemd.tty.term.ttyS0=dumb
		"nodelet_vm.repo=$REPO_DIR" "nodelet_vm.run=$RUN_DIR"
		"nodelet_vm.shares=$(
			IFS=,
			echo "${shares[*]}"
		)"
	)
	# shellcheck disable=SC2054 # qemu's options are comma-separated
	local nic=none
	# User-mode networking needs no privileges or host devices; the guest reaches the host's
	# loopback at 10.0.2.2 and nothing reaches the guest.
	[ "$NETWORK" = host ] && nic=user,model=virtio-net-pci
	QEMU_ARGS=(
		-accel tcg,thread=multi -smp "$CPUS" -m "$MEMORY"
		-nographic -no-reboot -nic "$nic"
		-kernel "$NODE_ROOT/boot/vmlinuz-$version" -initrd "$initramfs"
		-append "${append[*]}"
		-virtfs "local,path=$NODE_ROOT,mount_tag=noderoot,security_model=passthrough,readonly=on,multidevs=remap"
		"${virtfs[@]}"
		-pidfile "$RUN_DIR/qemu.pid"
	)
}

# Stops the qemu of this run if it is still there (only the process named in our pid file, and
# only if it is a qemu of this run directory).
stop_qemu() {
	local pid
	pid="$(cat "$RUN_DIR/qemu.pid" 2>/dev/null || true)"
	if [ -n "$pid" ] && [[ "$(proc_cmdline "$pid")" == *"nodelet_vm.run=$RUN_DIR "* ]]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait_gone 50 "$pid" || kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$RUN_DIR/qemu.pid"
}

cmd_run() {
	parse_options "$@"
	[ "${#COMMAND[@]}" -gt 0 ] || die "run: no COMMAND after --"
	require_root
	check_host || exit 1
	local version initramfs
	node_root
	version="$(kernel_version)"
	[ -n "$version" ] || die "$NODE_ROOT has no /boot/vmlinuz-V with /lib/modules/V"
	initramfs="$(build_initramfs "$version")"
	write_run_dir 0
	qemu_args "$version" "$initramfs"
	trap stop_qemu EXIT
	log "booting $NAME (driver $DRIVER, node root $NODE_ROOT, kernel $version); console: $RUN_DIR/console.log"
	local started=$SECONDS status=0
	# The guest's tty writes \r\n; sed -u keeps the stream line by line and unbuffered.
	timeout --foreground -k 10 "$TIMEOUT" "$QEMU" "${QEMU_ARGS[@]}" </dev/null 2>&1 |
		sed -u 's/\r$//' | tee "$RUN_DIR/console.log" || status=$?
	local elapsed=$((SECONDS - started)) result
	result="$(sed -n "s/^$RESULT_MARKER \([0-9][0-9]*\)\$/\1/p" "$RUN_DIR/console.log" | tail -n1)"
	if [ -z "$result" ]; then
		[ "$status" = 124 ] && die "$NAME: the VM did not finish within ${TIMEOUT}s (console: $RUN_DIR/console.log)"
		die "$NAME: the guest reported no result after ${elapsed}s (qemu exit $status; boot failure or crash?); console: $RUN_DIR/console.log"
	fi
	log "$NAME: scenario exited $result after ${elapsed}s of wall time"
	exit "$result"
}

cmd_shell() {
	parse_options "$@"
	require_root
	check_host || exit 1
	local version initramfs
	node_root
	version="$(kernel_version)"
	[ -n "$version" ] || die "$NODE_ROOT has no /boot/vmlinuz-V with /lib/modules/V"
	initramfs="$(build_initramfs "$version")"
	COMMAND=(/bin/bash -i)
	write_run_dir 1
	qemu_args "$version" "$initramfs"
	trap stop_qemu EXIT
	"$QEMU" "${QEMU_ARGS[@]}"
}

case "${1:-}" in
run) shift && cmd_run "$@" ;;
shell) shift && cmd_shell "$@" ;;
initramfs)
	require_root
	check_host || exit 1
	node_root
	build_initramfs "$(kernel_version)"
	;;
check) check_host ;;
*) usage ;;
esac
