#!/usr/bin/env bash
# Kubernetes' own node conformance tests against nodelet (issue 39): the `[NodeConformance]`
# tests of k8s.io/kubernetes v1.37.2's node e2e suite (test/e2e_node, which also runs the shared
# node tests of test/e2e/common), run by the suite's own binary against nodelet joined as the
# only node to the real control plane of scripts/k8s.sh, on the project's containerd.
#
#   conformance.sh build    build e2e_node.test, the ginkgo runner and the Go programs of the
#                           stand-in images (agnhost, nnp) from tests/support/k8s (Go module
#                           proxy) into $NODELET_TEST_K8S_CACHE/v1.37.2/e2e; a no-op once built
#   conformance.sh images   build the images the tests name, as OCI archives under
#                           target/images/e2e (stand-ins made here: agnhost from its Go source
#                           with Debian's curl and netcat-openbsd, busybox from Debian sid's
#                           busybox-static with an nmeter of tests/support/nmeter, nonroot,
#                           nonewprivs, glibc-dns-testing, nginx, kitten, pause)
#   conformance.sh run [--agent nodelet|kubelet] [FOCUS [SKIP]]
#                           start an instance of its own (containerd, control plane, a registry
#                           serving the images, the agent: nodelet, or the real kubelet v1.37.2
#                           built by scripts/k8s.sh), run e2e_node.test through ginkgo with
#                           $NODELET_CONFORMANCE_PROCS processes (4) and the focus (default
#                           `\[NodeConformance\]`) and skip (default `\[Flaky\]`) regexps; the
#                           JUnit report and the logs in target/conformance/<agent>/, the table
#                           of both agents' last runs in docs/conformance.md (the causes of
#                           failures from docs/conformance-causes.tsv)
#   conformance.sh report   write docs/conformance.md again from the last runs' reports
#   conformance.sh subset   run the subset the README's test command runs (a few minutes) against
#                           nodelet; fails when any of it fails
#   conformance.sh down     stop the instance's registry, control plane and containerd
#
# The instance: NODELET_TEST_VAR=/var/lib/nodelet-conformance, bridge nodeletc0, 10.94.0.0/16,
# registry port 5450 (the suite's images on 5451), control plane port base 19443 (each
# overridable as for scripts/test-env.sh).
set -euo pipefail

export NODELET_TEST_VAR="${NODELET_TEST_VAR:-/var/lib/nodelet-conformance}"
export NODELET_TEST_RUN="${NODELET_TEST_RUN:-/run/nodelet-conformance}"
export NODELET_TEST_BRIDGE="${NODELET_TEST_BRIDGE:-nodeletc0}"
export NODELET_TEST_SUBNET="${NODELET_TEST_SUBNET:-10.94.0.0/16}"
export NODELET_TEST_CNI_NETWORK="${NODELET_TEST_CNI_NETWORK:-nodelet-conformance}"
export NODELET_TEST_REGISTRY_PORT="${NODELET_TEST_REGISTRY_PORT:-5450}"
export NODELET_TEST_K8S_PORT_BASE="${NODELET_TEST_K8S_PORT_BASE:-19443}"

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

K8S_VERSION=v1.37.2
K8S_CACHE="${NODELET_TEST_K8S_CACHE:-/var/cache/nodelet-k8s}"
E2E_BIN="$K8S_CACHE/$K8S_VERSION/e2e"
E2E_STAMP="$E2E_BIN/.stamp"
K8S_MOD_DIR="$REPO_DIR/tests/support/k8s"
NMETER_DIR="$REPO_DIR/tests/support/nmeter"
# The suite's own versions of the images (test/utils/image/manifest.go, e2e_node/image_list.go).
AGNHOST_VERSION=2.66.1
BUSYBOX_TAG=1.37.0-2
PAUSE_TAG=3.10.2
E2E_IMAGES_DIR="$REPO_DIR/target/images/e2e"
OUT_DIR="$REPO_DIR/target/conformance"
E2E_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
GO_PARALLEL="${NODELET_TEST_K8S_GO_PARALLEL:-2}"

e2e_desired_stamp() {
	echo "kubernetes $K8S_VERSION e2e_node.test agnhost nnp ginkgo nmeter"
	echo "flags -trimpath -buildvcs=false -ldflags $E2E_LDFLAGS"
	echo "go.sum $(sha256sum <"$K8S_MOD_DIR/go.sum" | cut -d' ' -f1)"
	echo "nmeter $(cat "$NMETER_DIR/go.mod" "$NMETER_DIR/main.go" | sha256sum | cut -d' ' -f1)"
}

e2e_built() {
	local bin
	[ "$(cat "$E2E_STAMP" 2>/dev/null || true)" = "$(e2e_desired_stamp)" ] || return 1
	for bin in e2e_node.test agnhost nnp ginkgo nmeter; do
		[ -x "$E2E_BIN/$bin" ] || return 1
	done
}

# go build in tests/support/k8s, niced, the module files read-only.
k8s_go() { # go arguments...
	(cd "$K8S_MOD_DIR" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 19 go "$@")
}

cmd_build() {
	e2e_built && return 0
	command -v go >/dev/null || die "no go on PATH (Go 1.26 or later)"
	mkdir -p "$K8S_CACHE/$K8S_VERSION"
	exec 8>"$K8S_CACHE/.lock-e2e"
	flock 8
	e2e_built && return 0
	local out="$K8S_CACHE/$K8S_VERSION/.build-e2e" start
	rm -rf "$out"
	mkdir -p "$out"
	start=$(date +%s)
	log "building e2e_node.test, ginkgo, agnhost, nnp and nmeter $K8S_VERSION (nice 19, -p $GO_PARALLEL)"
	k8s_go test -c -p "$GO_PARALLEL" -trimpath -buildvcs=false -ldflags "$E2E_LDFLAGS" \
		-o "$out/e2e_node.test" k8s.io/kubernetes/test/e2e_node || die "building e2e_node.test failed"
	# The ginkgo runner of the version the suite links (parallel processes); the module does not
	# name it as a tool, so it is built against a copy of go.mod that may gain its require line.
	cp "$K8S_MOD_DIR/go.mod" "$out/ginkgo.mod"
	cp "$K8S_MOD_DIR/go.sum" "$out/ginkgo.sum"
	(cd "$K8S_MOD_DIR" && GOTOOLCHAIN=local nice -n 19 go build -modfile="$out/ginkgo.mod" -mod=mod \
		-p "$GO_PARALLEL" -trimpath -buildvcs=false -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo) ||
		die "building ginkgo failed"
	rm -f "$out/ginkgo.mod" "$out/ginkgo.sum"
	# The images' programs run in containers: static.
	CGO_ENABLED=0 k8s_go build -p "$GO_PARALLEL" -trimpath -buildvcs=false -ldflags "-s -w" \
		-o "$out/agnhost" k8s.io/kubernetes/test/images/agnhost || die "building agnhost failed"
	CGO_ENABLED=0 k8s_go build -p "$GO_PARALLEL" -trimpath -buildvcs=false -ldflags "-s -w" \
		-o "$out/nnp" k8s.io/kubernetes/test/images/nonewprivs || die "building nnp failed"
	# busybox's nmeter applet, which Debian's busybox-static lacks (tests/support/nmeter).
	(cd "$NMETER_DIR" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly nice -n 19 \
		go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$out/nmeter" .) || die "building nmeter failed"
	e2e_desired_stamp >"$out/.stamp"
	rm -rf "$E2E_BIN"
	mv "$out" "$E2E_BIN"
	log "built in $(($(date +%s) - start)) s: $E2E_BIN"
}

# The image archive for a reference, under target/images/e2e.
archive_of() { # reference
	echo "$E2E_IMAGES_DIR/$(tr '/:' '__' <<<"$1").tar"
}

# busybox for the stand-ins: Debian sid's busybox-static (static, so it runs anywhere), cached
# beside containerd's under $NODELET_TEST_CONTAINERD_CACHE. Not the host's: bookworm's 1.35 ash
# drops variables whose names are not shell names (`data-1`) from the environment it passes
# on, where the upstream image's 1.37 (and sid's 1.38) keep them, which the envFrom tests read.
BUSYBOX_DEBIAN_VERSION="${NODELET_CONFORMANCE_BUSYBOX_VERSION:-1:1.38.0-3+b1}"
sid_busybox() {
	local dest="$NODELET_TEST_CONTAINERD_CACHE/busybox-static-${BUSYBOX_DEBIAN_VERSION#*:}"
	if ! [ -e "$dest/.complete" ]; then
		mkdir -p "$NODELET_TEST_CONTAINERD_CACHE"
		sid_update "$NODELET_TEST_CONTAINERD_CACHE/apt-sid"
		sid_unpack busybox-static "$BUSYBOX_DEBIAN_VERSION" usr/bin/busybox "$dest" >/dev/null
	fi
	echo "$dest/usr/bin/busybox"
}

# Debian packages the stand-ins take programs from, unpacked (not installed) under the stage.
DEBS=(netcat-openbsd)

unpack_debs() { # stage
	local deb="$1/debs" pkg
	mkdir -p "$deb"
	for pkg in "${DEBS[@]}"; do
		[ -d "$deb/$pkg" ] && continue
		(cd "$deb" && apt-get download "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed"
		rm -rf "$deb/$pkg.tmp"
		dpkg-deb -x "$deb/${pkg}"_*.deb "$deb/$pkg.tmp" && mv "$deb/$pkg.tmp" "$deb/$pkg"
	done
}

# Appends to FILES the --file arguments for a dynamically linked program at DEST and the
# libraries it loads, at the paths the loader looks for them (ldd); each library once.
declare -A IMAGE_LIBS
FILES=()
with_libs() { # binary dest
	local lib
	FILES+=(--file "$2=$(readlink -f "$1"):0755")
	while read -r lib; do
		[ -n "$lib" ] && [ -z "${IMAGE_LIBS[$lib]:-}" ] || continue
		IMAGE_LIBS[$lib]=1
		FILES+=(--file "$lib=$(readlink -f "$lib"):0755")
	done < <(ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
}

# The layout every stand-in shares: busybox with a link for each applet, except the applets
# named (the image carries the real program), and nmeter, the applet Debian's build lacks.
base_layout() { # applets to leave out...
	local skip=" $* " applet
	printf '%s\n' --file "/bin/busybox=$BUSYBOX:0755" --file "/bin/nmeter=$E2E_BIN/nmeter:0755" \
		--dir /tmp:1777 --dir /var/tmp:1777 --dir /root:0700 --dir /proc:0555 --dir /sys:0555 \
		--dir /dev:0755 --dir /etc:0755 \
		--symlink /usr/bin=../bin --symlink /sbin=bin --symlink /usr/sbin=../bin \
		--env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for applet in $("$BUSYBOX" --list | sort); do
		case "$applet" in busybox | "" | *[!A-Za-z0-9_.\[-]*) continue ;; esac
		[[ "$skip" == *" $applet "* ]] || printf '%s\n' --symlink "/bin/$applet=busybox"
	done
}

# One stand-in, named as in registry.k8s.io (the suite's names before the remapping).
STAND_INS=()
stand_in() { # repository:tag build-image arguments...
	local ref="registry.k8s.io/$1"
	shift
	python3 "$REPO_DIR/images/build-image.py" --name "$ref" --out "$(archive_of "$ref")" --workdir / "$@" >/dev/null ||
		die "building the stand-in $ref failed"
	STAND_INS+=("$ref")
}

cmd_images() {
	e2e_built || die "run scripts/conformance.sh build first"
	local stage="$E2E_IMAGES_DIR/stage" kmod
	kmod="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION"
	mkdir -p "$E2E_IMAGES_DIR" "$stage"
	BUSYBOX="$(sid_busybox)"
	unpack_debs "$stage"
	local plain=() without_nc=()
	mapfile -t plain < <(base_layout)
	mapfile -t without_nc < <(base_layout nc bash sh)
	# agnhost's image: the binary at /agnhost (and agnhost-2), its user and group for the
	# SupplementalGroups tests, /uploads for netexec; busybox for the shell tools, Debian's curl,
	# netcat-openbsd (UDP) and bash where the upstream image has Alpine's. /bin/sh is bash:
	# Debian's busybox ash runs its own applets before any program on PATH (`nc` would be
	# busybox's, without UDP), where the upstream image's Alpine ash runs the programs.
	printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$stage/agnhost-passwd"
	printf 'root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n' >"$stage/agnhost-group"
	FILES=()
	IMAGE_LIBS=()
	with_libs "$(command -v curl)" /bin/curl
	with_libs "$stage/debs/netcat-openbsd/bin/nc.openbsd" /bin/nc
	with_libs "$(command -v bash)" /bin/bash
	# The upstream image's certificate for netexec's HTTPS (the https lifecycle hook tests).
	local agnhost_files=(
		--file "/agnhost=$E2E_BIN/agnhost:0755" --symlink /agnhost-2=agnhost
		--file "/localhost.crt=$kmod/test/images/agnhost/porter/localhost.crt:0644"
		--file "/localhost.key=$kmod/test/images/agnhost/porter/localhost.key:0644"
		--file "/etc/passwd=$stage/agnhost-passwd:0644" --file "/etc/group=$stage/agnhost-group:0644"
		--dir /uploads:0755 "${FILES[@]}" "${without_nc[@]}" --symlink /bin/sh=bash
	)
	local agnhost
	for agnhost in "agnhost:$AGNHOST_VERSION" agnhost:2.55; do
		stand_in "e2e-test-images/$agnhost" "${agnhost_files[@]}" \
			--entrypoint '["/agnhost"]' --cmd '["pause"]'
	done
	# kitten: agnhost's image with a web page, for the image volume tests.
	stand_in e2e-test-images/kitten:1.8 "${agnhost_files[@]}" \
		--file "/kitten.jpg=$kmod/test/images/kitten/html/kitten.jpg:0644" \
		--file "/data.json=$kmod/test/images/kitten/html/data.json:0644" \
		--entrypoint '["/agnhost"]' --cmd '["test-webserver"]'
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$stage/busybox-passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/busybox-group"
	local busybox_files=(--file "/etc/passwd=$stage/busybox-passwd:0644" --file "/etc/group=$stage/busybox-group:0644" "${plain[@]}")
	stand_in "e2e-test-images/busybox:$BUSYBOX_TAG" "${busybox_files[@]}" --cmd '["sh"]'
	# nonroot: busybox as user 1234 (test/images/nonroot); nonewprivs: nnp, set-user-ID root.
	stand_in e2e-test-images/nonroot:1.5 "${busybox_files[@]}" --user 1234 --cmd '["sh"]'
	stand_in e2e-test-images/nonewprivs:1.4 "${busybox_files[@]}" \
		--file "/usr/local/bin/nnp=$E2E_BIN/nnp:04755" --cmd '["nnp"]'
	# glibc-dns-testing (Debian with dnsutils upstream): the FQDN tests run `hostname -f`,
	# here Debian's hostname with its glibc, under Debian's /bin/sh, dash (busybox's ash would
	# run its own hostname applet).
	FILES=()
	IMAGE_LIBS=()
	with_libs "$(command -v hostname)" /bin/hostname
	with_libs "$(command -v dash)" /bin/dash
	local without_hostname=()
	mapfile -t without_hostname < <(base_layout hostname sh)
	stand_in e2e-test-images/glibc-dns-testing:2.1.1 \
		--file "/etc/passwd=$stage/busybox-passwd:0644" --file "/etc/group=$stage/busybox-group:0644" \
		"${FILES[@]}" "${without_hostname[@]}" --symlink /bin/sh=dash --cmd '["sh"]'
	# nginx: the mirror-pod tests need a server on port 80 that stays up; busybox's httpd serves.
	mkdir -p "$stage/html"
	printf '<html><body>nginx stand-in</body></html>\n' >"$stage/html/index.html"
	stand_in e2e-test-images/nginx:1.27.0-2 "${busybox_files[@]}" \
		--file "/usr/share/nginx/html/index.html=$stage/html/index.html:0644" \
		--cmd '["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"]'
	[ -x "$IMAGES_TARGET_DIR/stage/pause" ] || "$REPO_DIR/scripts/images.sh" build
	stand_in "pause:$PAUSE_TAG" --file "/pause=$IMAGES_TARGET_DIR/stage/pause:0755" --entrypoint '["/pause"]'
	log "images in $E2E_IMAGES_DIR: ${STAND_INS[*]}"
}

# The suite's images from a registry of their own: no authentication (the tests' pods have no
# pull secrets), plain HTTP on 127.0.0.1, as containerd's hosts.toml for it says.
E2E_REGISTRY_PORT="${NODELET_CONFORMANCE_REGISTRY_PORT:-$((NODELET_TEST_REGISTRY_PORT + 1))}"
E2E_REGISTRY="127.0.0.1:$E2E_REGISTRY_PORT"
E2E_REGISTRY_DIR="$NODELET_TEST_VAR/e2e-registry"

e2e_registry_up() {
	curl -fsS --max-time 5 "http://$E2E_REGISTRY/v2/" >/dev/null 2>&1
}

e2e_registry_start() {
	command -v docker-registry >/dev/null || die "docker-registry is not installed (run scripts/install-deps.sh)"
	mkdir -p "$E2E_REGISTRY_DIR/data" "$REGISTRY_HOSTS_DIR/$E2E_REGISTRY"
	printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
		"$E2E_REGISTRY" "$E2E_REGISTRY" >"$REGISTRY_HOSTS_DIR/$E2E_REGISTRY/hosts.toml"
	e2e_registry_up && return 0
	printf 'version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\nstorage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}\nhttp: {addr: "%s"}\n' \
		"$E2E_REGISTRY_DIR/data" "$E2E_REGISTRY" >"$E2E_REGISTRY_DIR/config.yml"
	setsid docker-registry serve "$E2E_REGISTRY_DIR/config.yml" </dev/null >>"$E2E_REGISTRY_DIR/registry.log" 2>&1 8>&- 9>&- &
	echo $! >"$E2E_REGISTRY_DIR/registry.pid"
	local i
	for i in $(seq 1 150); do
		e2e_registry_up && return 0
		sleep 0.2
	done
	die "the suite's registry did not answer on http://$E2E_REGISTRY (log: $E2E_REGISTRY_DIR/registry.log)"
}

e2e_registry_stop() {
	local pid
	pid="$(cat "$E2E_REGISTRY_DIR/registry.pid" 2>/dev/null || true)"
	if [ -n "$pid" ] && [[ "$(proc_cmdline "$pid")" == *"$E2E_REGISTRY_DIR/config.yml"* ]]; then
		kill "$pid" 2>/dev/null || true
	fi
	rm -f "$E2E_REGISTRY_DIR/registry.pid"
}

# The suite's registries remapped to ours (KUBE_TEST_REPO_LIST), every stand-in pushed there
# under its remapped name.
e2e_registry_push() { # repo-list file
	command -v skopeo >/dev/null || die "skopeo is not installed (run scripts/install-deps.sh)"
	local registry
	for registry in promoterE2eRegistry:/e2e-test-images gcRegistry: gcEtcdRegistry: \
		buildImageRegistry:/build-image sigStorageRegistry:/sig-storage dockerLibraryRegistry:/library; do
		echo "${registry%%:*}: $E2E_REGISTRY${registry#*:}"
	done >"$1"
	local ref
	for ref in "${STAND_INS[@]}"; do
		skopeo copy --quiet --dest-tls-verify=false "oci-archive:$(archive_of "$ref")" \
			"docker://$E2E_REGISTRY/${ref#registry.k8s.io/}" || die "pushing $ref failed"
	done
}

# A client certificate of system:node:<node> signed by the cluster CA, and its kubeconfig.
node_kubeconfig() { # node dir
	local node="$1" dir="$2" ca ca_key server
	ca="$NODELET_TEST_K8S_CA"
	ca_key="$NODELET_TEST_K8S_CA_KEY"
	server="$NODELET_TEST_K8S_SERVER"
	openssl ecparam -name prime256v1 -genkey -noout -out "$dir/node.key" 2>/dev/null
	openssl req -new -key "$dir/node.key" -subj "/O=system:nodes/CN=system:node:$node" -out "$dir/node.csr" 2>/dev/null
	printf '[ext]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$dir/node.ext"
	openssl x509 -req -in "$dir/node.csr" -CA "$ca" -CAkey "$ca_key" -CAcreateserial -CAserial "$dir/node.srl" \
		-days 7 -sha256 -extfile "$dir/node.ext" -extensions ext -out "$dir/node.crt" 2>/dev/null ||
		die "cannot sign the node's certificate"
	cat >"$dir/node.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: conformance
  cluster: {server: "$server", certificate-authority: "$ca"}
users:
- name: node
  user: {client-certificate: "$dir/node.crt", client-key: "$dir/node.key"}
contexts:
- name: conformance
  context: {cluster: conformance, user: node}
current-context: conformance
EOF
}

# The agent's configuration: the same KubeletConfiguration for nodelet and the kubelet, as a
# kubeadm node would run them: the kubelet API on the node's address, webhook authentication
# and authorization through the API server, the logs where the suite reads them (the default
# podLogsDir, /var/log/pods, and the links in /var/log/containers). The suite reads it, changes
# it and writes it back (util_kubeletconfig.go) where it runs: kubelet-config in its working
# directory, the run's output directory.
agent_config() { # agent dir
	local agent="$1" dir="$2"
	cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CTD_SOCK
staticPodPath: $dir/manifests
address: 0.0.0.0
# A whole run serves the kubelet API on the kubelet's ports, where the suite looks for it on
# loopback (/configz on 10250, /healthz on 10248 while it restarts the agent); the subset on
# ports of its own.
port: $AGENT_PORT
# The suite reads /stats/summary through the read-only port (where /configz says), and
# /metrics/cadvisor through localhost:10255, the default.
readOnlyPort: $READ_ONLY_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ_PORT
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
# The shared disk may run above the kubelet's 85 % image GC threshold: GC would delete the
# images of the suite, and the imagefs signals would evict.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi"}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $NODELET_TEST_K8S_CA}
authorization:
  mode: Webhook
EOF
	if [ "$agent" = kubelet ]; then
		# The kubelet kills the processes of every pod cgroup under its kubepods that is not one
		# of its pods: on this shared machine its kubepods is a subtree of its own, so that the
		# pods of nodelet's test instances (under /kubepods) are not its orphans. The tests
		# that read /kubepods directly fail on it for that reason (docs/conformance.md).
		printf 'cgroupRoot: /kubelet-conformance\n'
	fi
}

# The agent as the unit `kubelet-conformance` of the run's systemctl stand-in
# (scripts/conformance/systemctl, through which the suite stops and restarts it): its command in
# $unit/run, both agents with the kubelet's command line (nodelet takes it as the kubelet does).
agent_unit() { # agent dir node config unit
	local agent="$1" dir="$2" node="$3" config="$4" unit="$5" binary environment=""
	case "$agent" in
	nodelet)
		binary="$REPO_DIR/target/debug/nodelet"
		# Built every time (a no-op when current): a binary left from an older checkout
		# would be tested instead of the sources.
		(cd "$REPO_DIR" && cargo build --locked --bin nodelet >&2)
		environment="RUST_LOG=nodelet=debug,info"
		;;
	kubelet)
		binary="$NODELET_TEST_K8S_BIN/kubelet"
		[ -x "$binary" ] || die "no kubelet in $NODELET_TEST_K8S_BIN (scripts/k8s.sh build)"
		local hierarchy
		# Its cgroupRoot must exist (every v1 hierarchy, or the v2 tree).
		for hierarchy in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
			if [ -e "$hierarchy/cgroup.procs" ]; then mkdir -p "$hierarchy/kubelet-conformance"; fi
		done
		;;
	*) die "unknown agent $agent (nodelet or kubelet)" ;;
	esac
	mkdir -p "$unit"
	cat >"$unit/run" <<EOF
#!/bin/sh
exec env $environment "$binary" --config "$config" --kubeconfig "$dir/node.kubeconfig" \\
	--root-dir "$dir/root" --cert-dir "$dir/pki" --hostname-override "$node" --v=2
EOF
	chmod +x "$unit/run"
}

# The run's systemctl stand-in on the agent's unit (`kubelet-conformance`).
unit_ctl() { # unit command
	# The agent it starts must not hold the run's lock.
	NODELET_CONFORMANCE_UNIT="$1" "$REPO_DIR/scripts/conformance/systemctl" "$2" kubelet-conformance \
		{CONFORMANCE_LOCK}>&-
}

cmd_run() {
	require_root
	local agent=nodelet
	if [ "${1:-}" = --agent ]; then
		agent="${2:?--agent nodelet|kubelet}"
		shift 2
	fi
	case "$agent" in nodelet | kubelet) ;; *) die "unknown agent $agent (nodelet or kubelet)" ;; esac
	# One run at a time on this host, whatever its instance: every run's agent keeps its pods'
	# logs in the host's /var/log/pods and /var/log/containers (where the suite reads them) and
	# removes the log directories of pods it does not know, so two agents at once lose each
	# other's logs; a whole run also takes the kubelet's ports on loopback.
	local lock=/run/nodelet-conformance.lock
	exec {CONFORMANCE_LOCK}>"$lock"
	if ! flock -n "$CONFORMANCE_LOCK"; then
		log "another conformance run holds $lock (pid $(fuser "$lock" 2>/dev/null | xargs)); waiting for it"
		flock -w "${NODELET_CONFORMANCE_LOCK_WAIT:-7200}" "$CONFORMANCE_LOCK" ||
			die "another conformance run still holds $lock"
	fi
	local focus="${1:-\\[NodeConformance\\]}" skip="${2-\\[Flaky\\]}"
	local procs="${NODELET_CONFORMANCE_PROCS:-4}" out="${NODELET_CONFORMANCE_OUT:-$OUT_DIR/$agent}"
	e2e_built || cmd_build
	cmd_images
	rm -rf "$out"
	mkdir -p "$out"
	# What the run starts to outlive it (containerd, the control plane, the registry) must not
	# hold its lock: the next run would wait for them.
	eval "$("$REPO_DIR/scripts/test-env.sh" up --no-registry {CONFORMANCE_LOCK}>&-)"
	"$REPO_DIR/scripts/k8s.sh" up >&2 {CONFORMANCE_LOCK}>&-
	eval "$("$REPO_DIR/scripts/k8s.sh" env)"
	e2e_registry_start {CONFORMANCE_LOCK}>&-
	e2e_registry_push "$out/repo-list.yaml"
	# The node pulls what was just pushed, not an older build cached under the same tag.
	local ref
	for ref in "${STAND_INS[@]}"; do
		ctr_local images rm "$E2E_REGISTRY/${ref#registry.k8s.io/}" >/dev/null 2>&1 || true
	done

	# The suite talks to the API server with a bearer token (its node e2e mode): a service
	# account bound to cluster-admin.
	local k=("$NODELET_TEST_K8S_BIN/kubectl" --kubeconfig "$NODELET_TEST_KUBECONFIG")
	"${k[@]}" -n kube-system get serviceaccount e2e-admin >/dev/null 2>&1 ||
		"${k[@]}" -n kube-system create serviceaccount e2e-admin >/dev/null
	"${k[@]}" get clusterrolebinding e2e-admin >/dev/null 2>&1 ||
		"${k[@]}" create clusterrolebinding e2e-admin --clusterrole=cluster-admin \
			--serviceaccount=kube-system:e2e-admin >/dev/null
	local token
	token="$("${k[@]}" -n kube-system create token e2e-admin --duration=12h)"
	# The suite wants a cluster of one node: nodes of earlier runs go.
	"${k[@]}" delete nodes --all --wait=false >/dev/null 2>&1 || true

	local node dir
	node="$(hostname | tr '[:upper:]' '[:lower:]')"
	dir="$NODELET_TEST_VAR/conformance"
	# A run that ended with pods still set up leaves their volumes mounted.
	findmnt -rn -o TARGET | { grep "^$dir/" || true; } | sort -r | xargs -r umount -l
	rm -rf "$dir"
	mkdir -p "$dir/manifests"
	node_kubeconfig "$node" "$dir"
	AGENT_PORT="${NODELET_CONFORMANCE_PORT:-10250}"
	HEALTHZ_PORT="${NODELET_CONFORMANCE_HEALTHZ_PORT:-10248}"
	READ_ONLY_PORT="${NODELET_CONFORMANCE_READ_ONLY_PORT:-10255}"
	# The suite runs where its binary is (ginkgo's working directory for a compiled suite):
	# a link in the output directory, where it finds kubelet-config.
	ln -s "$E2E_BIN/e2e_node.test" "$out/e2e_node.test"
	local config="$out/kubelet-config" unit="$out/unit"
	agent_config "$agent" "$dir" >"$config"
	agent_unit "$agent" "$dir" "$node" "$config" "$unit"
	: >"$unit/log"
	ln -s unit/log "$out/$agent.log"
	unit_ctl "$unit" start
	trap 'unit_ctl "'"$unit"'" stop; e2e_registry_stop' EXIT
	local i
	for i in $(seq 1 180); do
		"${k[@]}" get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null |
			grep -qx True && break
		unit_ctl "$unit" is-active >/dev/null || die "$agent exited (log: $out/$agent.log)"
		sleep 1
	done

	log "running e2e_node.test against $agent (focus $focus${skip:+, skip $skip}, $procs processes); report in $out"
	local started status=0 commit
	started=$(date +%s)
	commit="$(git -C "$REPO_DIR" rev-parse --short HEAD)$(git -C "$REPO_DIR" diff --quiet HEAD -- src || echo '+changes')"
	local ginkgo=(
		"$E2E_BIN/ginkgo" run --procs="$procs" --focus="$focus" --timeout="${NODELET_CONFORMANCE_TIMEOUT:-3h}"
		--junit-report=junit.xml --output-dir="$out" --no-color -v
	)
	[ -z "$skip" ] || ginkgo+=(--skip="$skip")
	(cd "$out" && KUBE_TEST_REPO_LIST="$out/repo-list.yaml" NODELET_CONFORMANCE_UNIT="$unit" \
		PATH="$REPO_DIR/scripts/conformance:$PATH" "${ginkgo[@]}" "$out/e2e_node.test" -- \
		--start-services=false --prepull-images=false \
		--host="$NODELET_TEST_K8S_SERVER" --bearer-token="$token" --node-name="$node" \
		--container-runtime-endpoint="unix://$CTD_SOCK" --report-dir="$out") >"$out/e2e.log" 2>&1 || status=$?
	{
		echo "agent=$agent"
		echo "commit=$commit"
		echo "date=$(date -u +%Y-%m-%d)"
		echo "focus=$focus"
		echo "skip=$skip"
		echo "procs=$procs"
		echo "seconds=$(($(date +%s) - started))"
		echo "load=$(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$out/meta.txt"
	tail -n 30 "$out/e2e.log"
	[ "${NODELET_CONFORMANCE_REPORT:-1}" = 0 ] || cmd_report
	return "$status"
}

# The subset the README's test command runs (scripts/test.sh): pods, probes, lifecycle hooks,
# init containers, volumes, the downward API, security context and the container runtime, logs
# over websockets and recursive read-only mounts (a Bidirectional mount), a few minutes with 4
# processes. Each entry is a spec name's fixed text.
SUBSET=(
	"[sig-node] Containers should use the image defaults if command and args are blank"
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars"
	"[sig-node] InitContainer should invoke init containers on a RestartNever pod"
	"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly"
	"should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set"
	"[sig-node] Probing container should be restarted with a exec \"cat /tmp/health\" liveness probe"
	"[sig-storage] EmptyDir volumes should support (non-root,0666,tmpfs)"
	"[sig-storage] Projected downwardAPI should provide container's cpu limit"
	"[sig-storage] ConfigMap should be consumable from pods in volume with mappings [Conformance]"
	"[sig-storage] Secrets should be consumable from pods in volume with defaultMode set"
	"should run the container with uid 65534"
	"[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs"
	"[sig-node] Pods should get a host IP"
	"[sig-node] Variable Expansion should allow substituting values in a container's args"
	"[sig-node] Pods should support retrieving logs from the container over websockets"
	"should accept recursive read-only mounts"
	"[sig-node] ContainerLogPath Pod with a container printed log to stdout should print log to correct log path"
	"when creating a static pod with EnvFiles should be able to consume variables from a file"
)

# Runs the subset against nodelet; fails when any of its specs fails. The report stays in
# target/conformance/subset (docs/conformance.md is the whole run's).
cmd_subset() {
	local focus="" entry
	for entry in "${SUBSET[@]}"; do
		focus+="${focus:+|}$(printf '%s' "$entry" | sed 's/[][\\.^$*+?(){}|/]/\\&/g')"
	done
	# Not the kubelet's ports: a whole run may go on beside. None of its specs restarts the
	# agent (the only reader of the healthz port).
	NODELET_CONFORMANCE_PORT="${NODELET_CONFORMANCE_PORT:-$((NODELET_TEST_K8S_PORT_BASE + 10))}" \
		NODELET_CONFORMANCE_HEALTHZ_PORT="${NODELET_CONFORMANCE_HEALTHZ_PORT:-0}" \
		NODELET_CONFORMANCE_READ_ONLY_PORT="${NODELET_CONFORMANCE_READ_ONLY_PORT:-$((NODELET_TEST_K8S_PORT_BASE + 11))}" \
		NODELET_CONFORMANCE_OUT="$OUT_DIR/subset" NODELET_CONFORMANCE_REPORT=0 cmd_run --agent nodelet "$focus" ""
	python3 - "$OUT_DIR/subset/junit.xml" "${#SUBSET[@]}" <<'EOF'
import sys, xml.etree.ElementTree as ET
cases = [c for c in ET.parse(sys.argv[1]).getroot().iter("testcase")
         if "] " in c.get("name", "") and not c.get("name", "").startswith("[Synchronized")
         and not c.get("name", "").startswith("[ReportAfterSuite]")]
ran = [c for c in cases if c.find("skipped") is None]
failed = [c.get("name") for c in ran if c.find("failure") is not None or c.find("error") is not None]
print(f"conformance subset: {len(ran)} specs ran, {len(failed)} failed")
for name in failed:
    print(f"  FAILED: {name}")
sys.exit(1 if failed or len(ran) < int(sys.argv[2]) else 0)
EOF
}

# Stops what `run` started: the agent is gone already; the registry, control plane, containerd.
cmd_down() {
	e2e_registry_stop
	"$REPO_DIR/scripts/k8s.sh" down || true
	"$REPO_DIR/scripts/test-env.sh" down || true
}

# The runs of one kind for `report`: each agent's first run in target/conformance/<agent><kind>,
# then the runs of what failed after fixes (<agent><kind>-rerun, -rerun2, ...), each replacing the
# results before it; as the report script's arguments.
report_runs() { # kind (empty: the whole runs; -serial: the [Serial]/[Slow]/[Disruptive] specs)
	local agent dir
	for agent in nodelet kubelet; do
		for dir in "$OUT_DIR/$agent$1" "$OUT_DIR/$agent$1-rerun" "$OUT_DIR/$agent$1"-rerun[0-9]*; do
			if [ -s "$dir/junit.xml" ]; then printf '%s\n' "--$agent" "$dir"; fi
		done
	done
}

cmd_report() {
	local kind doc wrote="" args
	# docs/conformance.md from the whole runs, docs/conformance-serial.md from the runs of the
	# [Serial], [Slow] and [Disruptive] specs (NODELET_CONFORMANCE_OUT=target/conformance/<agent>-serial).
	for kind in "" -serial; do
		mapfile -t args < <(report_runs "$kind")
		[ "${#args[@]}" -gt 0 ] || continue
		doc="docs/conformance$kind.md"
		[ -z "$kind" ] || args+=(--serial)
		python3 "$REPO_DIR/scripts/conformance-report.py" "${args[@]}" \
			--causes "$REPO_DIR/docs/conformance-causes.tsv" --out "$REPO_DIR/$doc"
		log "wrote $doc"
		wrote=1
	done
	[ -n "$wrote" ] || die "no report in $OUT_DIR/{nodelet,kubelet}{,-serial}/junit.xml (run first)"
}

case "${1:-}" in
build) cmd_build ;;
images) cmd_images ;;
run)
	shift
	cmd_run "$@"
	;;
report) cmd_report ;;
subset) cmd_subset ;;
down) cmd_down ;;
*)
	sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0" >&2
	exit 2
	;;
esac
