"""Print convoy's requirements for a GPU install: the base ones plus the `gpu` extra, without the
CPU `onnxruntime`. Dockerfile.gpu installs convoy with `--no-deps`, then these.

onnxruntime and onnxruntime-gpu own the same `onnxruntime/` folder, so one environment must never
hold both (uninstalling either breaks the other). Leaving the CPU package out of the one resolve
is cleaner than installing it and removing it afterwards. Reads the installed distribution's
metadata, so the list follows pyproject.toml. Usage: python gpu_requirements.py [DISTRIBUTION]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from importlib.metadata import requires

CPU_ONLY = frozenset({"onnxruntime"})  # normalized names the GPU image must not install
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""^extra\s*==\s*["']([^"']+)["']$""")


def gpu_requirements(requirements: Iterable[str], extra: str = "gpu") -> list[str]:
    """The requirements (as in `importlib.metadata.requires`) that an install with `extra` and
    without the CPU-only packages needs; the `extra` markers are dropped, other markers kept."""
    selected = []
    for requirement in requirements:
        spec, _, marker = (part.strip() for part in requirement.partition(";"))
        if marker:
            wanted = _EXTRA.match(marker)
            if wanted:
                if wanted.group(1) != extra:
                    continue
                marker = ""
            elif "extra" in marker:
                raise ValueError(f"unsupported marker in {requirement!r}: write it as extra == ...")
        found = _NAME.match(spec)
        if found is None:
            raise ValueError(f"no distribution name in {requirement!r}")
        if _normalize(found.group(1)) in CPU_ONLY:
            continue
        selected.append(f"{spec}; {marker}" if marker else spec)
    return selected


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    distribution = argv[1] if len(argv) > 1 else "convoy"
    print("\n".join(gpu_requirements(requires(distribution) or [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
