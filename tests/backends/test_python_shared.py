"""A python model version's shared-arrays directory: made for its first instance, removed with its
last."""

import os
import subprocess
import sys
from pathlib import Path

from backends import SharedArrays


def test_the_directory_lives_from_the_first_instance_to_the_last() -> None:
    shared = SharedArrays("model/1")
    first = shared.acquire()
    assert Path(first).is_dir() and f"-{os.getpid()}-model_1-" in Path(first).name
    assert shared.acquire() == first
    (Path(first) / "w.npy").write_bytes(b"x")
    shared.release()
    assert Path(first).is_dir()  # one instance still uses it
    shared.release()
    assert not Path(first).exists()
    again = shared.acquire()  # a version that opens instances again gets a fresh one
    assert again != first and Path(again).is_dir()
    shared.release()


def test_the_arrays_of_a_server_that_is_gone_are_removed() -> None:
    """A killed server never releases its arrays: the next server to make some sweeps them."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    first = SharedArrays("a/1")
    path = Path(first.acquire())
    stale = path.parent / f"convoy-shared-{gone.stdout.strip()}-a_1-stale"
    stale.mkdir()
    (stale / "w.npy").write_bytes(b"x")
    second = SharedArrays("b/1")
    second.acquire()
    assert not stale.exists()
    assert path.is_dir()  # this server's own stay
    first.release()
    second.release()
