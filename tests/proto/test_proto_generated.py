"""The committed protocol modules are exactly what scripts/gen_proto.py generates."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED = (
    "grpc_service_pb2.py",
    "grpc_service_pb2.pyi",
    "grpc_service_pb2_grpc.py",
    "model_config_pb2.py",
    "model_config_pb2.pyi",
)
HINT = "run python scripts/gen_proto.py"


def _generated_names(proto_dir: Path) -> set[str]:
    return {path.name for path in proto_dir.glob("*_pb2*")}


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        check=True,
        cwd=REPO_ROOT,
    )
    fresh_dir = tmp_path / "proto"
    committed_dir = REPO_ROOT / "proto"
    assert _generated_names(fresh_dir) == set(GENERATED), HINT
    assert _generated_names(committed_dir) == set(GENERATED), HINT
    for name in GENERATED:
        fresh = (fresh_dir / name).read_bytes()
        committed = (committed_dir / name).read_bytes()
        assert fresh == committed, f"proto/{name} is stale: {HINT}"


def test_generated_modules_use_gencode_for_protobuf_6() -> None:
    # tritonclient pins protobuf < 7; gencode for protobuf 7 would refuse to import beside it.
    for name in ("grpc_service_pb2.py", "model_config_pb2.py"):
        text = (REPO_ROOT / "proto" / name).read_text(encoding="utf-8")
        assert "# Protobuf Python Version: 6.33." in text, f"proto/{name}: {HINT}"
