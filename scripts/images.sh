#!/usr/bin/env bash
# Build and import the test images, with no docker and no registry.
#
#   images.sh build    build localhost/pause:1 and localhost/testbox:1 as OCI archives under
#                      target/images/oci/ (skipped when their inputs are unchanged)
#   images.sh import   import them into the project-local containerd (skipped when it already
#                      has the same digests) and check they are listed
#   images.sh list     show the images the project-local containerd has
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TRIPLE="x86_64-unknown-linux-gnu"
STAGE_DIR="$IMAGES_TARGET_DIR/stage"
BUILD_IMAGE="$REPO_DIR/images/build-image.py"
IMAGE_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# A binary that asks for a program interpreter is dynamically linked and would not run in an
# image that holds nothing else.
require_static() {
	if readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; then
		die "$1 is dynamically linked; the images need static binaries"
	fi
}

# Copy with symbols stripped, only if the result differs (keeps mtimes, and so stamps, stable).
stage_stripped() { # src dest
	strip -o "$2.tmp.$$" "$1"
	if cmp -s "$2.tmp.$$" "$2"; then rm -f "$2.tmp.$$"; else mv -f "$2.tmp.$$" "$2"; fi
}

build_testbox_binary() {
	# --target keeps RUSTFLAGS (crt-static) away from build scripts and proc-macros, which must
	# stay dynamic host binaries; no extra rustup target is needed for the host triple. A test
	# image need not pay for even the release profile's thin LTO.
	(cd "$REPO_DIR" && RUSTFLAGS="-C target-feature=+crt-static" \
		cargo build --quiet --release --locked -p testbox --target "$TRIPLE" \
		--config profile.release.lto=false --config profile.release.codegen-units=16 \
		--target-dir "$IMAGES_TARGET_DIR")
	local binary="$IMAGES_TARGET_DIR/$TRIPLE/release/testbox"
	require_static "$binary"
	stage_stripped "$binary" "$STAGE_DIR/testbox"
}

build_pause_binary() {
	gcc -static -Os -Wall -Wextra -Werror -o "$STAGE_DIR/pause.unstripped" "$REPO_DIR/images/pause/pause.c"
	require_static "$STAGE_DIR/pause.unstripped"
	stage_stripped "$STAGE_DIR/pause.unstripped" "$STAGE_DIR/pause"
}

busybox_path() {
	busybox_static || die "no static busybox (apt-get install busybox-static, or run scripts/install-deps.sh)"
}

cmd_build() {
	mkdir -p "$STAGE_DIR" "$IMAGES_OUT_DIR"
	build_pause_binary
	build_testbox_binary

	python3 "$BUILD_IMAGE" --name "$PAUSE_IMAGE" --out "$IMAGES_OUT_DIR/pause.tar" \
		--file "/pause=$STAGE_DIR/pause:0755" \
		--entrypoint '["/pause"]' --env "$IMAGE_ENV" --workdir / >/dev/null

	local busybox applet args=()
	busybox="$(busybox_path)"
	for applet in $("$busybox" --list | sort); do
		case "$applet" in busybox | "" | *[!A-Za-z0-9_.\[-]*) continue ;; esac
		args+=(--symlink "/bin/$applet=busybox")
	done
	python3 "$BUILD_IMAGE" --name "$TESTBOX_IMAGE" --out "$IMAGES_OUT_DIR/testbox.tar" \
		--file "/testbox=$STAGE_DIR/testbox:0755" \
		--file "/bin/busybox=$busybox:0755" \
		--file "/etc/passwd=$REPO_DIR/images/testbox/passwd:0644" \
		--file "/etc/group=$REPO_DIR/images/testbox/group:0644" \
		--dir /tmp:1777 --dir /var/tmp:1777 --dir /root:0700 \
		--dir /proc:0555 --dir /sys:0555 --dir /dev:0755 --dir /etc:0755 \
		--symlink /usr/bin=../bin --symlink /sbin=bin --symlink /usr/sbin=../bin \
		"${args[@]}" \
		--entrypoint '["/testbox"]' --env "$IMAGE_ENV" --workdir / >/dev/null
}

# The digest an image name has in a listing of `ctr images ls`, or nothing.
digest_in() { # listing name
	awk -v name="$2" '$1 == name {print $3}' <<<"$1"
}

# Imports the archives whose image is missing or has another digest, side by side, then checks
# every digest. One listing before and one after: each ctr call costs a second or more in the
# test VM.
cmd_import() {
	require_root
	ctd_responsive || die "the project-local containerd does not answer on $CTD_SOCK (run scripts/containerd.sh start)"
	local names=("$PAUSE_IMAGE" "$TESTBOX_IMAGE") archives=("$IMAGES_OUT_DIR/pause.tar" "$IMAGES_OUT_DIR/testbox.tar")
	local listing i pids=() wants=()
	listing="$(ctr_local images ls 2>/dev/null || true)"
	for i in "${!names[@]}"; do
		[ -f "${archives[i]}" ] || die "${archives[i]} is missing (run scripts/images.sh build)"
		wants[i]="$(cat "${archives[i]}.digest")"
		if [ "$(digest_in "$listing" "${names[i]}")" != "${wants[i]}" ]; then
			ctr_local images import "${archives[i]}" >/dev/null &
			pids+=("$!")
		fi
	done
	[ "${#pids[@]}" -gt 0 ] || return 0
	for i in "${pids[@]}"; do
		wait "$i" || die "ctr images import failed"
	done
	listing="$(ctr_local images ls 2>/dev/null || true)"
	local got
	for i in "${!names[@]}"; do
		got="$(digest_in "$listing" "${names[i]}")"
		[ "$got" = "${wants[i]}" ] || die "after importing ${archives[i]}, ${names[i]} has digest '${got:-<not listed>}', want ${wants[i]}"
	done
}

case "${1:-}" in
build) cmd_build ;;
import) cmd_import ;;
list) ctr_local images ls ;;
*)
	sed -n '2,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
