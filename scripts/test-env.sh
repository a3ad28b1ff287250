#!/usr/bin/env bash
# Bring nodelet's integration-test environment up or down.
#
#   test-env.sh up     install missing packages, build the pause and testbox images, start the
#                      project-local containerd, import the images, start the private test
#                      registry and push the images into it; then print the environment tests
#                      need (eval "$(scripts/test-env.sh up)")
#   test-env.sh up --no-registry
#                      the same without the registry (an instance for tests that pull nothing)
#   test-env.sh down   stop that containerd and the registry, and clean up everything they started
#
# Quiet on success (only the export lines on stdout); on failure, names the step and shows the
# end of its log. Every step is idempotent: running `up` twice is cheap.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPTS="$REPO_DIR/scripts"
STEP_LOG="$NODELET_TEST_VAR/test-env.log"

step() { # description command...
	local description="$1" status=0
	shift
	printf '\n==== %s %s: %s\n' "$(date -Is)" "$description" "$*" >>"$STEP_LOG"
	"$@" >>"$STEP_LOG" 2>&1 || status=$?
	if [ "$status" -ne 0 ]; then
		{
			echo "test-env.sh: FAILED: $description (exit $status): $*"
			echo "---- last 40 lines of $STEP_LOG ----"
			tail -n 40 "$STEP_LOG"
			echo "----"
		} >&2
		exit "$status"
	fi
}

case "${1:-}" in
up)
	require_root
	mkdir -p "$NODELET_TEST_VAR"
	step "install packages" "$SCRIPTS/install-deps.sh"
	step "build images" "$SCRIPTS/images.sh" build
	step "start containerd" "$SCRIPTS/containerd.sh" start
	step "import images" "$SCRIPTS/images.sh" import
	if [ "${2:-}" != --no-registry ]; then
		step "start registry" "$SCRIPTS/registry.sh" start
		step "push images to the registry" "$SCRIPTS/registry.sh" push
	fi
	"$SCRIPTS/containerd.sh" env
	if [ "${2:-}" != --no-registry ]; then
		"$SCRIPTS/registry.sh" env
	fi
	;;
down)
	require_root
	mkdir -p "$NODELET_TEST_VAR"
	step "stop containerd" "$SCRIPTS/containerd.sh" stop
	step "stop registry" "$SCRIPTS/registry.sh" stop
	;;
*)
	sed -n '2,11s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
