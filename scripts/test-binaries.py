#!/usr/bin/env python3
"""The test executables of `cargo test --no-run --message-format=json` (read on stdin), one per
line: `<lane> <package directory> <name> <executable>`, where <name> is how `cargo test` names
the target (`tests/faults.rs`, `unittests:src/lib.rs`, with the package's directory in front
outside the root package) and <lane> is the lane scripts/test.sh runs it in:

  vm      tests/vm_*.rs of the root package: each boots its own qemu VM (no host containerd)
  faults  tests/faults.rs: stops and starts its containerd, so it gets an instance of its own
  main    everything else, against the shared test containerd
  ctd16   the containerd 1.6 compatibility subset (CTD16_SUBSET): binaries of the main lane run
          a second time, against Debian 12's containerd 1.6 on an instance of its own

Within a lane the order is the one given by LANE_ORDER (the longest first, so that a lane's
tail is short), then by name.
"""
import json
import os
import sys

# Binaries known to take long (seconds on the 2-core CI machine, from the last full run), so that
# the main lane starts them early; the rest keep their alphabetical order after these.
LANE_ORDER = ["tests/cluster.rs", "tests/housekeeping.rs", "tests/eviction.rs"]

# The core that must keep working on Debian 12's containerd 1.6 (issue 27): pod lifecycle, probes
# and cluster mode, each a binary that drives the real containerd; in-place resize (applied
# without the runtime's report of a container's resources, which 1.6 does not give);
# security_context for the features containerd 1.6 does not declare (refused there, used on
# 2.x), user_namespaces for hostUsers: false (refused there: no user namespaces declared),
# image_volumes for image volumes (refused there: containerd 1.6 does not know Mount.image);
# csi_driver for CSI volumes through the project's driver process; the longest first.
CTD16_SUBSET = [
    "tests/cluster.rs",
    "tests/csi_driver.rs",
    "tests/image_volumes.rs",
    "tests/lifecycle.rs",
    "tests/pod_resize.rs",
    "tests/probes.rs",
    "tests/security_context.rs",
    "tests/user_namespaces.rs",
]


def lane_of(package_dir, root, src):
    rel = os.path.relpath(src, package_dir)
    if package_dir == root and rel.startswith("tests/vm_") and rel.endswith(".rs"):
        return "vm"
    if package_dir == root and rel == "tests/faults.rs":
        return "faults"
    return "main"


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    rows = []
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        package_dir = os.path.dirname(msg["manifest_path"])
        target = msg["target"]
        src = target["src_path"]
        rel = os.path.relpath(src, package_dir)
        kind = "unittests:" if target["kind"] != ["test"] else ""
        name = kind + (rel if package_dir == root else os.path.relpath(src, root))
        rows.append((lane_of(package_dir, root, src), package_dir, name, msg["executable"]))
        if package_dir == root and name in CTD16_SUBSET:
            rows.append(("ctd16", package_dir, name, msg["executable"]))

    def key(row):
        rel = row[2]
        order = CTD16_SUBSET if row[0] == "ctd16" else LANE_ORDER
        first = order.index(rel) if rel in order else len(order)
        return (row[0], first, rel)

    if not rows:
        sys.exit("test-binaries.py: cargo listed no test executable")
    for row in sorted(rows, key=key):
        print(" ".join(row))


if __name__ == "__main__":
    main()
