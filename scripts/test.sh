#!/usr/bin/env bash
# Runs every test of nodelet: unit tables, component tests (fake runtime, paused clock), CLI
# tests, testbox's tests, and the integration tests against a real containerd with the
# project's own images. As root on Debian 12; installs and starts what it needs, and stops the
# project-local containerd again at the end (set NODELET_TEST_KEEP=1 to leave it running).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# containerd, runc, CNI plugins, protoc (for containerd-client's build), busybox, gcc.
scripts/install-deps.sh
eval "$(scripts/test-env.sh up)"
if [ "${NODELET_TEST_KEEP:-0}" != 1 ]; then
	trap 'scripts/test-env.sh down' EXIT
fi

cargo build --workspace --locked --all-targets
cargo test --workspace --locked -- "$@"
