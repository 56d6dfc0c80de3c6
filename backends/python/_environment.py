"""A python model's own execution environment (Triton's `EXECUTION_ENV_PATH` parameter): a Python
installation, packed as a tarball (conda-pack) or unpacked in a directory, whose interpreter runs
the model's worker process instead of the server's.

`$$TRITON_MODEL_DIRECTORY` in the path is the model's directory. A tarball is unpacked once per
file (its path, size and modification time) under the system's temporary directory, and shared
by every instance and model that names it. The interpreter must be Python 3.10 or later with
NumPy: the worker runs on it and imports only the standard library and NumPy before model.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backends.errors import ModelLoadError

MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
_TARBALLS = (".tar.gz", ".tgz", ".tar")
_UNPACKED = Path(tempfile.gettempdir()) / "convoy-python-envs"
# What the interpreter must answer: a Python the worker runs on, with NumPy.
_PROBE = "import sys, numpy; print('%d.%d' % sys.version_info[:2])"
_PROBE_TIMEOUT_S = 60.0
_LEAST_PYTHON = (3, 10)


@dataclass(frozen=True, slots=True)
class ExecutionEnvironment:
    """The interpreter a model's worker runs on, and the variables that put its environment
    first (its `bin` on PATH, its `lib` for shared libraries)."""

    python: str
    variables: dict[str, str]


def execution_environment(model: str, model_dir: Path, path: str) -> ExecutionEnvironment:
    """The environment `path` (the parameter's value) names for `model`; ModelLoadError, with
    the reason, when it is missing, cannot be unpacked, or its Python cannot run the worker."""
    where = Path(path.replace(MODEL_DIRECTORY, str(model_dir)))
    if not where.exists():
        raise ModelLoadError(f"model '{model}': EXECUTION_ENV_PATH '{where}' does not exist")
    root = _unpacked(model, where) if where.is_file() else where
    python = next(
        (root / "bin" / n for n in ("python3", "python") if (root / "bin" / n).exists()), None
    )
    if python is None:
        raise ModelLoadError(
            f"model '{model}': EXECUTION_ENV_PATH '{where}' holds no bin/python3 or bin/python"
        )
    variables = dict(os.environ)
    variables["PATH"] = os.pathsep.join(filter(None, [str(root / "bin"), variables.get("PATH")]))
    libraries = [str(root / "lib"), variables.get("LD_LIBRARY_PATH")]
    variables["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, libraries))
    variables.pop("PYTHONHOME", None)
    variables.pop("PYTHONPATH", None)  # the server's packages are not the model's
    _check(model, str(python), variables)
    return ExecutionEnvironment(str(python), variables)


def _unpacked(model: str, tarball: Path) -> Path:
    """The directory a tarball is unpacked to (unpacked now unless it was before)."""
    if not tarball.name.endswith(_TARBALLS):
        raise ModelLoadError(
            f"model '{model}': EXECUTION_ENV_PATH '{tarball}' is a file but not a tarball "
            "(.tar.gz, .tgz, .tar) or a directory"
        )
    stat = tarball.stat()
    key = f"{tarball.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    target = _UNPACKED / hashlib.sha256(key).hexdigest()[:24]
    with _file_lock(_UNPACKED / f"{target.name}.lock"):
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=_UNPACKED))
        try:
            with tarfile.open(tarball) as archive:
                archive.extractall(scratch, filter="data")  # nothing outside, no devices
            scratch.rename(target)
        except (OSError, tarfile.TarError) as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise ModelLoadError(
                f"model '{model}': EXECUTION_ENV_PATH '{tarball}' could not be unpacked: {exc}"
            ) from None
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Held by one holder at a time: each opening is its own lock, so threads of one server
    (instances loading in parallel) wait for each other as servers sharing the directory do."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check(model: str, python: str, variables: dict[str, str]) -> None:
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE],
            env=variables,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"model '{model}': EXECUTION_ENV_PATH's {python} did not run: {exc}"
        raise ModelLoadError(reason) from None
    version = probe.stdout.strip()
    if probe.returncode != 0 or tuple(map(int, version.split("."))) < _LEAST_PYTHON:
        why = probe.stderr.strip().splitlines()[-1:] or [f"Python {version}"]
        raise ModelLoadError(
            f"model '{model}': EXECUTION_ENV_PATH's {python} cannot run the python backend's "
            f"worker, which needs Python 3.10 or later with NumPy ({why[0]})"
        )
