"""scripts/loop_bench.py: perf's samples are put in their library, and the threads' CPU time is
split between the event loop's thread and the others."""

import os
import threading

from scripts import loop_bench


def test_a_sample_goes_to_its_library() -> None:
    lines = [
        " 7fda4adaa02e (/opt/python/lib/libpython3.11.so.1.0)",
        " ffffffff8164c2a2 ([kernel.kallsyms])",
        " 7fda3d645b70 (/venv/site-packages/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so)",
        " 7fda3d645b71 (/venv/site-packages/onnxruntime/capi/onnxruntime_pybind11_state.so)",
        " 7fda3d645b72 (/usr/lib/x86_64-linux-gnu/libc.so.6)",
        " 7fda3d645b73 ([unknown])",
        "",
    ]
    shares = loop_bench.library_shares(lines)
    assert set(shares) == set(loop_bench.LIBRARY_NAMES)
    for name in ("the interpreter", "the kernel", "gRPC's core", "ONNX Runtime", "libc"):
        assert shares[name] == 1 / 6
    assert shares[loop_bench.OTHER] == 1 / 6
    assert shares["uvloop"] == 0.0


def test_no_samples_is_no_share() -> None:
    assert set(loop_bench.library_shares([]).values()) == {0.0}


def test_the_loops_thread_is_apart_from_the_others() -> None:
    before = {10: 100, 11: 50, 12: 7}
    after = {10: 160, 11: 80, 13: 5}  # 12 ended, 13 started
    assert loop_bench.split_threads(before, after, 10) == (60, 35)


def test_this_process_threads_are_read() -> None:
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        ticks = loop_bench.thread_ticks(os.getpid())
    finally:
        done.set()
        thread.join()
    assert os.getpid() in ticks
    assert len(ticks) >= 2
    assert all(value >= 0 for value in ticks.values())


def test_readings_are_averaged_library_by_library() -> None:
    split = dict.fromkeys(loop_bench.LIBRARY_NAMES, 0.0)
    one = loop_bench.Reading(100.0, 200.0, 40.0, 0.8, {**split, "the kernel": 10.0})
    two = loop_bench.Reading(300.0, 100.0, 20.0, 0.6, {**split, "the kernel": 30.0})
    average = loop_bench.mean([one, two])
    assert (average.infer_per_s, average.loop_us, average.others_us) == (200.0, 150.0, 30.0)
    assert average.loop_busy == 0.7
    assert average.libraries_us is not None and average.libraries_us["the kernel"] == 20.0
    without = loop_bench.Reading(100.0, 200.0, 40.0, 0.8, None)
    assert loop_bench.mean([without]).libraries_us is None
