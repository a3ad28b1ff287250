#!/usr/bin/env bash
# Install the Debian packages nodelet's build and integration tests need; only the missing ones,
# so a second run (or a machine that already has them) does nothing and needs no network.
#   containerd, runc, containernetworking-plugins  the runtime under test (CNI plugins: /usr/lib/cni)
#   protobuf-compiler                              protoc, for containerd-client's build script
#   busybox-static                                 the shell and tools inside the testbox image
#   gcc, libc6-dev                                 the static pause binary (libc6-dev has libc.a)
#   iproute2, iptables                             CNI bridge/portmap and the clean-up in containerd.sh
#   python3                                        images/build-image.py
#   curl                                           poking test servers by hand
#   dbus-daemon                                    a private bus for the systemd cgroup driver's D-Bus test
#   qemu-system-x86, mmdebstrap, cpio              the cgroup v2 test VM (scripts/vm.sh): qemu, the
#                                                  builder of its node root (Debian's newest suite,
#                                                  with its own kernel: scripts/vm/root.sh), the
#                                                  initramfs
#   binutils                                       objcopy/objdump for nodelet's Debian package
#                                                  (scripts/package-deb.sh; dpkg-deb is dpkg's)
#   dbus, systemd                                  the system bus and systemd of the D-Bus tests
#   docker-registry, skopeo, apache2-utils, openssl  the private TLS registry of the pull tests
#                                                  (scripts/registry.sh): the registry, pushing
#                                                  the OCI archives, htpasswd (bcrypt), the test CA;
#                                                  openssl and curl also make the real control
#                                                  plane's certificates and probe its health
#                                                  (scripts/k8s.sh)
#   chromium, chromium-driver                      the status page's browser test (tests/status_page.rs):
#                                                  headless Chromium driven through chromedriver
# plus containerd 2.x from Debian's newest suite, the runtime the integration tests run on, fetched
# into a cache outside the clone without touching the system's packages
# (scripts/containerd-current.sh; Debian 12's containerd 1.6 above is the compatibility lane's),
# and the toolchain's rustfmt and clippy components (rustup's minimal profile leaves them out),
# for the test command's `cargo fmt --check` and `cargo clippy` (scripts/test.sh).
# Not here: the real Kubernetes control plane (etcd from sid, the rest built with the machine's Go
# from the Go module proxy, minutes of CPU), which `scripts/k8s.sh build` (or `up`) obtains itself
# into its cache.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(
	containerd runc containernetworking-plugins protobuf-compiler busybox-static
	iproute2 iptables gcc libc6-dev python3 curl dbus-daemon
	qemu-system-x86 mmdebstrap cpio binutils dbus systemd
	docker-registry skopeo apache2-utils openssl
	chromium chromium-driver
)

# Asked of rustup only when one is missing, so a second run needs no network either. Without
# rustup (a distribution's cargo) the distribution's rustfmt and clippy packages are needed.
if command -v rustup >/dev/null 2>&1; then
	installed=$(rustup component list --installed)
	for component in rustfmt clippy; do
		if ! grep -q "^$component-" <<<"$installed"; then
			log "adding the $component component"
			rustup component add "$component" || die "rustup component add $component failed"
		fi
	done
fi

"$(dirname "${BASH_SOURCE[0]}")/containerd-current.sh" fetch >/dev/null ||
	die "cannot fetch containerd 2.x (scripts/containerd-current.sh fetch)"

missing=()
for package in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$package")
	fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

require_root
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || die "apt-get update failed"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
	die "apt-get install ${missing[*]} failed"
