"""Regenerate proto/*_pb2.py, *_pb2.pyi and grpc_service_pb2_grpc.py from proto/*.proto.

Runs grpc_tools.protoc, then points each *_pb2.py at Convoy's private descriptor pool
(proto/_pool.py explains why). Usage: python scripts/gen_proto.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent

# Paths relative to REPO_ROOT; protoc records them as the descriptors' file names.
SOURCES = ("proto/model_config.proto", "proto/grpc_service.proto")
# The gRPC plugin only runs on files that define services: for the others it would write a
# module that holds nothing but a version check.
SERVICE_SOURCES = ("proto/grpc_service.proto",)

# tritonclient needs protobuf < 7, so the gencode must come from grpcio-tools 1.81 (protobuf 6);
# a newer grpcio-tools writes modules that refuse to import next to tritonclient.
GENCODE_VERSION_LINE = "# Protobuf Python Version: 6."
# protoc's own marker for where extra imports go.
IMPORTS_MARKER = "# @@protoc_insertion_point(imports)\n"
POOL_IMPORT = "from proto._pool import POOL\n"
DEFAULT_POOL_CALL = "_descriptor_pool.Default().AddSerializedFile("
PRIVATE_POOL_CALL = "POOL.AddSerializedFile("


def run_protoc(out_dir: Path) -> None:
    """Write the protoc outputs for SOURCES under out_dir/proto/."""
    (out_dir / "proto").mkdir(parents=True, exist_ok=True)
    include = f"-I{REPO_ROOT}"
    runs = (
        [include, f"--python_out={out_dir}", f"--pyi_out={out_dir}", *SOURCES],
        [include, f"--grpc_python_out={out_dir}", *SERVICE_SOURCES],
    )
    for args in runs:
        # protoc.main takes an argv whose first entry is the program name.
        if protoc.main(["grpc_tools.protoc", *args]) != 0:
            raise SystemExit(f"grpc_tools.protoc failed: {' '.join(args)}")


def use_private_pool(module: Path) -> None:
    """Make a generated *_pb2.py register its descriptors in POOL, not the default pool."""
    text = module.read_text(encoding="utf-8")
    if GENCODE_VERSION_LINE not in text:
        raise SystemExit(f"{module}: no {GENCODE_VERSION_LINE!r} line; install grpcio-tools 1.81")
    for expected in (IMPORTS_MARKER, DEFAULT_POOL_CALL):
        if text.count(expected) != 1:
            raise SystemExit(
                f"{module}: expected {expected!r} exactly once, found {text.count(expected)}; "
                "protoc's output changed, update scripts/gen_proto.py"
            )
    text = text.replace(IMPORTS_MARKER, IMPORTS_MARKER + POOL_IMPORT)
    text = text.replace(DEFAULT_POOL_CALL, PRIVATE_POOL_CALL)
    module.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT,
        help="output root; files land in OUT/proto/ (default: the repository root)",
    )
    out_dir: Path = parser.parse_args(argv).out.resolve()
    run_protoc(out_dir)
    for source in SOURCES:
        use_private_pool(out_dir / source.replace(".proto", "_pb2.py"))


if __name__ == "__main__":
    main(sys.argv[1:])
