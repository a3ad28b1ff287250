#!/usr/bin/env bash
# Builds nodelet's Debian package with dpkg-deb (Debian's dpkg tools, nothing else):
#
#   /usr/bin/nodelet                                     the binary (debug info stripped)
#   /usr/lib/systemd/system/nodelet.service              systemd/nodelet.service
#   /usr/lib/systemd/logind.conf.d/99-nodelet.conf       packaging/logind-99-nodelet.conf: logind lets
#                                                        a shutdown wait 30 s for nodelet's lock
#   /etc/nodelet/config.yaml                             config.example.yaml (a conffile)
#   /usr/share/doc/nodelet/README.md                     the README
#
#   package-deb.sh [--binary PATH | --profile P] [--out DIR] [--compression xz|gzip|none]
#     --binary PATH   the nodelet binary to package (no build)
#     --profile P     else: cargo build --profile P (default release; dist is the smallest,
#                     README "Build profiles"), then <target>/P/nodelet
#     --out DIR       where the package goes; default <target>/debian
#     --compression   dpkg-deb's -Z (default xz; the VM test bed uses none)
#
# Prints the package's path: DIR/nodelet_<version>_amd64.deb, the version from Cargo.toml.
# Depends: containerd, and the C library versions the binary needs (read from its symbols).
# The unit is not enabled or started on install: write /etc/nodelet/config.yaml for the node
# first, then `systemctl enable --now nodelet`. Maintainer scripts only reload systemd (and stop
# the unit on removal).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-$REPO_DIR/target}")"
BINARY='' PROFILE=release OUT_DIR="$TARGET_DIR/debian" COMPRESSION=xz
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) BINARY="$2" && shift 2 ;;
	--profile) PROFILE="$2" && shift 2 ;;
	--out) OUT_DIR="$2" && shift 2 ;;
	--compression) COMPRESSION="$2" && shift 2 ;;
	*) sed -n '2,22s/^# \{0,1\}//p' "$0" >&2 && exit 2 ;;
	esac
done
case "$COMPRESSION" in xz | gzip | none) ;; *) die "--compression $COMPRESSION: want xz, gzip or none" ;; esac
for tool in dpkg-deb objcopy objdump; do
	command -v "$tool" >/dev/null || die "$tool is missing (Debian packages dpkg, binutils)"
done
if [ -z "$BINARY" ]; then
	log "building nodelet (profile $PROFILE)"
	(cd "$REPO_DIR" && cargo build --profile "$PROFILE" --locked --bin nodelet >&2)
	BINARY="$TARGET_DIR/$PROFILE/nodelet"
fi
[ -x "$BINARY" ] || die "$BINARY is not an executable"

VERSION="$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$REPO_DIR/Cargo.toml" | head -n1)"
[ -n "$VERSION" ] || die "no version in $REPO_DIR/Cargo.toml"
ARCH=amd64
DEB="$OUT_DIR/nodelet_${VERSION}_${ARCH}.deb"

mkdir -p "$OUT_DIR"
STAGE="$(mktemp -d "$OUT_DIR/.stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
chmod 0755 "$STAGE"
install -d -m 0755 "$STAGE/DEBIAN" "$STAGE/usr/bin" "$STAGE/usr/lib/systemd/system" \
	"$STAGE/usr/lib/systemd/logind.conf.d" "$STAGE/etc/nodelet" "$STAGE/usr/share/doc/nodelet"
# As Debian's dh_strip: no debug info in the package (symbols stay, for backtraces).
objcopy --strip-debug "$BINARY" "$STAGE/usr/bin/nodelet"
chmod 0755 "$STAGE/usr/bin/nodelet"
install -m 0644 "$REPO_DIR/systemd/nodelet.service" "$STAGE/usr/lib/systemd/system/nodelet.service"
install -m 0644 "$REPO_DIR/packaging/logind-99-nodelet.conf" "$STAGE/usr/lib/systemd/logind.conf.d/99-nodelet.conf"
install -m 0644 "$REPO_DIR/config.example.yaml" "$STAGE/etc/nodelet/config.yaml"
install -m 0644 "$REPO_DIR/README.md" "$STAGE/usr/share/doc/nodelet/README.md"
grep -q '^ExecStart=/usr/bin/nodelet ' "$STAGE/usr/lib/systemd/system/nodelet.service" ||
	die "systemd/nodelet.service does not start /usr/bin/nodelet"

# The newest GLIBC_x.y symbol version the binary needs is the libc6 it depends on.
glibc="$(objdump -T "$STAGE/usr/bin/nodelet" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)"
[ -n "$glibc" ] || die "no GLIBC symbol versions in $BINARY (a static binary?)"
installed_size="$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)"
cat >"$STAGE/DEBIAN/control" <<CONTROL
Package: nodelet
Version: $VERSION
Architecture: $ARCH
Maintainer: nodelet engineers <dev@nodelet.invalid>
Installed-Size: $installed_size
Depends: libc6 (>= $glibc), libgcc-s1, containerd
Section: admin
Priority: optional
Description: node agent doing the kubelet's job against containerd
 nodelet runs pods on a node through containerd's CRI, as the kubelet does: static pods from
 a directory, or the pods an API server binds to the node. It reads the kubelet's
 KubeletConfiguration (/etc/nodelet/config.yaml) and runs as the systemd unit nodelet.service,
 which is not enabled on install: edit the configuration first, then
 systemctl enable --now nodelet.
CONTROL
echo /etc/nodelet/config.yaml >"$STAGE/DEBIAN/conffiles"
cat >"$STAGE/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
# systemd reads the new or changed unit; the unit is not enabled or started here.
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
SCRIPT
cat >"$STAGE/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
# The pods keep running (KillMode=process); only nodelet stops.
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop nodelet.service || true
fi
SCRIPT
cat >"$STAGE/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
SCRIPT
chmod 0755 "$STAGE/DEBIAN/postinst" "$STAGE/DEBIAN/prerm" "$STAGE/DEBIAN/postrm"

dpkg-deb --root-owner-group -Z"$COMPRESSION" --build "$STAGE" "$DEB.tmp" >/dev/null
mv -f "$DEB.tmp" "$DEB"
echo "$DEB"
