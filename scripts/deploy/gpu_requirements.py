"""Print convoy's requirements for a GPU install: the base ones plus the `gpu` extra, without the
CPU `onnxruntime`. Dockerfile.gpu installs convoy with `--no-deps`, then these.

onnxruntime and onnxruntime-gpu own the same `onnxruntime/` folder, so one environment must never
hold both (uninstalling either breaks the other). Leaving the CPU package out of the one resolve
is cleaner than installing it and removing it afterwards. Reads the installed distribution's
metadata, so the list follows pyproject.toml. More extras can be named (Dockerfile.gpu adds
`cloud`); an extra made of the distribution's own extras (`cloud = ["convoy[s3,gcs,azure]"]`)
brings theirs, since pip given `convoy[...]` would look convoy up on the index.
Usage: python gpu_requirements.py [DISTRIBUTION [EXTRA ...]]   (EXTRA defaults to gpu)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Collection, Iterable
from importlib.metadata import requires

CPU_ONLY = frozenset({"onnxruntime"})  # normalized names the GPU image must not install
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""^extra\s*==\s*["']([^"']+)["']$""")
_EXTRAS = re.compile(r"\s*\[([^\]]*)\]")  # the `[a,b]` after a distribution's name


def gpu_requirements(
    requirements: Iterable[str], extras: Collection[str] = ("gpu",), distribution: str = "convoy"
) -> list[str]:
    """The requirements (as in `importlib.metadata.requires`) that an install with `extras` and
    without the CPU-only packages needs; the `extra` markers are dropped, other markers kept. A
    requirement on `distribution` itself is replaced by the requirements of the extras it names."""
    parsed = [_parse(requirement) for requirement in requirements]
    own = _normalize(distribution)
    wanted = {_normalize(extra) for extra in extras}
    grown = True
    while grown:  # extras that name the distribution's own extras, to any depth
        grown = False
        for _spec, name, extra, _marker, named in parsed:
            if name == own and extra in (None, *wanted) and not named <= wanted:
                wanted |= named
                grown = True
    return [
        f"{spec}; {marker}" if marker else spec
        for spec, name, extra, marker, _named in parsed
        if extra in (None, *wanted) and name != own and name not in CPU_ONLY
    ]


def _parse(requirement: str) -> tuple[str, str, str | None, str, frozenset[str]]:
    """(spec, normalized name, the extra it belongs to or None, its other marker, the extras
    the spec asks of its distribution)."""
    spec, _, marker = (part.strip() for part in requirement.partition(";"))
    extra = None
    if marker:
        wanted = _EXTRA.match(marker)
        if wanted:
            extra, marker = _normalize(wanted.group(1)), ""
        elif "extra" in marker:
            raise ValueError(f"unsupported marker in {requirement!r}: write it as extra == ...")
    found = _NAME.match(spec)
    if found is None:
        raise ValueError(f"no distribution name in {requirement!r}")
    named = _EXTRAS.match(spec, found.end())
    asked = frozenset(
        _normalize(e.strip()) for e in (named.group(1).split(",") if named else ()) if e.strip()
    )
    return spec, _normalize(found.group(1)), extra, marker, asked


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    distribution = argv[1] if len(argv) > 1 else "convoy"
    extras = argv[2:] or ["gpu"]
    print("\n".join(gpu_requirements(requires(distribution) or [], extras, distribution)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
