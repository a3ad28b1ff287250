#!/usr/bin/env bash
# The VM's node: a root of Debian's newest suite (sid) built by mmdebstrap from
# scripts/vm/root.packages, with that suite's systemd, containerd, runc and kernel. scripts/vm.sh
# boots it (9p, read-only, under a tmpfs overlay) with its own kernel and modules.
#
#   root.sh path      build the root unless it is cached; print its directory
#   root.sh key       print the cache key (of the suite, the package list and the recipe)
#   root.sh versions  print the versions of the root's node packages (once built)
#   root.sh cache-dir print the cache directory
#
# The root is cached outside the clone, by content: <cache>/root-<key>/, where <cache> is
# $NODELET_VM_CACHE or /var/cache/nodelet-vm, so a fresh clone (CI) reuses it. Building takes
# about two minutes and ~600 MB; concurrent callers wait on one lock. Each use touches the root's
# stamp; roots of other keys unused for a day are removed when a new one is built (another
# clone or branch may still boot its own). mmdebstrap uses its own apt configuration: the system's
# sources, lists and packages are left as they are. Debian's mirror: $NODELET_VM_MIRROR or the
# one of the system's sources.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

SUITE=sid
PACKAGES_FILE="$REPO_DIR/scripts/vm/root.packages"
CACHE_DIR="${NODELET_VM_CACHE:-/var/cache/nodelet-vm}"

usage() {
	sed -n '2,18s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

packages() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$PACKAGES_FILE" | tr -d ' \t'; }

# The cache key: the suite, the package list and the recipe (the lines of this script between
# "recipe:begin" and "recipe:end": how mmdebstrap is called).
key() {
	{
		echo "suite $SUITE"
		packages
		sed -n '/^# recipe:begin/,/^# recipe:end/p' "${BASH_SOURCE[0]}"
	} | sha256sum | cut -c1-16
}

# The Debian mirror of the system's sources (deb822 or one-line), else deb.debian.org.
mirror() {
	if [ -n "${NODELET_VM_MIRROR:-}" ]; then
		echo "$NODELET_VM_MIRROR"
		return 0
	fi
	local found
	found="$(
		{
			sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
			sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
				/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
		} | tr ' ' '\n' | grep -E '/debian/?$' | head -n1
	)" || true
	echo "${found:-http://deb.debian.org/debian}"
}

# recipe:begin (part of the cache key: a change here builds a new root)
# run_mmdebstrap DIR PACKAGES: the root of $SUITE with PACKAGES (comma-separated) into DIR.
# Check-Valid-Until: sid's Release file reads as expired through this machine's registry.
# The initrd the kernel package's hook builds is not booted (scripts/vm.sh builds its own).
run_mmdebstrap() {
	mmdebstrap --variant=minbase --mode=root --format=directory \
		--aptopt='Acquire::Check-Valid-Until "false"' \
		--aptopt='APT::Install-Recommends "false"' \
		--include="$2" \
		--customize-hook='rm -f "$1"/boot/initrd.img-*' \
		--customize-hook='chroot "$1" dpkg-query -W -f="\${Package} \${Version}\n" >"$1/.nodelet-vm-packages"' \
		"$SUITE" "$1" "$(mirror)" >&2 || die "mmdebstrap failed (root left in $1)"
}
# recipe:end

build() {
	local key dir
	key="$(key)"
	dir="$CACHE_DIR/root-$key"
	if [ -f "$dir/.nodelet-vm-root" ]; then
		touch "$dir/.nodelet-vm-root" 2>/dev/null || true
		echo "$dir"
		return 0
	fi
	require_root
	command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (Debian package mmdebstrap; run scripts/install-deps.sh)"
	mkdir -p "$CACHE_DIR"
	exec 7>"$CACHE_DIR/root.lock"
	flock 7
	if [ -f "$dir/.nodelet-vm-root" ]; then
		exec 7>&-
		echo "$dir"
		return 0
	fi
	local tmp="$CACHE_DIR/root-$key.building" started=$SECONDS include
	rm -rf "$tmp"
	include="$(packages | paste -sd, -)"
	log "building the VM's node root ($SUITE: $include) into $dir; about two minutes"
	run_mmdebstrap "$tmp" "$include"
	[ -n "$(ls "$tmp"/boot/vmlinuz-* 2>/dev/null)" ] || die "the root has no /boot/vmlinuz-*"
	echo "$key" >"$tmp/.nodelet-vm-root"
	mv -T "$tmp" "$dir"
	# Roots of other keys unused for a day (their stamp's mtime), and failed builds, are stale.
	local old
	for old in "$CACHE_DIR"/root-*; do
		[ "$old" != "$dir" ] && [ -d "$old" ] || continue
		if [ "${old%.building}" != "$old" ] ||
			[ -z "$(find "$old/.nodelet-vm-root" -mmin -1440 2>/dev/null)" ]; then
			rm -rf "$old"
		fi
	done
	exec 7>&-
	log "built $dir in $((SECONDS - started)) s ($(du -sh "$dir" | cut -f1))"
	echo "$dir"
}

versions() {
	local dir
	dir="$CACHE_DIR/root-$(key)"
	[ -f "$dir/.nodelet-vm-packages" ] || die "no root built for key $(key) (run root.sh path)"
	grep -E '^(systemd|containerd|runc|linux-image-[0-9][^ ]*|containernetworking-plugins) ' "$dir/.nodelet-vm-packages"
}

case "${1:-}" in
path) build ;;
key) key ;;
versions) versions ;;
cache-dir) echo "$CACHE_DIR" ;;
*) usage ;;
esac
