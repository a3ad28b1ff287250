# shellcheck shell=bash disable=SC2034 # settings are used by the scripts that source this file
# Shared settings and helpers for nodelet's test-environment scripts. Source it; do not run it.
#
# Every path can be moved with an environment variable, so a second instance (or one inside the
# test VM, whose containerd root must live on its own tmpfs) never collides with the default one.

NODELET_TEST_VAR="${NODELET_TEST_VAR:-/var/lib/nodelet-test}"
NODELET_TEST_RUN="${NODELET_TEST_RUN:-/run/nodelet-test}"
NODELET_TEST_BRIDGE="${NODELET_TEST_BRIDGE:-nodelet0}"
NODELET_TEST_SUBNET="${NODELET_TEST_SUBNET:-10.89.0.0/16}"
NODELET_TEST_CNI_NETWORK="${NODELET_TEST_CNI_NETWORK:-nodelet-test}"
NODELET_TEST_CNI_BIN="${NODELET_TEST_CNI_BIN:-/usr/lib/cni}"
NODELET_TEST_LOG_LEVEL="${NODELET_TEST_LOG_LEVEL:-info}"
# containerd's cgroup driver (runc's SystemdCgroup): false = cgroupfs; the VM's systemd scenario
# sets true. It must match nodelet's cgroupDriver.
NODELET_TEST_SYSTEMD_CGROUP="${NODELET_TEST_SYSTEMD_CGROUP:-false}"
# This sandbox lacks CAP_SYS_RESOURCE (see containerd.sh); the VM runs with it and sets false.
NODELET_TEST_RESTRICT_OOM_SCORE_ADJ="${NODELET_TEST_RESTRICT_OOM_SCORE_ADJ:-true}"

# Which containerd the instance runs (scripts/containerd.sh renders its config for that binary's
# version: config version 3 for 2.x, version 2 for 1.x):
#   2       containerd 2.x (the default): the `containerd` on PATH when it is 2.x or later (a
#           current node, such as the test VM's root), else the one scripts/containerd-current.sh
#           fetched from Debian's newest suite into $NODELET_TEST_CONTAINERD_CACHE
#   1.6     Debian 12's containerd 1.6 (the system package, on PATH): the compatibility lane
#   system  whatever `containerd` is on PATH, any version
NODELET_TEST_CONTAINERD="${NODELET_TEST_CONTAINERD:-2}"
NODELET_TEST_CONTAINERD_CACHE="${NODELET_TEST_CONTAINERD_CACHE:-/var/cache/nodelet-test}"

CTD_ROOT="$NODELET_TEST_VAR/containerd"
CTD_STATE="$NODELET_TEST_RUN/containerd"
CTD_SOCK="$NODELET_TEST_RUN/containerd.sock"
CTD_CONFIG="$NODELET_TEST_VAR/containerd.toml"
CTD_LOG="$NODELET_TEST_VAR/containerd.log"
CTD_PIDFILE="$NODELET_TEST_RUN/containerd.pid"
# A copy of the config and CNI conflist the running instance was started with.
CTD_RUNNING_CONFIG="$NODELET_TEST_RUN/containerd.running"
CTD_LOCK="$NODELET_TEST_VAR/containerd.lock"
CTD_RUNC_ROOT="$NODELET_TEST_RUN/runc"
CNI_CONF_DIR="$NODELET_TEST_VAR/cni/net.d"
CNI_CONFLIST="$CNI_CONF_DIR/10-$NODELET_TEST_CNI_NETWORK.conflist"
CNI_DATA_DIR="$NODELET_TEST_VAR/cni/networks"
REGISTRY_HOSTS_DIR="$NODELET_TEST_VAR/certs.d"
# The private test registry (scripts/registry.sh): TLS with a test CA, htpasswd authentication.
NODELET_TEST_REGISTRY_PORT="${NODELET_TEST_REGISTRY_PORT:-5443}"
REGISTRY_DIR="${NODELET_TEST_REGISTRY_DIR:-$NODELET_TEST_VAR/registry}"
REGISTRY_ADDRESS="127.0.0.1:$NODELET_TEST_REGISTRY_PORT"
REGISTRY_CA="$REGISTRY_DIR/ca.crt"
REGISTRY_USER="nodelet"
K8S_NAMESPACE="k8s.io"

PAUSE_IMAGE="localhost/pause:1"
TESTBOX_IMAGE="localhost/testbox:1"

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGES_TARGET_DIR="${NODELET_TEST_IMAGES_TARGET:-$REPO_DIR/target/images}"
IMAGES_OUT_DIR="$IMAGES_TARGET_DIR/oci"

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "${0##*/}" "$*" >&2
	exit 1
}

require_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (containerd, mounts, network)"
}

# The version (e.g. 2.1.9, 1.6.20) of a containerd binary, from `containerd --version`.
containerd_version_of() { # binary
	"$1" --version 2>/dev/null | awk '{v = $3; sub(/^v/, "", v); sub(/[+~-].*/, "", v); print v; exit}'
}

# Resolves the containerd of NODELET_TEST_CONTAINERD once: sets CTD_BIN_DIR (its directory, put
# first on containerd's PATH so it starts its own shim), CTD_BIN, CTR_BIN (the ctr of the same
# version) and CTD_VERSION. Fails, with a message, when there is none.
ctd_resolve() {
	[ -z "${CTD_BIN:-}" ] || return 0
	local path_bin dir version
	path_bin="$(command -v containerd || true)"
	case "$NODELET_TEST_CONTAINERD" in
	2)
		version="$([ -z "$path_bin" ] || containerd_version_of "$path_bin")"
		if [ -n "$version" ] && [ "${version%%.*}" -ge 2 ]; then
			dir="$(dirname "$path_bin")"
		else
			dir="$("$REPO_DIR/scripts/containerd-current.sh" path || true)"
			[ -n "$dir" ] || {
				log "no containerd 2.x: none on PATH, none in $NODELET_TEST_CONTAINERD_CACHE (run scripts/containerd-current.sh fetch, or scripts/install-deps.sh)"
				return 1
			}
		fi
		;;
	1.6 | system)
		[ -n "$path_bin" ] || {
			log "no containerd on PATH (run scripts/install-deps.sh)"
			return 1
		}
		dir="$(dirname "$path_bin")"
		;;
	*)
		log "NODELET_TEST_CONTAINERD=$NODELET_TEST_CONTAINERD: want 2, 1.6 or system"
		return 1
		;;
	esac
	version="$(containerd_version_of "$dir/containerd")"
	if [ "$NODELET_TEST_CONTAINERD" = 1.6 ] && [ "${version%.*}" != 1.6 ]; then
		log "NODELET_TEST_CONTAINERD=1.6, but $dir/containerd is containerd ${version:-of no known version}"
		return 1
	fi
	[ -x "$dir/ctr" ] || {
		log "no ctr beside $dir/containerd"
		return 1
	}
	CTD_BIN_DIR="$dir"
	CTD_BIN="$dir/containerd"
	CTR_BIN="$dir/ctr"
	CTD_VERSION="$version"
}

# The `runc --version` line of the runc containerd's shims find on PATH.
runc_version() { runc --version 2>/dev/null | awk 'NR == 1 {print $3}'; }

# ctr (the version of the instance's containerd) against our containerd socket.
ctr_any() { ctd_resolve && "$CTR_BIN" --address "$CTD_SOCK" "$@"; }

# ctr against the project-local containerd, in the CRI's namespace.
ctr_local() { ctr_any --namespace "$K8S_NAMESPACE" "$@"; }

# True when our containerd answers on its socket.
ctd_responsive() { ctd_resolve && timeout 5 "$CTR_BIN" --address "$CTD_SOCK" version >/dev/null 2>&1; }

# The full argv of a process, NUL separators turned into spaces; empty if it is gone.
proc_cmdline() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null || true; }

# PIDs of processes whose argv[0] ends in "/$1" (or is "$1") and whose command line contains
# every further argument as a substring. Exact by construction: never matches by a broad name.
pids_matching() {
	local name="$1" pid cmd argv0
	shift
	for dir in /proc/[0-9]*; do
		pid="${dir#/proc/}"
		cmd="$(proc_cmdline "$pid")"
		[ -n "$cmd" ] || continue
		argv0="${cmd%% *}"
		[ "$argv0" = "$name" ] || [ "${argv0##*/}" = "$name" ] || continue
		local needle ok=1
		for needle in "$@"; do
			case "$cmd" in *"$needle"*) ;; *) ok=0 ;; esac
		done
		[ "$ok" = 1 ] && echo "$pid"
	done
	return 0
}

# Direct children of a PID.
child_pids() {
	local parent="$1" dir ppid
	for dir in /proc/[0-9]*; do
		ppid="$(awk '/^PPid:/ {print $2}' "$dir/status" 2>/dev/null || true)"
		[ "$ppid" = "$parent" ] && echo "${dir#/proc/}"
	done
	return 0
}

# Waits until none of the given PIDs exists (or the timeout in tenths of a second passes).
wait_gone() {
	local tenths="$1" pid alive
	shift
	while [ "$tenths" -gt 0 ]; do
		alive=0
		for pid in "$@"; do
			[ -d "/proc/$pid" ] && alive=1
		done
		[ "$alive" = 0 ] && return 0
		sleep 0.1
		tenths=$((tenths - 1))
	done
	return 1
}

# The path of a statically linked busybox (the images and the VM initramfs copy it as is, so
# it must need no loader); fails when there is none.
busybox_static() {
	local candidate
	for candidate in /bin/busybox /usr/bin/busybox; do
		if [ -x "$candidate" ] && ! readelf -l "$candidate" 2>/dev/null | grep -q 'Requesting program interpreter'; then
			echo "$candidate"
			return 0
		fi
	done
	return 1
}

# --- One package from Debian's newest suite (sid), never through the system's own sources:
# private apt lists, sources list and archives in a directory of the caller's
# (scripts/containerd-current.sh: containerd 2.x; scripts/k8s.sh: etcd).

# The Debian mirror the system's own sources name (deb822 or one-line format), else Debian's.
debian_mirror() {
	local uri
	uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}')"
	if [ -z "$uri" ]; then
		uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) {print $i; exit}}')"
	fi
	echo "${uri:-http://deb.debian.org/debian}"
}

# Reads sid's package lists into DIR; sets SID_APT_OPTS, the options of every apt call on them.
sid_update() { # DIR
	local dir="$1" keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	SID_APT_OPTS=(
		-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=-
		-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::archives=$dir/archives"
		-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
		-o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root
	)
	mkdir -p "$dir/lists/partial" "$dir/archives/partial"
	echo "deb [signed-by=$keyring] $(debian_mirror) sid main" >"$dir/sources.list"
	log "reading sid's package lists from $(debian_mirror) (private lists in $dir)"
	apt-get "${SID_APT_OPTS[@]}" -qq update >&2 || die "apt-get update of sid failed"
}

# sid's current version of PACKAGE (after sid_update).
sid_version() { # PACKAGE
	apt-cache "${SID_APT_OPTS[@]}" madison "$1" |
		awk -F'|' '$3 ~ /sid/ {gsub(/ /, "", $2); print $2; exit}'
}

# Whether the lists (after sid_update) have PACKAGE at VERSION.
sid_serves() { # PACKAGE VERSION
	apt-cache "${SID_APT_OPTS[@]}" madison "$1" | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
		grep -qxF "$2"
}

# Downloads PACKAGE=VERSION (after sid_update) and unpacks it into DEST, replacing it once the
# package's BINARY (a path inside it) runs here; DEST/.complete marks a finished unpack.
sid_unpack() { # PACKAGE VERSION BINARY DEST
	local package="$1" version="$2" binary="$3" dest="$4" tmp deb
	mkdir -p "$(dirname "$dest")"
	tmp="$(mktemp -d "$(dirname "$dest")/.fetch.XXXXXX")"
	log "downloading $package=$version from sid"
	if ! (cd "$tmp" && apt-get "${SID_APT_OPTS[@]}" -qq download "$package=$version" >&2); then
		rm -rf "$tmp"
		die "apt-get download $package=$version failed"
	fi
	deb="$(find "$tmp" -maxdepth 1 -name "${package}_*.deb" | head -n1)"
	if [ -z "$deb" ]; then
		rm -rf "$tmp"
		die "apt-get download left no $package package"
	fi
	mkdir "$tmp/root"
	dpkg -x "$deb" "$tmp/root"
	if ! "$tmp/root/$binary" --version >&2; then
		rm -rf "$tmp"
		die "the downloaded $binary does not run here"
	fi
	touch "$tmp/root/.complete"
	rm -rf "$dest"
	mv "$tmp/root" "$dest"
	rm -rf "$tmp"
}
