#!/usr/bin/env bash
# containerd 2.x for the integration tests, from Debian's newest suite (sid), without touching the
# system's packages or apt sources: a private sources list, lists and archives directory feed
# `apt-get download`, and `dpkg -x` unpacks the package into a cache outside the clone (so a fresh
# clone on the same machine reuses it):
#
#   $NODELET_TEST_CONTAINERD_CACHE/containerd-<Debian version>/usr/bin/{containerd,ctr,containerd-shim-runc-v2}
#   (default cache: /var/cache/nodelet-test; apt's private state in .../apt-sid)
#
#   containerd-current.sh fetch    make sure one is cached and print its bin directory: the version
#                                  NODELET_TEST_CONTAINERD_DEBIAN_VERSION names (default below), else any
#                                  cached 2.x; asks the registry only when none is cached
#   containerd-current.sh update   ask sid which version it serves now and cache that one too
#   containerd-current.sh path     print the bin directory of the cached one fetch would use
#                                  (exit 1, nothing printed, when none is cached); no network
#
# The binaries run on Debian 12 (glibc 2.36) with Debian 12's runc 1.1.5: sid's runc needs glibc
# 2.38, so the containerd package alone is fetched (its runc dependency is not).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The version the tests were last run and documented with (docs/testing.md). When sid no longer
# serves it, fetch takes sid's current version and says so.
WANT="${NODELET_TEST_CONTAINERD_DEBIAN_VERSION:-2.1.9+ds1-5}"
CACHE="$NODELET_TEST_CONTAINERD_CACHE"
APT_DIR="$CACHE/apt-sid"

# The Debian mirror the system's own sources name (deb822 or one-line format), else Debian's.
mirror() {
	local uri
	uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}')"
	if [ -z "$uri" ]; then
		uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) {print $i; exit}}')"
	fi
	echo "${uri:-http://deb.debian.org/debian}"
}

apt_opts=(
	-o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache::archives=$APT_DIR/archives"
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
	-o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root
)

apt_update() {
	mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial"
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	echo "deb [signed-by=$keyring] $(mirror) sid main" >"$APT_DIR/sources.list"
	log "reading sid's package lists from $(mirror) (private lists in $APT_DIR)"
	apt-get "${apt_opts[@]}" -qq update >&2 || die "apt-get update of sid failed"
}

# sid's current containerd version (from the private lists).
sid_version() {
	apt-cache "${apt_opts[@]}" madison containerd |
		awk -F'|' '$3 ~ /sid/ {gsub(/ /, "", $2); print $2; exit}'
}

# The bin directory of a cached version, if complete.
cached_bin() { # version
	local dir="$CACHE/containerd-$1"
	[ -e "$dir/.complete" ] && [ -x "$dir/usr/bin/containerd" ] && echo "$dir/usr/bin"
}

# The newest complete cached 2.x (or later), if any.
newest_cached() {
	local dir
	for dir in $(find "$CACHE" -maxdepth 1 -name 'containerd-[2-9]*' -type d 2>/dev/null | sort -rV); do
		if [ -e "$dir/.complete" ] && [ -x "$dir/usr/bin/containerd" ]; then
			echo "$dir/usr/bin"
			return 0
		fi
	done
	return 1
}

fetch_version() { # version (in the private lists)
	local version="$1" tmp deb
	cached_bin "$version" && return 0
	tmp="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: the trap must remove this very directory
	trap "rm -rf '$tmp'" EXIT
	log "downloading containerd=$version from sid"
	(cd "$tmp" && apt-get "${apt_opts[@]}" -qq download "containerd=$version" >&2) ||
		die "apt-get download containerd=$version failed"
	deb="$(find "$tmp" -maxdepth 1 -name 'containerd_*.deb' | head -n1)"
	[ -n "$deb" ] || die "apt-get download left no containerd package in $tmp"
	mkdir "$tmp/root"
	dpkg -x "$deb" "$tmp/root"
	"$tmp/root/usr/bin/containerd" --version >&2 || die "the downloaded containerd does not run here"
	touch "$tmp/root/.complete"
	rm -rf "${CACHE:?}/containerd-$version"
	mv "$tmp/root" "$CACHE/containerd-$version"
	rm -rf "$tmp"
	trap - EXIT
	log "containerd $version cached in $CACHE/containerd-$version"
	cached_bin "$version"
}

cmd_fetch() {
	cached_bin "$WANT" && return 0
	if [ -z "${NODELET_TEST_CONTAINERD_DEBIAN_VERSION:-}" ]; then
		newest_cached && return 0
	fi
	require_root
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.lock"
	flock 8
	cached_bin "$WANT" && return 0
	apt_update
	local current
	current="$(sid_version)"
	[ -n "$current" ] || die "sid serves no containerd package"
	if apt-cache "${apt_opts[@]}" madison containerd | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$WANT"; then
		fetch_version "$WANT"
	else
		[ -z "${NODELET_TEST_CONTAINERD_DEBIAN_VERSION:-}" ] ||
			die "sid does not serve containerd=$WANT (it serves $current)"
		log "sid no longer serves containerd=$WANT: taking its current $current"
		fetch_version "$current"
	fi
}

cmd_update() {
	require_root
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.lock"
	flock 8
	apt_update
	local current
	current="$(sid_version)"
	[ -n "$current" ] || die "sid serves no containerd package"
	fetch_version "$current"
}

cmd_path() {
	cached_bin "$WANT" && return 0
	[ -z "${NODELET_TEST_CONTAINERD_DEBIAN_VERSION:-}" ] && newest_cached
}

case "${1:-}" in
fetch) cmd_fetch ;;
update) cmd_update ;;
path) cmd_path ;;
*)
	sed -n '2,18s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
