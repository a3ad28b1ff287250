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
	local version="$1"
	cached_bin "$version" && return 0
	sid_unpack containerd "$version" usr/bin/containerd "$CACHE/containerd-$version"
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
	sid_update "$APT_DIR"
	local current
	current="$(sid_version containerd)"
	[ -n "$current" ] || die "sid serves no containerd package"
	if sid_serves containerd "$WANT"; then
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
	sid_update "$APT_DIR"
	local current
	current="$(sid_version containerd)"
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
