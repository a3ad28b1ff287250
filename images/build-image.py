#!/usr/bin/env python3
"""Assemble a single-layer OCI image-layout tarball without docker or a registry.

The output is what `ctr -n k8s.io images import` takes: `oci-layout`, `index.json` (its one
manifest annotated with `io.containerd.image.name` and `org.opencontainers.image.ref.name`), and
`blobs/sha256/` holding the layer tar, the image config and the manifest.

Everything is deterministic: entries sorted, owner root:root, fixed mtimes, JSON with sorted keys.
So the same inputs always give the same manifest digest, and `--out` is left alone (and the run
says "up to date") when a stamp file shows the inputs have not changed.

Usage (every option but --name/--out may repeat):
  build-image.py --name localhost/testbox:1 --out testbox.tar \
      --file /testbox=target/testbox:0755 --file /etc/passwd=images/testbox/passwd:0644 \
      --dir /tmp:1777 --symlink /bin/sh=busybox \
      --entrypoint '["/testbox"]' --cmd '[]' --env PATH=/bin --workdir /
Prints the manifest digest (sha256:...) on stdout.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile

# 2000-01-01T00:00:00Z: fixed so rebuilds are byte-identical, and not 0 so tools that treat a
# zero mtime as "unset" behave.
FIXED_MTIME = 946684800
FIXED_CREATED = "2000-01-01T00:00:00Z"
BUILDER = "nodelet images/build-image.py"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


class SpecError(Exception):
    pass


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_path(path, flag):
    """'/bin/sh' -> 'bin/sh' (layer tar member names are relative, without '..')."""
    if not path.startswith("/"):
        raise SpecError(f"{flag} {path!r}: image path must be absolute")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise SpecError(f"{flag} {path!r}: not a usable image path")
    return "/".join(parts)


def parse_mode(text, flag, value):
    try:
        mode = int(text, 8)
    except ValueError:
        raise SpecError(f"{flag} {value!r}: mode {text!r} is not octal") from None
    if not 0 <= mode <= 0o7777:
        raise SpecError(f"{flag} {value!r}: mode {text!r} out of range")
    return mode


def parse_file(value):
    """DEST=SRC[:MODE]"""
    dest, sep, src = value.partition("=")
    if not sep or not src:
        raise SpecError(f"--file {value!r}: expected DEST=SRC[:MODE]")
    mode = None
    head, colon, tail = src.rpartition(":")
    if colon and tail and all(c in "01234567" for c in tail):
        src, mode = head, parse_mode(tail, "--file", value)
    if mode is None:
        mode = 0o755 if os.access(src, os.X_OK) else 0o644
    return image_path(dest, "--file"), src, mode


def parse_dir(value):
    """PATH[:MODE]"""
    path, colon, mode = value.rpartition(":")
    if not colon:
        path, mode = value, "0755"
    if not path.startswith("/"):
        raise SpecError(f"--dir {value!r}: image path must be absolute")
    return image_path(path, "--dir"), parse_mode(mode, "--dir", value)


def parse_symlink(value):
    """LINK=TARGET"""
    link, sep, target = value.partition("=")
    if not sep or not target:
        raise SpecError(f"--symlink {value!r}: expected LINK=TARGET")
    return image_path(link, "--symlink"), target


def collect_entries(args):
    """All layer entries as {path: (kind, mode, payload)}; parents become 0755 directories."""
    entries = {}

    def add(path, entry, flag):
        if path in entries and entries[path] != entry:
            raise SpecError(f"{flag}: /{path} given twice with different contents")
        entries[path] = entry

    for value in args.dir:
        path, mode = parse_dir(value)
        add(path, ("dir", mode, None), "--dir")
    for value in args.file:
        path, src, mode = parse_file(value)
        try:
            with open(src, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise SpecError(f"--file {value!r}: cannot read {src}: {err.strerror}") from None
        add(path, ("file", mode, data), "--file")
    for value in args.symlink:
        path, target = parse_symlink(value)
        add(path, ("symlink", 0o777, target), "--symlink")

    for path in list(entries):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            kind = entries.get(parent, ("dir",))[0]
            if kind != "dir":
                raise SpecError(f"/{path}: parent /{parent} is a {kind}, not a directory")
            entries.setdefault(parent, ("dir", 0o755, None))
    return entries


def layer_tar(entries):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(entries):
            kind, mode, payload = entries[path]
            info = tarfile.TarInfo(path)
            info.mode = mode
            info.mtime = FIXED_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def json_list(value, flag):
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise SpecError(f"{flag} {value!r}: not JSON: {err}") from None
    if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
        raise SpecError(f"{flag} {value!r}: expected a JSON list of strings")
    return parsed


def image_config(args, diff_id):
    config = {"Env": list(args.env), "WorkingDir": args.workdir}
    if args.entrypoint is not None:
        config["Entrypoint"] = json_list(args.entrypoint, "--entrypoint")
    if args.cmd is not None:
        cmd = json_list(args.cmd, "--cmd")
        if cmd:
            config["Cmd"] = cmd
    if args.user:
        config["User"] = args.user
    if args.label:
        config["Labels"] = dict(label.partition("=")[::2] for label in args.label)
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": FIXED_CREATED,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": FIXED_CREATED, "created_by": BUILDER}],
    }


def add_bytes(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = FIXED_MTIME
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def oci_archive(name, layer, config):
    config_bytes = canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": sha256(layer), "size": len(layer)}],
    }
    manifest_bytes = canonical_json(manifest)
    manifest_digest = sha256(manifest_bytes)
    if ":" not in name.rpartition("/")[2]:
        name += ":latest"
    tag = name.rpartition(":")[2]
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    blobs = {sha256(b): b for b in (layer, config_bytes, manifest_bytes)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        add_bytes(tar, "oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
        add_bytes(tar, "index.json", canonical_json(index))
        for digest in sorted(blobs):
            add_bytes(tar, "blobs/sha256/" + digest.split(":", 1)[1], blobs[digest])
    return buffer.getvalue(), manifest_digest


def inputs_digest(argv, entries):
    """A digest of everything the output depends on: this script, the arguments, file contents."""
    hasher = hashlib.sha256()
    with open(__file__, "rb") as handle:
        hasher.update(handle.read())
    hasher.update(canonical_json(argv))
    for path in sorted(entries):
        kind, mode, payload = entries[path]
        hasher.update(canonical_json([path, kind, mode]))
        hasher.update(payload.encode() if isinstance(payload, str) else payload or b"")
    return hasher.hexdigest()


def has_registry_part(name):
    """The reference grammar's rule: the first component is a registry if it has '.' or ':' or
    is 'localhost'."""
    first, slash, _ = name.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost")


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def write_atomically(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="image reference, e.g. localhost/testbox:1")
    parser.add_argument("--out", required=True, help="output OCI archive (.tar)")
    parser.add_argument("--file", action="append", default=[], metavar="DEST=SRC[:MODE]")
    parser.add_argument("--dir", action="append", default=[], metavar="PATH[:MODE]")
    parser.add_argument("--symlink", action="append", default=[], metavar="LINK=TARGET")
    parser.add_argument("--entrypoint", metavar="JSON_LIST")
    parser.add_argument("--cmd", metavar="JSON_LIST")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("--user", default="")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--force", action="store_true", help="rebuild even if inputs are unchanged")
    args = parser.parse_args(argv)

    if not has_registry_part(args.name):
        raise SpecError(
            f"--name {args.name!r}: needs a registry part (e.g. localhost/...), or the CRI "
            "normalizes it to docker.io/library/... and tries to pull it"
        )
    entries = collect_entries(args)
    stamp_path = args.out + ".inputs"
    digest_path = args.out + ".digest"
    stamp = inputs_digest([a for a in argv if a != "--force"], entries)
    if not args.force and os.path.exists(args.out) and read_text(stamp_path) == stamp:
        digest = read_text(digest_path)
        if digest.startswith("sha256:"):
            print(digest)
            print(f"{args.out}: up to date", file=sys.stderr)
            return 0

    layer = layer_tar(entries)
    archive, manifest_digest = oci_archive(args.name, layer, image_config(args, sha256(layer)))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_atomically(args.out, archive)
    write_atomically(digest_path, (manifest_digest + "\n").encode())
    write_atomically(stamp_path, (stamp + "\n").encode())
    print(manifest_digest)
    print(f"{args.out}: built {args.name} ({len(archive)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SpecError as err:
        print(f"build-image.py: error: {err}", file=sys.stderr)
        sys.exit(1)
