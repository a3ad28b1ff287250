#!/usr/bin/env bash
# A real Kubernetes control plane for nodelet's tests: kube-apiserver, kube-controller-manager and
# kube-scheduler built from Kubernetes' Go modules, metrics-server from its own, etcd from Debian's
# newest suite, started with their own certificates, ports and directories, so several instances
# run side by side.
#
#   k8s.sh build   build (or reuse from the cache) kube-apiserver, kube-controller-manager,
#                  kube-scheduler, kubelet and kubectl from tests/support/k8s/go.mod, metrics-server
#                  from tests/support/metrics-server/go.mod, and fetch etcd, into
#                  $NODELET_TEST_K8S_CACHE/<version>/bin (default /var/cache/nodelet-k8s); does
#                  nothing when the binaries there match their stamps (version, go.mod, go.sum, flags)
#   k8s.sh path    print that bin directory when it is complete (exit 1 otherwise); no network
#   k8s.sh mod     write tests/support/k8s/go.mod again (the staging modules' replace lines from
#                  k8s.io/kubernetes' own go.mod) and `go mod tidy` it; commit the result
#   k8s.sh up      start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
#                  metrics-server (the certificates, kubeconfigs and bootstrap token made once,
#                  then reused); waits until /readyz answers, creates the bootstrap token Secret
#                  and the node bootstrap RBAC bindings, registers metrics-server as the
#                  v1beta1.metrics.k8s.io APIService and waits until it is Available; a running
#                  instance with the same flags is left alone
#   k8s.sh down    stop this instance's processes (from its pidfiles); keeps certificates and data
#   k8s.sh purge   down, then delete the instance's certificates and etcd data
#   k8s.sh status  print whether it runs (exit 0) or not (exit 3)
#   k8s.sh env     print the environment tests need (eval "$(scripts/k8s.sh env)")
#   k8s.sh smoke   check a running instance: its /version, and a node's bootstrap CSR (made with
#                  the bootstrap token) approved and signed by the controller-manager
#
# Several instances: NODELET_TEST_VAR/NODELET_TEST_RUN (state under .../k8s) and
# NODELET_TEST_K8S_PORT_BASE (the apiserver's port; etcd client, etcd peer, controller-manager,
# scheduler and metrics-server take the next five).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

K8S_VERSION=v1.37.2
# Kubernetes' staging modules (k8s.io/api, client-go, ...) are released as v0.<minor>.<patch>.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"
K8S_MINOR="${K8S_VERSION#v1.}"
K8S_MINOR="${K8S_MINOR%%.*}"
# etcd: Debian's newest suite's etcd-server (3.5.30 runs on Debian 12's glibc). Should sid stop
# serving this version, the first build on a machine without it cached takes sid's current one.
ETCD_DEBIAN_VERSION="${NODELET_TEST_K8S_ETCD_DEBIAN_VERSION:-3.5.30-2}"

K8S_CACHE="${NODELET_TEST_K8S_CACHE:-/var/cache/nodelet-k8s}"
K8S_BIN="$K8S_CACHE/$K8S_VERSION/bin"
K8S_STAMP="$K8S_BIN/.stamp"
K8S_MOD_DIR="$REPO_DIR/tests/support/k8s"
K8S_APT_DIR="$K8S_CACHE/apt-sid"
# kubectl of the same release: the image's kubectl (1.32) is four minor versions behind the server.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# -s -w: no symbol table or DWARF, as Kubernetes' release builds.
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitMajor=1"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitMinor=$K8S_MINOR"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitTreeState=clean"
# The module proxy gives no commit: empty rather than the source's "$Format:%H$" placeholder.
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitCommit="
# metrics-server (the metrics.k8s.io API behind `kubectl top`), built from a module of its own:
# its k8s.io dependencies (v0.33) are older than the ones tests/support/k8s pins. Its version is
# the one that module requires; it has a stamp of its own, so adding or changing it leaves the
# control plane's binaries alone.
MS_MOD_DIR="$REPO_DIR/tests/support/metrics-server"
MS_VERSION="$(awk '$1 == "sigs.k8s.io/metrics-server" {print $2}' "$MS_MOD_DIR/go.mod" 2>/dev/null || true)"
MS_STAMP="$K8S_BIN/.stamp-metrics-server"
# metrics-server's release builds stamp client-go's version variables (its Makefile).
MS_LDFLAGS="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$MS_VERSION"
MS_LDFLAGS+=" -X k8s.io/client-go/pkg/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitCommit="
# The machine is shared: at most two packages compiled at once, at the lowest priority.
K8S_GO_PARALLEL="${NODELET_TEST_K8S_GO_PARALLEL:-2}"
# While this file exists no heavy step (compiling, downloading modules) starts.
QUIET_FILE=/run/nodelet-quiet

PORT_BASE="${NODELET_TEST_K8S_PORT_BASE:-16443}"
APISERVER_PORT="$PORT_BASE"
ETCD_CLIENT_PORT=$((PORT_BASE + 1))
ETCD_PEER_PORT=$((PORT_BASE + 2))
KCM_PORT=$((PORT_BASE + 3))
SCHEDULER_PORT=$((PORT_BASE + 4))
METRICS_SERVER_PORT=$((PORT_BASE + 5))
# Not the pod subnets of the test containerd instances (10.88-10.92/16); the first address is the
# `kubernetes` Service's and in the apiserver's serving certificate.
SERVICE_CIDR="${NODELET_TEST_K8S_SERVICE_CIDR:-10.97.0.0/16}"
CLUSTER_NAME=nodelet-test
# How long the controller-manager's signers make certificates. The signer backdates NotBefore by
# 5 minutes, and a kubelet renews at 70-90 % of NotAfter - NotBefore: with 150 s a node renews
# its client certificate 15-105 s after it was issued, and the old one expires at 150 s, so a
# test sees rotation through the real signer within two minutes. Shorter than 129 s, a fresh
# certificate would be due for renewal at once.
SIGNING_DURATION="${NODELET_TEST_K8S_SIGNING_DURATION:-150s}"

K8S_VAR="$NODELET_TEST_VAR/k8s"
K8S_RUN="$NODELET_TEST_RUN/k8s"
PKI="$K8S_VAR/pki"
ETCD_DATA="$K8S_VAR/etcd"
K8S_LOCK="$K8S_VAR/lock"
TOKEN_FILE="$K8S_VAR/bootstrap-token"
AUDIT_POLICY="$K8S_VAR/audit-policy.yaml"
AUDIT_LOG="$K8S_VAR/audit.log"
ADMIN_KUBECONFIG="$K8S_VAR/admin.kubeconfig"
SERVER="https://127.0.0.1:$APISERVER_PORT"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler metrics-server)
# The aggregated API metrics-server serves, what `kubectl top` reads.
METRICS_APISERVICE=v1beta1.metrics.k8s.io

wait_quiet() {
	local said=0
	while [ -e "$QUIET_FILE" ]; do
		[ "$said" = 1 ] || log "$QUIET_FILE exists: waiting before $1"
		said=1
		sleep 5
	done
}

# ---------------------------------------------------------------------------------------------
# build

# The replace lines for every staging module k8s.io/kubernetes replaces with ./staging/src/...
staging_replaces() {
	local kmod
	kmod="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/go.mod"
	[ -e "$kmod" ] || (cd / && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$K8S_VERSION") ||
		die "cannot download k8s.io/kubernetes@$K8S_VERSION"
	awk -v v="$K8S_STAGING_VERSION" '
		$2 == "=>" && $3 ~ /^\.\/staging\/src\// {printf "\t%s => %s %s\n", $1, $1, v}' "$kmod"
}

cmd_mod() {
	local replaces tool
	replaces="$(staging_replaces)"
	[ -n "$replaces" ] || die "no staging replace lines in k8s.io/kubernetes@$K8S_VERSION's go.mod"
	{
		cat <<EOF
// Generated by scripts/k8s.sh mod: builds Kubernetes $K8S_VERSION's control plane for nodelet's
// tests. Do not edit; edit the script and run it again.
module nodelet.test/k8s

go 1.26.0

require k8s.io/kubernetes $K8S_VERSION

tool (
EOF
		for tool in "${K8S_COMMANDS[@]}"; do
			printf '\tk8s.io/kubernetes/cmd/%s\n' "$tool"
		done
		cat <<EOF
)

// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with its own
// ./staging directories; a module that depends on it takes their $K8S_STAGING_VERSION releases.
replace (
$replaces
)
EOF
	} >"$K8S_MOD_DIR/go.mod"
	rm -f "$K8S_MOD_DIR/go.sum"
	(cd "$K8S_MOD_DIR" && GOTOOLCHAIN=local nice -n 19 go mod tidy) || die "go mod tidy failed"
	log "wrote $K8S_MOD_DIR/go.mod and go.sum"
}

# What the binaries in the cache must have been built from.
desired_stamp() {
	echo "kubernetes $K8S_VERSION"
	echo "commands ${K8S_COMMANDS[*]}"
	echo "flags -trimpath -buildvcs=false -ldflags $K8S_LDFLAGS"
	echo "go.mod $(sha256sum <"$K8S_MOD_DIR/go.mod" | cut -d' ' -f1)"
	echo "go.sum $(sha256sum <"$K8S_MOD_DIR/go.sum" | cut -d' ' -f1)"
	echo "etcd-server $ETCD_DEBIAN_VERSION"
}

built() {
	local command
	[ "$(cat "$K8S_STAMP" 2>/dev/null || true)" = "$(desired_stamp)" ] || return 1
	for command in "${K8S_COMMANDS[@]}" etcd; do
		[ -x "$K8S_BIN/$command" ] || return 1
	done
}

# What the metrics-server binary in the cache must have been built from.
ms_desired_stamp() {
	echo "metrics-server $MS_VERSION"
	echo "flags -trimpath -buildvcs=false -ldflags $MS_LDFLAGS"
	echo "go.mod $(sha256sum <"$MS_MOD_DIR/go.mod" | cut -d' ' -f1)"
	echo "go.sum $(sha256sum <"$MS_MOD_DIR/go.sum" | cut -d' ' -f1)"
}

ms_built() {
	[ "$(cat "$MS_STAMP" 2>/dev/null || true)" = "$(ms_desired_stamp)" ] && [ -x "$K8S_BIN/metrics-server" ]
}

# The sid etcd-server package, unpacked into $K8S_CACHE/etcd-<version>; prints its etcd binary.
fetch_etcd() {
	local dir="$K8S_CACHE/etcd-$ETCD_DEBIAN_VERSION" current
	if [ -e "$dir/.complete" ] && [ -x "$dir/usr/bin/etcd" ]; then
		echo "$dir/usr/bin/etcd"
		return 0
	fi
	sid_update "$K8S_APT_DIR"
	if ! sid_serves etcd-server "$ETCD_DEBIAN_VERSION"; then
		current="$(sid_version etcd-server)"
		[ -n "$current" ] || die "sid serves no etcd-server package"
		[ -z "${NODELET_TEST_K8S_ETCD_DEBIAN_VERSION:-}" ] ||
			die "sid does not serve etcd-server=$ETCD_DEBIAN_VERSION (it serves $current)"
		log "sid no longer serves etcd-server=$ETCD_DEBIAN_VERSION: taking its current $current"
		ETCD_DEBIAN_VERSION="$current"
		dir="$K8S_CACHE/etcd-$current"
	fi
	sid_unpack etcd-server "$ETCD_DEBIAN_VERSION" usr/bin/etcd "$dir"
	echo "$dir/usr/bin/etcd"
}

do_build() {
	local etcd out start packages=() command
	etcd="$(fetch_etcd)"
	# Built into a fresh directory, moved into place only when complete.
	out="$K8S_CACHE/$K8S_VERSION/.build"
	rm -rf "$out"
	mkdir -p "$out"
	for command in "${K8S_COMMANDS[@]}"; do
		packages+=("k8s.io/kubernetes/cmd/$command")
	done
	wait_quiet "go build"
	start=$(date +%s)
	log "building ${K8S_COMMANDS[*]} $K8S_VERSION (nice 19, -p $K8S_GO_PARALLEL; tens of minutes when cold)"
	(cd "$K8S_MOD_DIR" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 19 \
		go build -p "$K8S_GO_PARALLEL" -trimpath -buildvcs=false -ldflags "$K8S_LDFLAGS" -o "$out/" "${packages[@]}") ||
		die "go build failed"
	ln -s "$etcd" "$out/etcd"
	# metrics-server has a stamp of its own: keep it (a hard link) when it is still current.
	if ms_built; then
		ln "$K8S_BIN/metrics-server" "$out/metrics-server"
		cp "$MS_STAMP" "$out/"
	fi
	desired_stamp >"$out/.stamp"
	rm -rf "$K8S_BIN"
	mv "$out" "$K8S_BIN"
	log "built in $(($(date +%s) - start)) s: $K8S_BIN"
}

# metrics-server into the bin directory beside the others; the binary first, then its stamp.
do_ms_build() {
	local out="$K8S_CACHE/$K8S_VERSION/.build-metrics-server" start
	[ -n "$MS_VERSION" ] || die "$MS_MOD_DIR/go.mod requires no sigs.k8s.io/metrics-server"
	rm -rf "$out"
	mkdir -p "$out"
	wait_quiet "go build (metrics-server)"
	start=$(date +%s)
	log "building metrics-server $MS_VERSION (nice 19, -p $K8S_GO_PARALLEL; minutes when cold)"
	(cd "$MS_MOD_DIR" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 19 \
		go build -p "$K8S_GO_PARALLEL" -trimpath -buildvcs=false -ldflags "$MS_LDFLAGS" -o "$out/" \
		sigs.k8s.io/metrics-server/cmd/metrics-server) || die "go build (metrics-server) failed"
	rm -f "$MS_STAMP"
	mv "$out/metrics-server" "$K8S_BIN/metrics-server"
	ms_desired_stamp >"$MS_STAMP"
	rm -rf "$out"
	log "built metrics-server in $(($(date +%s) - start)) s: $K8S_BIN/metrics-server"
}

cmd_build() {
	built && ms_built && return 0
	command -v go >/dev/null || die "no go on PATH (Go 1.26 or later)"
	mkdir -p "$K8S_CACHE"
	exec 8>"$K8S_CACHE/.lock"
	flock 8
	built || do_build
	built || die "the build left $K8S_BIN incomplete"
	ms_built || do_ms_build
	ms_built || die "the build left $K8S_BIN/metrics-server incomplete"
}

cmd_path() {
	built && ms_built && echo "$K8S_BIN"
}

# ---------------------------------------------------------------------------------------------
# certificates and kubeconfigs

# A key (RSA 2048, as kubeadm's) unless it exists.
make_key() { # path
	[ -s "$1" ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
}

# A certificate signed by the cluster CA (or another CA of $PKI): name, subject, extensions (an
# openssl config section), the CA's name.
make_cert() { # name subject extensions [ca]
	local name="$1" subject="$2" ext="$3" ca="${4:-ca}" conf record
	record="$subject $ext"
	[ "$ca" = ca ] || record+=" ca=$ca"
	if [ -s "$PKI/$name.crt" ] && [ "$(cat "$PKI/$name.ext" 2>/dev/null || true)" = "$record" ]; then
		return 0
	fi
	make_key "$PKI/$name.key"
	conf="$(mktemp)"
	printf '[ext]\n%b\n' "$ext" >"$conf"
	openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$conf" -extensions ext -out "$PKI/$name.crt" 2>/dev/null ||
		die "cannot sign $name's certificate"
	rm -f "$conf" "$PKI/$name.csr"
	echo "$record" >"$PKI/$name.ext"
}

# The first address of a CIDR (the `kubernetes` Service's cluster IP).
first_ip() { # a.b.c.d/n
	local ip="${1%/*}" a b c d
	IFS=. read -r a b c d <<<"$ip"
	echo "$a.$b.$c.$((d + 1))"
}

# The address metrics-server listens on: the API server dials it from the endpoints of the
# APIService's Service (--enable-aggregator-routing: there is no kube-proxy or service network
# here), and an endpoint address may not be a loopback one. The address of the default route's
# interface, else the first global one; NODELET_TEST_K8S_HOST_IP chooses another.
host_ip() {
	local ip="${NODELET_TEST_K8S_HOST_IP:-}"
	[ -n "$ip" ] || ip="$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1)"
	[ -n "$ip" ] || ip="$(ip -4 -o addr show scope global 2>/dev/null | awk '{sub("/.*", "", $4); print $4; exit}')"
	case "$ip" in
	"" | 127.*) die "no non-loopback IPv4 address on this host for metrics-server (set NODELET_TEST_K8S_HOST_IP)" ;;
	esac
	echo "$ip"
}

kubeconfig() { # file user
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $SERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: $2@$CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $2
current-context: $2@$CLUSTER_NAME
EOF
}

# A self-signed CA unless it exists: name (of its files in $PKI), common name.
make_ca() { # name cn
	[ -s "$PKI/$1.crt" ] && return 0
	make_key "$PKI/$1.key"
	openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/$1.crt" 2>/dev/null || die "cannot make the CA $1"
}

prepare_files() {
	mkdir -p "$PKI" "$K8S_RUN" "$ETCD_DATA" "$K8S_VAR/kube-controller-manager" "$K8S_VAR/kube-scheduler"
	chmod 700 "$PKI" "$ETCD_DATA"
	# The audit log records what nodes do (the requests of system:nodes with their bodies, and
	# of bootstrapping nodes, with their response codes), so a test can count what the Node
	# authorizer refused and see what nodelet sent.
	cat >"$AUDIT_POLICY" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  userGroups: ["system:nodes"]
- level: Metadata
  userGroups: ["system:bootstrappers"]
- level: None
POLICY
	make_ca ca "$CLUSTER_NAME-ca"
	# The aggregation layer's CA, as kubeadm's front-proxy-ca: the API server proxies to
	# metrics-server with a client certificate of it, and tells who asked in the
	# X-Remote-User/-Group headers, which metrics-server believes only from that certificate.
	make_ca front-proxy-ca front-proxy-ca
	local client="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
	make_cert apiserver "/CN=kube-apiserver" \
		"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:$(first_ip "$SERVICE_CIDR"),DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	make_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
	make_cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
	make_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
	make_cert kube-scheduler "/CN=system:kube-scheduler" "$client"
	make_cert front-proxy-client "/CN=front-proxy-client" "$client" front-proxy-ca
	# metrics-server: a user of its own (bound below to what upstream's manifests give its
	# ServiceAccount), also what it shows the nodes it scrapes; its serving certificate is the
	# cluster CA's, for the name the API server checks (<service>.<namespace>.svc) and the
	# address it listens on.
	make_cert metrics-server-client "/CN=metrics-server" "$client"
	make_cert metrics-server "/CN=metrics-server" \
		"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:metrics-server.kube-system.svc,IP:$HOST_IP"
	make_key "$PKI/sa.key"
	[ -s "$PKI/sa.pub" ] || openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	kubeconfig "$ADMIN_KUBECONFIG" admin
	kubeconfig "$K8S_VAR/kube-controller-manager.kubeconfig" kube-controller-manager
	kubeconfig "$K8S_VAR/kube-scheduler.kubeconfig" kube-scheduler
	kubeconfig "$K8S_VAR/metrics-server.kubeconfig" metrics-server-client
	# A bootstrap token, <6 of [a-z0-9]>.<16 of [a-z0-9]> (kubeadm's format; hex digits), made once.
	[ -s "$TOKEN_FILE" ] || echo "$(openssl rand -hex 3).$(openssl rand -hex 8)" >"$TOKEN_FILE"
	chmod 600 "$PKI"/*.key "$TOKEN_FILE"
}

# ---------------------------------------------------------------------------------------------
# processes

# The command line of a component, one argument a line.
component_args() { # component
	case "$1" in
	etcd)
		printf '%s\n' "$K8S_BIN/etcd" --name="$CLUSTER_NAME" --data-dir="$ETCD_DATA" \
			--listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
			--advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
			--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
			--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
			--initial-cluster="$CLUSTER_NAME=http://127.0.0.1:$ETCD_PEER_PORT" \
			--log-level=warn
		;;
	kube-apiserver)
		# VolumeBindMountOptions (alpha in 1.37): the API server keeps bindMountOptions only
		# with it on, and the tests need the field to reach nodelet to see it refused.
		printf '%s\n' "$K8S_BIN/kube-apiserver" \
			--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
			--bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" --advertise-address=127.0.0.1 \
			--endpoint-reconciler-type=none \
			--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
			--client-ca-file="$PKI/ca.crt" \
			--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
			--enable-bootstrap-token-auth \
			--service-cluster-ip-range="$SERVICE_CIDR" \
			--service-account-issuer=https://kubernetes.default.svc.cluster.local \
			--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
			--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
			--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
			--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
			--allow-privileged=true --profiling=false \
			--feature-gates=VolumeBindMountOptions=true \
			--audit-policy-file="$AUDIT_POLICY" --audit-log-path="$AUDIT_LOG" \
			--audit-log-maxsize=100 --audit-log-maxbackup=1 \
			--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
			--requestheader-allowed-names=front-proxy-client \
			--requestheader-extra-headers-prefix=X-Remote-Extra- \
			--requestheader-group-headers=X-Remote-Group \
			--requestheader-username-headers=X-Remote-User \
			--proxy-client-cert-file="$PKI/front-proxy-client.crt" \
			--proxy-client-key-file="$PKI/front-proxy-client.key" \
			--enable-aggregator-routing=true
		;;
	kube-controller-manager)
		printf '%s\n' "$K8S_BIN/kube-controller-manager" \
			--kubeconfig="$K8S_VAR/kube-controller-manager.kubeconfig" \
			--authentication-kubeconfig="$K8S_VAR/kube-controller-manager.kubeconfig" \
			--authorization-kubeconfig="$K8S_VAR/kube-controller-manager.kubeconfig" \
			--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
			--cert-dir="$K8S_VAR/kube-controller-manager" \
			--cluster-name="$CLUSTER_NAME" \
			--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
			--cluster-signing-duration="$SIGNING_DURATION" \
			--controllers='*,bootstrapsigner,tokencleaner' \
			--use-service-account-credentials=true \
			--root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
			--service-cluster-ip-range="$SERVICE_CIDR" \
			--leader-elect=false --profiling=false
		;;
	kube-scheduler)
		printf '%s\n' "$K8S_BIN/kube-scheduler" \
			--kubeconfig="$K8S_VAR/kube-scheduler.kubeconfig" \
			--authentication-kubeconfig="$K8S_VAR/kube-scheduler.kubeconfig" \
			--authorization-kubeconfig="$K8S_VAR/kube-scheduler.kubeconfig" \
			--bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
			--cert-dir="$K8S_VAR/kube-scheduler" \
			--leader-elect=false --profiling=false
		;;
	metrics-server)
		# Each test's nodelet serves the kubelet API on a port of its own (the Node's
		# daemonEndpoints) with a self-signed certificate, at the InternalIP it detected.
		# 15 s: metrics-server refuses less than 10 s (and 9/10 of it must exceed the 10 s
		# kubelet request timeout); its documentation advises no less than 15 s.
		printf '%s\n' "$K8S_BIN/metrics-server" \
			--kubeconfig="$K8S_VAR/metrics-server.kubeconfig" \
			--authentication-kubeconfig="$K8S_VAR/metrics-server.kubeconfig" \
			--authorization-kubeconfig="$K8S_VAR/metrics-server.kubeconfig" \
			--bind-address="$HOST_IP" --secure-port="$METRICS_SERVER_PORT" \
			--tls-cert-file="$PKI/metrics-server.crt" --tls-private-key-file="$PKI/metrics-server.key" \
			--kubelet-insecure-tls --kubelet-use-node-status-port \
			--kubelet-preferred-address-types=InternalIP,Hostname \
			--metric-resolution=15s --profiling=false
		;;
	esac
}

# The PID in a component's pidfile, if that process still runs this instance's command line.
running_pid() { # component
	local pid cmd
	pid="$(cat "$K8S_RUN/$1.pid" 2>/dev/null || true)"
	[ -n "$pid" ] || return 0
	cmd="$(proc_cmdline "$pid")"
	# Any build of the component (another version's too), started for this instance's state.
	case "${cmd%% *}" in "$1" | */"$1") ;; *) return 0 ;; esac
	case "$cmd" in *"$K8S_VAR/"*) echo "$pid" ;; esac
}

# True when a component answers its health endpoint.
healthy() { # component
	case "$1" in
	etcd) curl -fsS -m 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"' ;;
	kube-apiserver)
		curl -fsS -m 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
			"$SERVER/readyz" >/dev/null 2>&1
		;;
	kube-controller-manager) curl -fsSk -m 2 "https://127.0.0.1:$KCM_PORT/healthz" >/dev/null 2>&1 ;;
	kube-scheduler) curl -fsSk -m 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz" >/dev/null 2>&1 ;;
	# /livez answers once its node and pod informers have synced (it serves only then).
	metrics-server) curl -fsSk -m 2 "https://$HOST_IP:$METRICS_SERVER_PORT/livez" >/dev/null 2>&1 ;;
	esac
}

# Stops components together (SIGTERM, SIGKILL after 15 s); each takes about 2 s to shut down.
stop_components() { # component...
	local name pid pids=()
	for name in "$@"; do
		pid="$(running_pid "$name")"
		[ -z "$pid" ] || pids+=("$pid")
	done
	if [ "${#pids[@]}" -gt 0 ]; then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		if ! wait_gone 150 "${pids[@]}"; then
			log "$* (pids ${pids[*]}) ignored SIGTERM for 15 s: killing"
			kill -KILL "${pids[@]}" 2>/dev/null || true
			wait_gone 50 "${pids[@]}" || die "$* (pids ${pids[*]}) survived SIGKILL"
		fi
	fi
	for name in "$@"; do
		rm -f "$K8S_RUN/$name.pid" "$K8S_RUN/$name.args"
	done
}

# Starts a component unless it runs with the same command line and build; waits until it is
# healthy.
start_component() { # component
	local name="$1" pid args tenths=1200 stamp="$K8S_STAMP"
	# The stamp too: a rebuild (new go.sum, flags) restarts what runs the binaries it replaced;
	# and the audit policy, which the API server reads only when it starts.
	[ "$name" != metrics-server ] || stamp="$MS_STAMP"
	args="$(component_args "$name")"$'\n'"$(cat "$stamp")"$'\n'"$(cat "$AUDIT_POLICY")"
	pid="$(running_pid "$name")"
	if [ -n "$pid" ]; then
		if [ "$(cat "$K8S_RUN/$name.args" 2>/dev/null || true)" = "$args" ] && healthy "$name"; then
			return 0
		fi
		log "$name (pid $pid) runs with other flags or binaries, or is not healthy: restarting it"
	fi
	stop_components "$name"
	# Something else on this instance's port (another instance with the same port base) would
	# answer the health check in its place.
	! healthy "$name" || die "$name's port already answers, but not from this instance" \
		"(another instance? NODELET_TEST_K8S_PORT_BASE=$PORT_BASE)"
	local argv=()
	mapfile -t argv < <(component_args "$name")
	# Its own session, so a test's process group signals never reach it; logs appended; without
	# the lock's descriptor (it would hold the lock as long as it runs). The shell in between
	# writes its own PID, which exec hands to the component (setsid may fork).
	rm -f "$K8S_RUN/$name.pid"
	# shellcheck disable=SC2016 # expanded by that shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$K8S_RUN/$name.pid" "${argv[@]}" \
		</dev/null >>"$K8S_VAR/$name.log" 2>&1 8>&- 9>&- &
	while [ ! -s "$K8S_RUN/$name.pid" ]; do sleep 0.05; done
	pid="$(cat "$K8S_RUN/$name.pid")"
	echo "$args" >"$K8S_RUN/$name.args"
	while ! healthy "$name" || [ ! -d "/proc/$pid" ]; do
		[ -d "/proc/$pid" ] || {
			tail -n 20 "$K8S_VAR/$name.log" >&2
			die "$name exited (log: $K8S_VAR/$name.log)"
		}
		tenths=$((tenths - 2))
		[ "$tenths" -gt 0 ] || die "$name not healthy after 120 s (log: $K8S_VAR/$name.log)"
		sleep 0.2
	done
}

kubectl_cmd() { "$K8S_BIN/kubectl" "$@"; }
kubectl_admin() { kubectl_cmd --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# What a node join needs (what `kubeadm init` creates for it): the bootstrap token, the RBAC
# bindings that let its holders ask for a client certificate and have it approved, renewals of
# node client certificates approved too, and the signed cluster-info ConfigMap for discovery.
bootstrap_objects() {
	local token id secret ca_data
	token="$(cat "$TOKEN_FILE")"
	id="${token%%.*}"
	secret="${token#*.}"
	ca_data="$(base64 -w0 <"$PKI/ca.crt")"
	cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: nodelet's tests (scripts/k8s.sh)
  token-id: "$id"
  token-secret: "$secret"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kubeadm:get-nodes
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:get-nodes
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kubeadm:get-nodes
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cluster-info
  namespace: kube-public
data:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters:
    - name: ""
      cluster:
        server: $SERVER
        certificate-authority-data: $ca_data
    contexts: []
    users: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
rules:
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [cluster-info]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kubeadm:bootstrap-signer-clusterinfo
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:anonymous
EOF
}

# metrics-server's RBAC (what upstream's manifests give its ServiceAccount, here given to its
# user) and its registration as the metrics.k8s.io API: a Service without selector in
# kube-system, its EndpointSlice at the address metrics-server listens on, and the APIService,
# whose serving certificate the cluster CA signed.
metrics_server_objects() {
	cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:metrics-server
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:metrics-server
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:metrics-server
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: metrics-server
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-server:system:auth-delegator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:auth-delegator
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: metrics-server
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: metrics-server-auth-reader
  namespace: kube-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: extension-apiserver-authentication-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: metrics-server
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: $METRICS_SERVER_PORT
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: metrics-server
    endpointslice.kubernetes.io/managed-by: k8s.sh.nodelet.test
addressType: IPv4
endpoints:
- addresses: ["$HOST_IP"]
  conditions:
    ready: true
ports:
- name: https
  port: $METRICS_SERVER_PORT
  protocol: TCP
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: $METRICS_APISERVICE
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service:
    name: metrics-server
    namespace: kube-system
    port: 443
  caBundle: $(base64 -w0 <"$PKI/ca.crt")
EOF
}

# The APIService's Available condition ("True", "False" with its reason, or nothing yet).
apiservice_available() {
	kubectl_admin get apiservice "$METRICS_APISERVICE" \
		-o 'jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].reason}' 2>/dev/null
}

cmd_up() {
	require_root
	command -v openssl >/dev/null || die "no openssl (scripts/install-deps.sh installs it)"
	command -v curl >/dev/null || die "no curl (scripts/install-deps.sh installs it)"
	command -v ip >/dev/null || die "no ip (scripts/install-deps.sh installs iproute2)"
	cmd_build
	mkdir -p "$K8S_VAR"
	exec 9>"$K8S_LOCK"
	flock 9
	HOST_IP="$(host_ip)"
	prepare_files
	local component available tenths=1200
	for component in "${COMPONENTS[@]}"; do
		[ "$component" != metrics-server ] || continue
		start_component "$component"
	done
	# Server-side apply: the same objects again change nothing. metrics-server reads the
	# aggregation layer's settings with its RBAC as it starts.
	{
		bootstrap_objects
		echo ---
		metrics_server_objects
	} | kubectl_admin apply --server-side --force-conflicts -f - >/dev/null ||
		die "cannot create the bootstrap token, the RBAC bindings and metrics-server's objects"
	start_component metrics-server
	# The API server's availability check of the APIService reaches metrics-server through the
	# EndpointSlice; until it has, `kubectl top` says the API is unavailable.
	while :; do
		available="$(apiservice_available || true)"
		[ "${available%% *}" != True ] || break
		tenths=$((tenths - 5))
		[ "$tenths" -gt 0 ] || die "$METRICS_APISERVICE not Available after 120 s: ${available:-no condition}" \
			"(log: $K8S_VAR/metrics-server.log)"
		sleep 0.5
	done
}

# What a joining node does, end to end: with the bootstrap token, ask for a node client
# certificate (the kubelet's CSR: signer kube-apiserver-client-kubelet, CN system:node:<name>,
# O system:nodes, an ECDSA P-256 key); the controller-manager approves and signs it; the
# certificate then authenticates as that node.
cmd_smoke() {
	built || die "no control plane binaries in $K8S_BIN (run scripts/k8s.sh build)"
	[ -s "$TOKEN_FILE" ] || die "no control plane state in $K8S_VAR (run scripts/k8s.sh up)"
	local version tmp node csr start cert tenths=600
	version="$(kubectl_admin get --raw /version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')"
	[ "$version" = "$K8S_VERSION" ] || die "the server says ${version:-nothing}, not $K8S_VERSION"
	kubectl_admin get namespace kube-system >/dev/null || die "cannot read namespaces"
	tmp="$(mktemp -d)"
	# shellcheck disable=SC2064 # expand now: the trap must remove this very directory
	trap "rm -rf '$tmp'" EXIT
	node="smoke-$(openssl rand -hex 4)"
	csr="node-csr-$node"
	cat >"$tmp/bootstrap.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $SERVER
    certificate-authority: $PKI/ca.crt
users:
- name: bootstrap
  user:
    token: $(cat "$TOKEN_FILE")
contexts:
- name: bootstrap
  context:
    cluster: $CLUSTER_NAME
    user: bootstrap
current-context: bootstrap
EOF
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/node.key" 2>/dev/null
	openssl req -new -key "$tmp/node.key" -subj "/O=system:nodes/CN=system:node:$node" -out "$tmp/node.csr" 2>/dev/null
	start=$(date +%s%N)
	kubectl_cmd --kubeconfig "$tmp/bootstrap.kubeconfig" create -f - >/dev/null <<EOF || die "the bootstrap token cannot create a CSR"
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: $csr
spec:
  request: $(base64 -w0 <"$tmp/node.csr")
  signerName: kubernetes.io/kube-apiserver-client-kubelet
  usages: [digital signature, client auth]
EOF
	while :; do
		cert="$(kubectl_admin get csr "$csr" -o 'jsonpath={.status.certificate}')"
		[ -z "$cert" ] || break
		tenths=$((tenths - 2))
		[ "$tenths" -gt 0 ] || die "CSR $csr not signed after 60 s: $(kubectl_admin get csr "$csr" --no-headers)"
		sleep 0.2
	done
	echo "CSR $csr approved and signed in $((($(date +%s%N) - start) / 1000000)) ms" \
		"($(kubectl_admin get csr "$csr" -o 'jsonpath={.status.conditions[0].type}: {.status.conditions[0].reason}'))"
	base64 -d <<<"$cert" >"$tmp/node.crt"
	openssl verify -CAfile "$PKI/ca.crt" "$tmp/node.crt" >/dev/null || die "the certificate is not the cluster CA's"
	kubectl_cmd --server "$SERVER" --certificate-authority "$PKI/ca.crt" --client-certificate "$tmp/node.crt" \
		--client-key "$tmp/node.key" auth whoami -o 'jsonpath={.status.userInfo.username} {.status.userInfo.groups}{"\n"}' ||
		die "the signed certificate does not authenticate"
	kubectl_admin delete csr "$csr" >/dev/null
}

cmd_down() {
	require_root
	mkdir -p "$K8S_VAR"
	exec 9>"$K8S_LOCK"
	flock 9
	# The apiserver's clients first, then the apiserver, etcd last.
	stop_components metrics-server kube-scheduler kube-controller-manager
	stop_components kube-apiserver
	stop_components etcd
}

cmd_purge() {
	cmd_down
	rm -rf --one-file-system "$K8S_VAR" "$K8S_RUN"
}

cmd_status() {
	local component pid state=0 version
	HOST_IP="$(host_ip)"
	for component in "${COMPONENTS[@]}"; do
		pid="$(running_pid "$component")"
		if [ -z "$pid" ]; then
			echo "$component: stopped"
			state=3
		elif healthy "$component"; then
			echo "$component: running, pid $pid (log $K8S_VAR/$component.log)"
		else
			echo "$component: not healthy, pid $pid (log $K8S_VAR/$component.log)"
			[ "$state" = 3 ] || state=1
		fi
	done
	if [ "$state" = 0 ]; then
		version="$(curl -fsS -m 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$SERVER/version" |
			sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')"
		echo "Kubernetes $version at $SERVER (binaries $K8S_BIN, kubeconfig $ADMIN_KUBECONFIG)"
	fi
	return "$state"
}

cmd_env() {
	[ -s "$TOKEN_FILE" ] || die "no control plane state in $K8S_VAR (run scripts/k8s.sh up)"
	cat <<EOF
export NODELET_TEST_KUBECONFIG=$ADMIN_KUBECONFIG
export NODELET_TEST_K8S_SERVER=$SERVER
export NODELET_TEST_K8S_CA=$PKI/ca.crt
export NODELET_TEST_K8S_CA_KEY=$PKI/ca.key
export NODELET_TEST_K8S_BOOTSTRAP_TOKEN=$(cat "$TOKEN_FILE")
export NODELET_TEST_K8S_VERSION=$K8S_VERSION
export NODELET_TEST_K8S_BIN=$K8S_BIN
export NODELET_TEST_K8S_SERVICE_CIDR=$SERVICE_CIDR
export NODELET_TEST_K8S_PORT_BASE=$PORT_BASE
export NODELET_TEST_K8S_AUDIT_LOG=$AUDIT_LOG
export NODELET_TEST_K8S_SIGNING_DURATION=$SIGNING_DURATION
export NODELET_TEST_K8S_METRICS_SERVER_LOG=$K8S_VAR/metrics-server.log
EOF
}

case "${1:-}" in
build) cmd_build ;;
path) cmd_path ;;
mod) cmd_mod ;;
up) cmd_up ;;
down) cmd_down ;;
purge) cmd_purge ;;
status) cmd_status ;;
env) cmd_env ;;
smoke) cmd_smoke ;;
*)
	sed -n '2,30s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
