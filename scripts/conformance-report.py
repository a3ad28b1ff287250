#!/usr/bin/env python3
"""Turns the JUnit report of e2e_node.test runs into docs/conformance.md's table.

usage: conformance-report.py [--nodelet DIR ...] [--kubelet DIR ...] --out FILE [--causes FILE]
                             [--serial]

With --serial the document is that of the `[Serial]`, `[Slow]` and `[Disruptive]` specs, run
apart from the others (docs/conformance-serial.md).

Each DIR is a run of scripts/conformance.sh: junit.xml (ginkgo's report) and meta.txt (the
commit, date, focus, skip, processes, duration and load average, as key=value lines). An
agent's later runs (a run of the specs that failed, say) replace the results of the specs they
ran; each run is listed with what it covered.
One row per spec that ran on either agent (skipped specs are counted, not listed): its name,
the result and time on nodelet and on the kubelet, and the cause of a nodelet failure from the
causes file (lines `<spec name substring>\t<cause>`; the first match wins), else `not yet
analysed`.
"""

import argparse
import sys
import xml.etree.ElementTree as ET


def results(path):
    """{spec name: (result, seconds)} of a ginkgo JUnit report; result is passed, failed or
    skipped."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        # ginkgo's suite-level nodes ([BeforeSuite], [ReportAfterSuite], ...) are not specs.
        if name.startswith("[") and "] " not in name:
            continue
        if name.startswith(("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]",
                            "[ReportAfterSuite]", "[BeforeSuite]", "[AfterSuite]")):
            continue
        if case.find("skipped") is not None:
            result = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            result = "failed"
        else:
            result = "passed"
        out[name] = (result, float(case.get("time", "0") or 0))
    return out


def causes(path):
    rows = []
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line.startswith("#") or "\t" not in line:
                    continue
                key, cause = line.split("\t", 1)
                rows.append((key, cause))
    return rows


def cause_of(name, rows):
    for key, cause in rows:
        if key in name:
            return cause
    return "not yet analysed"


def meta(path):
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("=")
                out[key] = value
    except FileNotFoundError:
        pass
    return out


def count(res, what):
    return sum(1 for r, _ in res.values() if r == what)


def run_line(name, res, m):
    minutes = int(m.get("seconds", "0") or 0) / 60
    focus = m.get("focus", "?")
    if len(focus) > 120:
        focus = f"{focus.count('|') + 1} specs by name"
    else:
        focus = f"`{focus}`"
    return (f"- **{name}** (commit `{m.get('commit', '?')}`, {m.get('date', '?')}; focus "
            f"{focus}, skip `{m.get('skip', '') or '-'}`, {m.get('procs', '?')} "
            f"processes, {minutes:.0f} min, load average at the end {m.get('load', '?')}): "
            f"{count(res, 'passed')} passed, {count(res, 'failed')} failed.")


def merged(dirs):
    """The results of an agent's runs, later runs replacing what they ran; the runs' lines."""
    out, runs = {}, []
    for d in dirs:
        res = results(f"{d}/junit.xml")
        for name, (r, t) in res.items():
            if r != "skipped" or name not in out:
                out[name] = (r, t)
        runs.append((res, meta(f"{d}/meta.txt")))
    return out, runs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodelet", action="append", default=[])
    p.add_argument("--kubelet", action="append", default=[])
    p.add_argument("--causes")
    p.add_argument("--out", required=True)
    p.add_argument("--serial", action="store_true")
    a = p.parse_args()
    runs = {}
    for agent in ("nodelet", "kubelet"):
        dirs = getattr(a, agent)
        if dirs:
            runs[agent] = merged(dirs)
    if not runs:
        p.error("give --nodelet or --kubelet")
    nodelet = runs.get("nodelet", ({}, []))[0]
    kubelet = runs.get("kubelet", ({}, []))[0]
    why = causes(a.causes)
    ran = sorted(n for n in set(nodelet) | set(kubelet)
                 if nodelet.get(n, ("skipped",))[0] != "skipped"
                 or kubelet.get(n, ("skipped",))[0] != "skipped")
    both = [n for n in ran if n in nodelet and n in kubelet]
    ours = [n for n in both if nodelet[n][0] == "failed" and kubelet[n][0] == "passed"]
    theirs = [n for n in both if nodelet[n][0] == "passed" and kubelet[n][0] == "failed"]
    env = [n for n in both if nodelet[n][0] == "failed" and kubelet[n][0] == "failed"]

    if a.serial:
        lines = [
            "# Kubernetes' node conformance tests that run alone: nodelet and the kubelet",
            "",
            "The `[NodeConformance]` specs that also carry `[Serial]`, `[Slow]` or "
            "`[Disruptive]`, which docs/conformance.md leaves out: generated by "
            "`scripts/conformance.sh` (`run --agent <agent>` with `NODELET_CONFORMANCE_OUT="
            "target/conformance/<agent>-serial`, then `report`), the same way as the others: "
            "k8s.io/kubernetes v1.37.2's `e2e_node.test` through ginkgo (the `[Serial]` specs one "
            "at a time after the rest), each agent joined in turn as the only node of the real "
            "v1.37.2 control plane, on the same containerd 2.1.9 with the same "
            "KubeletConfiguration.",
            "",
            "Many of these specs stop the agent, rewrite its configuration file and start it "
            "again, as the suite does on its own nodes: `sudo systemctl kill|restart` on the unit "
            "whose name matches `kubelet-\\w+`, the file `kubelet-config` in the suite's working "
            "directory (read back from `/configz` and written through the kubelet's Go types), "
            "`/healthz` on 127.0.0.1:10248 to see the agent stop and start. This host's PID 1 is "
            "not systemd, so each agent runs as the unit `kubelet-conformance` of a stand-in "
            "`systemctl` (scripts/conformance/systemctl: the agent's own command line again on "
            "`restart`, SIGTERM on `kill`) and `sudo` runs its command as the root the run is. "
            "The suite reaches the container runtime's unit over D-Bus instead, which this host "
            "does not have: the specs that stop the runtime fail on both agents.",
            "",
        ]
    else:
        lines = [
            "# Kubernetes' node conformance tests: nodelet and the kubelet",
            "",
            "Generated by `scripts/conformance.sh` (`run --agent nodelet`, `run --agent kubelet`, "
            "then `report`): k8s.io/kubernetes v1.37.2's `e2e_node.test`, run through ginkgo in "
            "parallel processes, against each agent joined in turn as the only node of the real "
            "v1.37.2 control plane, on the same containerd 2.1.9 with the same "
            "KubeletConfiguration. The kubelet is v1.37.2 built from "
            "`k8s.io/kubernetes/cmd/kubelet`.",
            "",
        ]
    for agent, (res, agent_runs) in runs.items():
        label = agent if agent == "nodelet" else "kubelet v1.37.2"
        for i, (run_res, m) in enumerate(agent_runs):
            lines.append(run_line(label if i == 0 else f"{label}, again", run_res, m))
        lines.append(f"  Together: {count(res, 'passed')} passed, {count(res, 'failed')} failed.")
    if nodelet and kubelet:
        lines += [
            "",
            f"Of the specs both ran: {len(ours)} failed on nodelet and passed on the kubelet "
            f"(nodelet's to fix), {len(theirs)} passed on nodelet and failed on the kubelet, "
            f"{len(env)} failed on both (this machine or the stand-in images).",
        ]
    lines += [
        "",
        "How: `ginkgo run --procs=N e2e_node.test -- --start-services=false "
        "--host=<the API server> --bearer-token=<a cluster-admin service account's token> "
        "--node-name=<the node>`, the node e2e suite's own way of pointing at a running node (it "
        "holds the `[NodeConformance]` tests of test/e2e_node and those of test/e2e/common it "
        "shares with the cluster suite, and reads the node's configuration through `/configz`). "
        "The agent runs with a node identity of its own (`system:node:<host>`), the kubelet API "
        "on the node's address with webhook authentication and authorization through the API "
        "server.",
        "",
        "Images: the suite names images in Kubernetes' registries, which cannot be pulled here. "
        "`scripts/conformance.sh images` builds stand-ins, and the run serves them from a "
        "registry of its own that `KUBE_TEST_REPO_LIST` points the suite's registries at: "
        "`agnhost:2.66.1` and `:2.55` (agnhost built from its Go source in k8s.io/kubernetes "
        "v1.37.2, statically, with the upstream image's `/agnhost-2` link, `/uploads`, the user "
        "`user-defined-in-image` (1000) and the group `group-defined-in-image` (50000), Debian's "
        "busybox-static for the shell tools and Debian's curl and netcat-openbsd where the "
        "upstream image has Alpine's), `kitten:1.8` (that agnhost with the upstream page), "
        "`busybox:1.37.0-2` (Debian's busybox-static), `nonroot:1.5` (busybox as user 1234), "
        "`nonewprivs:1.4` (nnp built from its Go source, set-user-ID root), `nginx:1.27.0-2` "
        "(busybox's httpd on port 80: the tests that use it need a server that stays up), "
        "`pause:3.10.2` (the project's pause). A test needing another image fails on the pull "
        "on both agents.",
        "",
    ]
    head = "| test |"
    rule = "|---|"
    for agent in runs:
        head += f" {agent} | time (s) |"
        rule += "---|---|"
    lines += [head + " cause of a nodelet failure |", rule + "---|"]
    for name in ran:
        row = f"| {name.replace('|', '/')} |"
        for agent, (res, _) in runs.items():
            r, t = res.get(name, ("not run", 0.0))
            row += f" {r} | {t:.1f} |"
        failed = nodelet.get(name, ("",))[0] == "failed"
        row += f" {cause_of(name, why) if failed else ''} |"
        lines.append(row)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
