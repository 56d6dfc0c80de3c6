"""Bring the wheels a GPU machine lacks to it in runs of at most 64 MiB, and put them back together.

The GPU machine (one H200, CUDA 13 driver, Python 3.12 with torch, cupy-cuda13x and the CPU
onnxruntime, no network) gets files only as what one command carries: at most 64 MiB of
gitignored paths a run, and files left by earlier runs stay while the machine is warm. So:

1. On a machine with network (this one), from the repository root:
       python scripts/gpu_wheels.py download            # -> tools/wheels/run01, run02, ...
   It resolves pyproject.toml's requirements with the `gpu` extra (without the CPU
   onnxruntime, see scripts/deploy/gpu_requirements.py) plus what the GPU checks need (pytest,
   tritonclient, onnx, cuda-python), for CPython 3.12 on manylinux x86_64, leaves out what the
   GPU machine already has (--have; default: CuPy, the nvidia-cu*/nv* CUDA wheels, torch,
   numpy), downloads the rest, splits every file over --part-mib (60: a run carries the
   working tree too) into numbered parts, packs files and parts into folders run01, run02, ...
   of at most --part-mib
   each, and writes MANIFEST.json (sha256 and size of every whole file, where each part lies)
   into every run folder. It prints the runs.
2. Carry the folders to the GPU machine one run each, back to back (the machine is handed back
   after about 30 s idle and a fresh one is bare): run k carries `tools/wheels/runKK` with a
   trivial command (`ls tools/wheels`); the last run carries the last folder and runs
   `bash scripts/gpu_check.sh`, which reassembles first.
3. On the GPU machine (gpu_check.sh does it):
       python scripts/gpu_wheels.py reassemble          # -> tools/wheels/dist/*.whl
   concatenates the parts, checks every file's sha256 against the manifest and names each
   missing part with the run folder that holds it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.deploy.gpu_requirements import gpu_requirements

REPO_ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = REPO_ROOT / "pyproject.toml"
WHEELS = REPO_ROOT / "tools" / "wheels"
MANIFEST = "MANIFEST.json"
MIB = 1024 * 1024
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",  # nvidia-cudnn-cu13
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
# What gpu_check.sh needs beyond convoy's own requirements: tests, model generation, and the
# cuda-python that tritonclient.utils.cuda_shared_memory imports.
CHECK_REQUIREMENTS = (
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "tritonclient[grpc]>=2.50",
    "onnx>=1.16",
    "ml_dtypes",
    "cuda-python>=13,<14",
)
# Already on the GPU machine (and large): never downloaded. Patterns on normalized names.
HAVE = (
    *("cupy-*", "numpy"),  # cupy-cuda13x and what it needs (its small dependencies travel)
    *("nvidia-cu*", "nvidia-nv*", "nvidia-nccl*"),  # CUDA libraries (nvidia-ml-py is not one)
    *("torch", "triton"),
)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _kept(name: str, have: list[str]) -> bool:
    normalized = _normalize(name)
    return not any(re.fullmatch(p.replace("*", ".*"), normalized) for p in have)


def wanted(have: list[str]) -> list[str]:
    """What the GPU machine installs: convoy's and the checks' requirements, less what it has."""
    requirements = [*project_requirements(), *CHECK_REQUIREMENTS]
    return [r for r in requirements if _kept(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0], have)]


def resolve(requirements: list[str], python: str, have: list[str]) -> list[str]:
    """`name==version` of every distribution the requirements need on the GPU machine."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--report", str(report), "--target", str(Path(tmp) / "target")]
        command += _platform_args(python)
        subprocess.run([*command, *requirements], check=True)
        installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    pins = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs]
    return sorted(pin for pin in pins if _kept(pin.split("==")[0], have))


def _platform_args(python: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def project_requirements() -> list[str]:
    """pyproject.toml's dependencies and `gpu` extra, without the CPU onnxruntime (read from the
    file, not from installed metadata, which may be older)."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    extra = [f'{r}; extra == "gpu"' for r in project["optional-dependencies"]["gpu"]]
    return gpu_requirements([*project["dependencies"], *extra])


def download(out: Path, python: str, have: list[str], part_bytes: int) -> None:
    pins = resolve(wanted(have), python, have)
    print("downloading:\n  " + "\n  ".join(pins), file=sys.stderr)
    if out.exists():
        shutil.rmtree(out)
    staging = out / "whole"
    command = [python, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(staging)]
    subprocess.run([*command, *_platform_args(python), *pins], check=True)
    manifest = pack(sorted(staging.iterdir()), out, part_bytes)
    shutil.rmtree(staging)
    for index, run in enumerate(manifest["runs"], start=1):
        size = sum((out / path).stat().st_size for path in run)
        print(f"run {index:02d}: carry tools/wheels/run{index:02d} ({size / MIB:.1f} MiB)")


def pack(files: list[Path], out: Path, part_bytes: int) -> dict[str, object]:
    """Split files over `part_bytes`, pack files and parts into run folders of at most
    `part_bytes` (first fit, largest first), and write the manifest into each folder."""
    entries: dict[str, dict[str, object]] = {}
    pieces: list[tuple[str, bytes]] = []
    for file in files:
        data = file.read_bytes()
        names = [file.name]
        if len(data) > part_bytes:
            names = [f"{file.name}.part{i:03d}" for i in range(-(-len(data) // part_bytes))]
        for i, name in enumerate(names):
            pieces.append((name, data[i * part_bytes : (i + 1) * part_bytes]))
        digest = hashlib.sha256(data).hexdigest()
        entries[file.name] = {"sha256": digest, "bytes": len(data), "parts": names}
    bins: list[list[tuple[str, bytes]]] = []
    for piece in sorted(pieces, key=lambda p: -len(p[1])):
        room = next(
            (b for b in bins if sum(len(p[1]) for p in b) + len(piece[1]) <= part_bytes), None
        )
        if room is None:
            bins.append(room := [])
        room.append(piece)
    runs = [[f"run{i:02d}/{name}" for name, _ in b] for i, b in enumerate(bins, start=1)]
    manifest: dict[str, object] = {"files": entries, "runs": runs}
    for index, pieces_of_run in enumerate(bins, start=1):
        folder = out / f"run{index:02d}"
        folder.mkdir(parents=True)
        for name, data in pieces_of_run:
            (folder / name).write_bytes(data)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def reassemble(root: Path) -> int:
    """Put every file of the manifest back together in `root`/dist; 1 if any is incomplete."""
    manifests = sorted(root.glob(f"run*/{MANIFEST}"))
    if not manifests:
        print(f"gpu_wheels: no run folder with {MANIFEST} under {root}", file=sys.stderr)
        return 1
    manifest = json.loads(manifests[0].read_text(encoding="utf-8"))
    where = {Path(path).name: path for run in manifest["runs"] for path in run}
    dist = root / "dist"
    dist.mkdir(exist_ok=True)
    failed = 0
    for name, entry in manifest["files"].items():
        missing = [where[p] for p in entry["parts"] if not (root / where[p]).is_file()]
        if missing:
            print(f"gpu_wheels: {name}: missing {', '.join(missing)}", file=sys.stderr)
            failed += 1
            continue
        data = b"".join((root / where[p]).read_bytes() for p in entry["parts"])
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            print(f"gpu_wheels: {name}: sha256 does not match the manifest", file=sys.stderr)
            failed += 1
            continue
        (dist / name).write_bytes(data)
    print(f"gpu_wheels: {len(manifest['files']) - failed} file(s) in {dist}, {failed} incomplete")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    get = sub.add_parser("download", help="resolve, download, split and pack (needs network)")
    get.add_argument("--out", type=Path, default=WHEELS)
    get.add_argument("--python", default=sys.executable, help="the python whose pip to use")
    get.add_argument("--have", nargs="*", default=list(HAVE), help="names the GPU machine has")
    get.add_argument("--part-mib", type=int, default=60, help="largest file part and run (MiB)")
    put = sub.add_parser("reassemble", help="concatenate parts and check sha256 (GPU machine)")
    put.add_argument("--dir", type=Path, default=WHEELS)
    show = sub.add_parser("requirements", help="print what to install on the GPU machine")
    show.add_argument("--have", nargs="*", default=list(HAVE))
    args = parser.parse_args(argv)
    if args.mode == "download":
        download(args.out, args.python, args.have, args.part_mib * MIB)
        return 0
    if args.mode == "requirements":
        print("\n".join(wanted(args.have)))
        return 0
    return reassemble(args.dir)


if __name__ == "__main__":
    sys.exit(main())
