#!/usr/bin/env python3
"""Writes the feature gates the v1.37 kubelet knows, as a table nodelet's configuration reads
(src/config/kubelet-feature-gates.tsv), from the Go sources of k8s.io/kubernetes and the
staging modules in the Go module cache (`go mod download k8s.io/kubernetes@v1.37.2` puts them
there; scripts/k8s.sh build does).

The kubelet's gate registry is filled from five places: pkg/features (the Kubernetes gates,
including those inherited from the generic API server and apiextensions), client-go's
features, component-base's zpages features (pkg/features' init), logsapi's
(cmd/kubelet/app/server.go) and component-base's metrics features (pkg/kubelet/server).

For each gate the value it has at v1.37 is the last versioned spec at or below 1.37: its
default, its stage and whether it is locked to that default.

"read by the kubelet" says whether any code compiled into a Linux kubelet for the node's own
work consults the gate (Windows-only files and build constraints without Linux left out): a reference `<pkg>.Gate` in the kubelet's own packages and in those
it calls for pod validation, admission and serving (the directories in KUBELET_DIRS), and the
client-go, logging, metrics and zpages gates (the kubelet's clients, logs and servers). The
first such file is recorded, so a row can be checked by hand. A gate nobody reads on the node
(an API server's, a controller's, the scheduler's, the proxy's) changes nothing the kubelet
does at either value.

Usage: scripts/kubelet-feature-gates.py [MODCACHE] > src/config/kubelet-feature-gates.tsv
"""

import os
import re
import sys

VERSION = (1, 37)
K8S = "kubernetes@v1.37.2"
STAGING = "v0.37.2"

# Packages of k8s.io/kubernetes the kubelet runs for its own work.
KUBELET_DIRS = [
    "cmd/kubelet",
    "pkg/kubelet",
    "pkg/volume",
    "pkg/securitycontext",
    "pkg/credentialprovider",
    "pkg/probe",
    # Static pod validation and defaulting, pod helpers.
    "pkg/apis/core",
    "pkg/api",
    # The kubelet's admission runs the scheduler's resource and node predicates.
    "pkg/scheduler/framework",
    "pkg/util",
]
# Packages of k8s.io/apiserver the kubelet's authentication and authorization use.
APISERVER_DIRS = [
    "pkg/authentication",
    "pkg/authorization",
    "pkg/server/dynamiccertificates",
    "pkg/util/webhook",
]

SPEC = re.compile(
    r"\{\s*Version:\s*version\.MustParse\(\"(\d+)\.(\d+)\"\),\s*Default:\s*(true|false),"
    r"\s*PreRelease:\s*(?:featuregate\.)?(\w+)(?:,\s*LockToDefault:\s*(true|false))?\s*\}"
)
KEY = re.compile(r"^\s*(?:(\w+)\.)?(\w+):\s*\{\s*$")
CONST = re.compile(r"^\s*(\w+)\s+(?:featuregate\.)?Feature\s*=\s*\"(\w+)\"", re.M)


OTHER_OS = ("windows", "darwin", "freebsd", "openbsd", "netbsd", "solaris", "plan9", "js")
BUILD = re.compile(r"^//go:build (.*)$", re.M)


def on_linux(path):
    """Whether a Linux build of the kubelet compiles the file: not `_windows.go` and the like,
    and no build constraint that leaves Linux out (`!linux`, or other systems only)."""
    name = os.path.basename(path)[: -len(".go")]
    if any(name.endswith("_" + system) for system in OTHER_OS):
        return False
    m = BUILD.search(read(path)[:2000])
    if not m:
        return True
    constraint = m.group(1)
    if "!linux" in constraint:
        return False
    names_an_os = any(system in constraint for system in OTHER_OS + ("linux",))
    return "linux" in constraint or not names_an_os or constraint.strip().startswith("!")


def go_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("testdata", "test", "testing")]
        for f in filenames:
            path = os.path.join(dirpath, f)
            if f.endswith(".go") and not f.endswith("_test.go") and on_linux(path):
                yield path


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def constants(paths):
    names = {}
    for p in paths:
        for ident, value in CONST.findall(read(p)):
            names[ident] = value
    return names


def specs(path, names):
    """Gate name -> (default, stage, locked) at VERSION, from the versioned spec maps of a file.
    A gate whose first spec is of a later version is PreAlpha at VERSION (known, off, and
    refused when set)."""
    gates = {}
    key = None
    for line in read(path).splitlines():
        m = KEY.match(line)
        if m:
            key = names.get(m.group(2), m.group(2))
            continue
        if key is None:
            continue
        for major, minor, default, stage, locked in SPEC.findall(line):
            if (int(major), int(minor)) <= VERSION:
                gates[key] = (default == "true", stage, locked == "true")
            else:
                gates.setdefault(key, (False, "PreAlpha", False))
        if line.strip() == "},":
            key = None
    return gates


DEPENDENCY = re.compile(r"^\s*(?:(\w+)\.)?(\w+):\s*\{([^}]*)\},\s*$")


def dependencies(path, names):
    """Gate name -> the gates it depends on (`AddDependencies` maps)."""
    deps = {}
    text = read(path)
    start = text.find("FeatureGateDependencies = map[")
    if start < 0:
        return deps
    for line in text[start:].splitlines()[1:]:
        if line.startswith("}"):
            break
        m = DEPENDENCY.match(line)
        if m:
            # `Gate`, `pkg.Gate` or `featuregate.Feature(pkg.Gate)`: the last identifier.
            listed = [
                re.findall(r"\w+", d)[-1] for d in m.group(3).split(",") if d.strip()
            ]
            deps[names.get(m.group(2), m.group(2))] = [names.get(d, d) for d in listed]
    return deps


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/go/pkg/mod")
    k8s = os.path.join(cache, "k8s.io", K8S)
    staging = lambda m: os.path.join(cache, "k8s.io", f"{m}@{STAGING}")
    sources = [
        ("kubernetes", os.path.join(k8s, "pkg/features/kube_features.go"), None),
        ("client-go", os.path.join(staging("client-go"), "features/known_features.go"), "the kubelet's API clients"),
        ("zpages", os.path.join(staging("component-base"), "zpages/features/kube_features.go"), "the kubelet's servers"),
        ("logs", os.path.join(staging("component-base"), "logs/api/v1/kube_features.go"), "the kubelet's logging options"),
        ("metrics", os.path.join(staging("component-base"), "metrics/features/kube_features.go"), "the kubelet's metrics"),
    ]
    name_files = [s[1] for s in sources] + [
        os.path.join(staging("apiserver"), "pkg/features/kube_features.go"),
        os.path.join(staging("apiextensions-apiserver"), "pkg/features/kube_features.go"),
    ]
    names = constants(name_files)
    gates = {}
    deps = {}
    for origin, path, reader in sources:
        for gate, spec in specs(path, names).items():
            gates[gate] = (origin, spec, reader)
        deps.update(dependencies(path, names))

    reads = {}
    roots = [(k8s, d) for d in KUBELET_DIRS] + [(staging("apiserver"), d) for d in APISERVER_DIRS]
    idents = {v: k for k, v in names.items()}
    pattern = re.compile(r"\b\w*features\.(\w+)\b")
    for base, d in roots:
        for path in sorted(go_files(os.path.join(base, d))):
            for ident in pattern.findall(read(path)):
                gate = names.get(ident, ident)
                if gate in gates and gate not in reads:
                    reads[gate] = os.path.relpath(path, os.path.join(cache, "k8s.io"))

    print("# The feature gates the kubelet v1.37.2 knows, their value at 1.37 and whether code the")
    print("# kubelet runs for its node reads them; written by scripts/kubelet-feature-gates.py from")
    print(f"# k8s.io/{K8S} and the staging modules {STAGING} (see the script for the method).")
    print("# gate\tdefault\tstage\tlocked\tdepends on\tread by the kubelet")
    for gate in sorted(gates):
        origin, (default, stage, locked), reader = gates[gate]
        where = reader if reader else reads.get(gate, "-")
        needs = ",".join(deps.get(gate, [])) or "-"
        print(
            f"{gate}\t{str(default).lower()}\t{stage.lower()}\t{str(locked).lower()}\t{needs}\t{where}"
        )


if __name__ == "__main__":
    main()
