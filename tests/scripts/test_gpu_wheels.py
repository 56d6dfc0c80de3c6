"""Wheels carried to an offline GPU machine: split into bounded runs, put back together there."""

from __future__ import annotations

import os
from pathlib import Path

from scripts import gpu_wheels


def test_files_are_split_into_bounded_runs_and_reassembled_byte_for_byte(tmp_path: Path) -> None:
    source = tmp_path / "whole"
    source.mkdir()
    files = {"big.whl": os.urandom(2500), "small.whl": os.urandom(300), "mid.whl": os.urandom(900)}
    for name, data in files.items():
        (source / name).write_bytes(data)
    out = tmp_path / "wheels"
    manifest = gpu_wheels.pack(sorted(source.iterdir()), out, part_bytes=1000)
    runs = sorted(out.glob("run*"))
    assert [run.name for run in runs] == [f"run{i:02d}" for i in range(1, len(runs) + 1)]
    assert len(runs) == len(manifest["runs"])
    for run in runs:
        carried = sum(f.stat().st_size for f in run.iterdir() if f.name != gpu_wheels.MANIFEST)
        assert carried <= 1000
    assert gpu_wheels.reassemble(out) == 0
    for name, data in files.items():
        assert (out / "dist" / name).read_bytes() == data


def test_a_missing_or_corrupt_part_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "whole"
    source.mkdir()
    (source / "big.whl").write_bytes(os.urandom(2500))
    out = tmp_path / "wheels"
    gpu_wheels.pack([source / "big.whl"], out, part_bytes=1000)
    part = next(out.glob("run*/big.whl.part001"))
    data = part.read_bytes()
    part.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # always a different first byte
    assert gpu_wheels.reassemble(out) == 1
    part.unlink()
    assert gpu_wheels.reassemble(out) == 1
