"""Regenerate the devcluster's vendored Kubernetes protobuf descriptors (devcluster/gpuworkspace_devcluster/k8sproto/).

Usage (grpcio-tools only needed here, never at run time)::

    python -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools
    git -C kubernetes/api archive v0.33.9 | tar -x -C /tmp/src/api
    git -C kubernetes/apimachinery archive v0.33.9 | tar -x -C /tmp/src/apimachinery
    /tmp/protoc/bin/python scripts/gen_devcluster_proto.py --api /tmp/src/api \
        --apimachinery /tmp/src/apimachinery --out devcluster/gpuworkspace_devcluster/k8sproto

Writes ``k8s-api.binpb``: a FileDescriptorSet of k8s.io/api's ``generated.proto`` files for the kinds in
``ROOTS`` (and ``runtime.Unknown``, the envelope), pruned to the messages those kinds reach; and
``json-fields.json``: what the ``json`` struct tags of the Go types (``types.go``) say that a
``.proto`` cannot: a field's JSON name where it differs, ``,inline`` members, and the scalar fields
whose zero value Go's encoding/json still writes (pointers, or no ``omitempty``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2

API_FILES = ("core/v1", "batch/v1", "rbac/v1", "scheduling/v1", "authentication/v1")
MACHINERY_FILES = (
    "pkg/apis/meta/v1",
    "pkg/runtime",
    "pkg/runtime/schema",
    "pkg/util/intstr",
    "pkg/api/resource",
)
# The kinds kubectl's generators (`kubectl create KIND`) send as protobuf, and the envelope.
ROOTS = (
    "k8s.io.api.core.v1.Namespace",
    "k8s.io.api.core.v1.ConfigMap",
    "k8s.io.api.core.v1.Secret",
    "k8s.io.api.core.v1.ServiceAccount",
    "k8s.io.api.core.v1.Service",
    "k8s.io.api.core.v1.ResourceQuota",
    "k8s.io.api.batch.v1.Job",
    "k8s.io.api.batch.v1.CronJob",
    "k8s.io.api.rbac.v1.Role",
    "k8s.io.api.rbac.v1.RoleBinding",
    "k8s.io.api.rbac.v1.ClusterRole",
    "k8s.io.api.rbac.v1.ClusterRoleBinding",
    "k8s.io.api.scheduling.v1.PriorityClass",
    "k8s.io.api.authentication.v1.TokenRequest",  # kubectl create token (serviceaccounts/token)
    "k8s.io.apimachinery.pkg.runtime.Unknown",
)
_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?(\*?[\w.\[\]*]+)\s+`([^`]*)`")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def _descriptor_set(src: Path) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc  # noqa: PLC0415 - generation-time only

    files = [f"k8s.io/api/{p}/generated.proto" for p in API_FILES]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "all.binpb"
        rc = protoc.main(["protoc", f"-I{src}", "--include_imports", f"--descriptor_set_out={out}", *files])
        if rc != 0:
            raise SystemExit(f"protoc failed ({rc})")
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
    return fds


def _reachable(fds: descriptor_pb2.FileDescriptorSet) -> set[str]:
    by_name = {f".{f.package}.{m.name}": m for f in fds.file for m in f.message_type}
    seen: set[str] = set()
    todo = [f".{r}" for r in ROOTS]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:  # not top-level: a map entry, walked with its parent
            continue
        seen.add(name)
        msg = by_name[name]
        for nested in msg.nested_type:  # map entries
            todo.extend(f.type_name for f in nested.field if f.type_name)
        todo.extend(f.type_name for f in msg.field if f.type_name)
    return seen


def _prune(fds: descriptor_pb2.FileDescriptorSet) -> descriptor_pb2.FileDescriptorSet:
    keep = _reachable(fds)
    out = descriptor_pb2.FileDescriptorSet()
    kept_files: set[str] = set()
    for f in fds.file:
        msgs = [m for m in f.message_type if f".{f.package}.{m.name}" in keep]
        if not msgs:
            continue
        nf = out.file.add()
        nf.CopyFrom(f)
        del nf.message_type[:]
        nf.message_type.extend(msgs)
        nf.ClearField("source_code_info")
        kept_files.add(f.name)
    for nf in out.file:
        deps = [d for d in nf.dependency if d in kept_files]
        del nf.dependency[:]
        nf.dependency.extend(deps)
    return out


def _go_structs(text: str) -> dict[str, dict[str, dict[str, object]]]:
    """{Go struct: {proto field name: {json, inline, zero}}} from a types.go."""
    structs: dict[str, dict[str, dict[str, object]]] = {}
    current: dict[str, dict[str, object]] | None = None
    for line in text.splitlines():
        start = re.match(r"^type (\w+) struct \{", line)
        if start:
            current = structs.setdefault(start.group(1), {})
            continue
        if line.startswith("}"):
            current = None
            continue
        found = _FIELD.match(line) if current is not None else None
        if current is None or found is None:
            continue
        tags = dict(_TAG.findall(found.group(3)))
        proto = dict(p.split("=", 1) for p in tags.get("protobuf", "").split(",") if "=" in p)
        if "name" not in proto or "json" not in tags:
            continue
        json_name, *opts = tags["json"].split(",")
        current[proto["name"]] = {
            "json": json_name,
            "inline": "inline" in opts,
            "zero": found.group(2).startswith("*") or "omitempty" not in opts,
        }
    return structs


def _json_fields(fds: descriptor_pb2.FileDescriptorSet, roots: dict[str, Path]) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fds.file:
        folder = roots[f.name.rsplit("/", 1)[0]]
        structs: dict[str, dict[str, dict[str, object]]] = {}
        for go in sorted(folder.glob("*.go")):
            if not go.name.endswith(("_test.go", ".pb.go")):
                structs.update(_go_structs(go.read_text()))
        scalar = {
            descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
            descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
            descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
            descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
        }
        for m in f.message_type:
            tags = structs.get(m.name, {})
            entry: dict[str, object] = {}
            for field in m.field:
                tag = tags.get(field.name)
                if tag is None:
                    continue
                if tag["json"] != field.name or tag["inline"]:
                    entry.setdefault("rename", {})[field.name] = "" if tag["inline"] else tag["json"]  # type: ignore[index]
                single = field.label != descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if single and field.type in scalar and tag["zero"]:
                    entry.setdefault("zero", []).append(field.name)  # type: ignore[union-attr]
            if entry:
                out[f"{f.package}.{m.name}"] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", type=Path, required=True, help="a checkout of github.com/kubernetes/api")
    parser.add_argument(
        "--apimachinery", type=Path, required=True, help="a checkout of kubernetes/apimachinery"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        roots: dict[str, Path] = {}
        for p in API_FILES:
            roots[f"k8s.io/api/{p}"] = args.api / p
        for p in MACHINERY_FILES:
            roots[f"k8s.io/apimachinery/{p}"] = args.apimachinery / p
        for name, folder in roots.items():
            (src / name).mkdir(parents=True)
            (src / name / "generated.proto").write_bytes((folder / "generated.proto").read_bytes())
        fds = _prune(_descriptor_set(src))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "k8s-api.binpb").write_bytes(fds.SerializeToString(deterministic=True))
    fields = _json_fields(fds, roots)
    (args.out / "json-fields.json").write_text(json.dumps(fields, indent=1, sort_keys=True) + "\n")
    count = sum(len(f.message_type) for f in fds.file)
    print(f"{len(fds.file)} files, {count} messages, {len(fields)} with JSON-tag notes")
    subprocess.run(["ls", "-l", str(args.out)], check=False)


if __name__ == "__main__":
    main()
