#!/usr/bin/env bash
# Kubernetes' own node conformance tests against nodelet (issue 39): the `[NodeConformance]`
# tests of k8s.io/kubernetes v1.37.2's node e2e suite (test/e2e_node, which also runs the shared
# node tests of test/e2e/common), run by the suite's own binary against nodelet joined as the
# only node to the real control plane of scripts/k8s.sh, on the project's containerd.
#
#   conformance.sh build    build e2e_node.test and agnhost from tests/support/k8s (Go module
#                           proxy) into $NODELET_TEST_K8S_CACHE/v1.37.2/e2e; a no-op once built
#   conformance.sh images   build the images the tests name, as OCI archives under
#                           target/images/e2e (stand-ins made here: agnhost from its Go source,
#                           busybox from Debian's busybox-static, pause from images/pause)
#   conformance.sh run [FOCUS [SKIP]]
#                           start an instance of its own (containerd, control plane, nodelet),
#                           import the images, run e2e_node.test with the ginkgo focus (default
#                           `\[NodeConformance\]`) and skip regexps; the JUnit report and the logs
#                           in target/conformance/, the table in docs/conformance.md (the causes
#                           of failures from docs/conformance-causes.tsv)
#
# The instance: NODELET_TEST_VAR=/var/lib/nodelet-conformance, bridge nodeletc0, 10.94.0.0/16,
# registry port 5450, control plane port base 19443 (each overridable as for scripts/test-env.sh).
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
# The suite's own versions of the images (test/utils/image/manifest.go, e2e_node/image_list.go).
AGNHOST_VERSION=2.66.1
BUSYBOX_TAG=1.37.0-2
PAUSE_TAG=3.10.2
E2E_IMAGES_DIR="$REPO_DIR/target/images/e2e"
OUT_DIR="$REPO_DIR/target/conformance"
E2E_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
GO_PARALLEL="${NODELET_TEST_K8S_GO_PARALLEL:-2}"

e2e_desired_stamp() {
	echo "kubernetes $K8S_VERSION e2e_node.test agnhost"
	echo "flags -trimpath -buildvcs=false -ldflags $E2E_LDFLAGS"
	echo "go.sum $(sha256sum <"$K8S_MOD_DIR/go.sum" | cut -d' ' -f1)"
}

e2e_built() {
	[ "$(cat "$E2E_STAMP" 2>/dev/null || true)" = "$(e2e_desired_stamp)" ] &&
		[ -x "$E2E_BIN/e2e_node.test" ] && [ -x "$E2E_BIN/agnhost" ]
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
	log "building e2e_node.test and agnhost $K8S_VERSION (nice 19, -p $GO_PARALLEL)"
	(cd "$K8S_MOD_DIR" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 19 \
		go test -c -p "$GO_PARALLEL" -trimpath -buildvcs=false -ldflags "$E2E_LDFLAGS" \
		-o "$out/e2e_node.test" k8s.io/kubernetes/test/e2e_node) || die "building e2e_node.test failed"
	# agnhost runs in the images: static.
	(cd "$K8S_MOD_DIR" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 19 \
		go build -p "$GO_PARALLEL" -trimpath -buildvcs=false -ldflags "-s -w" \
		-o "$out/agnhost" k8s.io/kubernetes/test/images/agnhost) || die "building agnhost failed"
	e2e_desired_stamp >"$out/.stamp"
	rm -rf "$E2E_BIN"
	mv "$out" "$E2E_BIN"
	log "built in $(($(date +%s) - start)) s: $E2E_BIN"
}

# The image archive for a reference, under target/images/e2e.
archive_of() { # reference
	echo "$E2E_IMAGES_DIR/$(tr '/:' '__' <<<"$1").tar"
}

cmd_images() {
	e2e_built || die "run scripts/conformance.sh build first"
	local busybox applet links=() build="$REPO_DIR/images/build-image.py" stage="$E2E_IMAGES_DIR/stage"
	mkdir -p "$E2E_IMAGES_DIR" "$stage"
	busybox="$(busybox_static)" || die "no static busybox (apt-get install busybox-static)"
	for applet in $("$busybox" --list | sort); do
		case "$applet" in busybox | "" | *[!A-Za-z0-9_.\[-]*) continue ;; esac
		links+=(--symlink "/bin/$applet=busybox")
	done
	local base=(
		--file "/bin/busybox=$busybox:0755"
		--dir /tmp:1777 --dir /var/tmp:1777 --dir /root:0700 --dir /proc:0555 --dir /sys:0555
		--dir /dev:0755 --dir /etc:0755
		--symlink /usr/bin=../bin --symlink /sbin=bin --symlink /usr/sbin=../bin
		"${links[@]}" --env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	)
	# agnhost's image: the binary at /agnhost (and agnhost-2), its user and group for the
	# SupplementalGroups tests, /uploads for netexec; busybox for the shell tools the tests use.
	printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$stage/agnhost-passwd"
	printf 'root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n' >"$stage/agnhost-group"
	local agnhost
	for agnhost in "agnhost:$AGNHOST_VERSION" agnhost:2.55; do
		python3 "$build" --name "registry.k8s.io/e2e-test-images/$agnhost" \
			--out "$(archive_of "registry.k8s.io/e2e-test-images/$agnhost")" \
			--file "/agnhost=$E2E_BIN/agnhost:0755" --symlink /agnhost-2=agnhost \
			--file "/etc/passwd=$stage/agnhost-passwd:0644" --file "/etc/group=$stage/agnhost-group:0644" \
			--dir /uploads:0755 "${base[@]}" \
			--entrypoint '["/agnhost"]' --cmd '["pause"]' --workdir / >/dev/null
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$stage/busybox-passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/busybox-group"
	python3 "$build" --name "registry.k8s.io/e2e-test-images/busybox:$BUSYBOX_TAG" \
		--out "$(archive_of "registry.k8s.io/e2e-test-images/busybox:$BUSYBOX_TAG")" \
		--file "/etc/passwd=$stage/busybox-passwd:0644" --file "/etc/group=$stage/busybox-group:0644" \
		"${base[@]}" --cmd '["sh"]' --workdir / >/dev/null
	[ -x "$IMAGES_TARGET_DIR/stage/pause" ] || "$REPO_DIR/scripts/images.sh" build
	python3 "$build" --name "registry.k8s.io/pause:$PAUSE_TAG" \
		--out "$(archive_of "registry.k8s.io/pause:$PAUSE_TAG")" \
		--file "/pause=$IMAGES_TARGET_DIR/stage/pause:0755" \
		--entrypoint '["/pause"]' --workdir / >/dev/null
	log "images in $E2E_IMAGES_DIR"
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

cmd_run() {
	require_root
	local focus="${1:-\\[NodeConformance\\]}" skip="${2:-}"
	e2e_built || cmd_build
	cmd_images
	mkdir -p "$OUT_DIR"
	eval "$("$REPO_DIR/scripts/test-env.sh" up)"
	"$REPO_DIR/scripts/k8s.sh" up >&2
	eval "$("$REPO_DIR/scripts/k8s.sh" env)"
	local kubectl="$NODELET_TEST_K8S_BIN/kubectl" archive
	for archive in "$E2E_IMAGES_DIR"/*.tar; do
		ctr_local images import "$archive" >/dev/null || die "importing $archive failed"
	done

	# The suite talks to the API server with a bearer token (its node e2e mode): a service
	# account bound to cluster-admin.
	local k=("$kubectl" --kubeconfig "$NODELET_TEST_KUBECONFIG")
	"${k[@]}" -n kube-system get serviceaccount e2e-admin >/dev/null 2>&1 ||
		"${k[@]}" -n kube-system create serviceaccount e2e-admin >/dev/null
	"${k[@]}" get clusterrolebinding e2e-admin >/dev/null 2>&1 ||
		"${k[@]}" create clusterrolebinding e2e-admin --clusterrole=cluster-admin \
			--serviceaccount=kube-system:e2e-admin >/dev/null
	local token
	token="$("${k[@]}" -n kube-system create token e2e-admin --duration=12h)"
	# The suite wants a cluster of one node: nodes of earlier runs go.
	"${k[@]}" delete nodes --all --wait=false >/dev/null 2>&1 || true

	# nodelet, as a kubeadm node would run it: its own identity, the kubelet API on the node's
	# address, webhook authentication and authorization through the API server.
	local node dir port node_ip
	node="$(hostname | tr '[:upper:]' '[:lower:]')"
	dir="$NODELET_TEST_VAR/conformance"
	# A run that ended with pods still set up leaves their volumes mounted.
	findmnt -rn -o TARGET | { grep "^$dir/" || true; } | sort -r | xargs -r umount -l
	rm -rf "$dir"
	mkdir -p "$dir/manifests"
	node_kubeconfig "$node" "$dir"
	port=$((NODELET_TEST_K8S_PORT_BASE + 10))
	cat >"$dir/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CTD_SOCK
staticPodPath: $dir/manifests
rootDir: $dir/root
podLogsDir: $dir/logs
nodeName: $node
kubeconfig: $dir/node.kubeconfig
address: 0.0.0.0
port: $port
readOnlyPort: 0
healthzPort: 0
failCgroupV1: false
# The shared disk runs above the kubelet's 85 % image GC threshold: GC would delete the images
# imported for the suite (nothing can pull them again), and the imagefs signals would evict.
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
	local nodelet="$REPO_DIR/target/debug/nodelet"
	[ -x "$nodelet" ] || (cd "$REPO_DIR" && cargo build --locked --bin nodelet)
	RUST_LOG=nodelet=debug,info "$nodelet" run --config "$dir/config.yaml" \
		>"$OUT_DIR/nodelet.log" 2>&1 &
	local nodelet_pid=$!
	trap 'kill '"$nodelet_pid"' 2>/dev/null || true' EXIT
	local i
	for i in $(seq 1 120); do
		"${k[@]}" get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null |
			grep -qx True && break
		sleep 1
	done

	log "running e2e_node.test (focus $focus${skip:+, skip $skip}); report in $OUT_DIR"
	local args=(
		--start-services=false --prepull-images=false
		--host="$NODELET_TEST_K8S_SERVER" --bearer-token="$token" --node-name="$node"
		--container-runtime-endpoint="unix://$CTD_SOCK" --report-dir="$OUT_DIR"
		--ginkgo.focus="$focus" --ginkgo.junit-report="$OUT_DIR/junit.xml" --ginkgo.timeout="${NODELET_CONFORMANCE_TIMEOUT:-3h}"
		--ginkgo.no-color --ginkgo.v
	)
	[ -z "$skip" ] || args+=(--ginkgo.skip="$skip")
	local status=0
	(cd "$OUT_DIR" && "$E2E_BIN/e2e_node.test" "${args[@]}") >"$OUT_DIR/e2e.log" 2>&1 || status=$?
	tail -n 30 "$OUT_DIR/e2e.log"
	if [ -s "$OUT_DIR/junit.xml" ]; then
		python3 "$REPO_DIR/scripts/conformance-report.py" --nodelet "$OUT_DIR/junit.xml" \
			--commit "$(git -C "$REPO_DIR" rev-parse --short HEAD)" --focus "$focus${skip:+ (skip: $skip)}" \
			--causes "$REPO_DIR/docs/conformance-causes.tsv" --out "$REPO_DIR/docs/conformance.md"
		log "wrote docs/conformance.md"
	fi
	return "$status"
}

case "${1:-}" in
build) cmd_build ;;
images) cmd_images ;;
run)
	shift
	cmd_run "$@"
	;;
*)
	sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0" >&2
	exit 2
	;;
esac
