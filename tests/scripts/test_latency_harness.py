"""scripts/latency_harness.py's readings: the server's p99 from its request-duration histogram,
how busy a model's instance was from its batch statistics, and taskset's CPU lists."""

import math

from scripts.latency_harness import cpu_list, instance_use, server_p99_ms

INF = float("inf")


def test_the_p99_is_the_upper_bound_of_the_bucket_that_holds_it() -> None:
    before = {2500.0: 10.0, 5000.0: 10.0, 7500.0: 10.0, INF: 10.0}
    # 200 more requests: 150 under 2.5 ms, 48 more under 5 ms, 2 past 7.5 ms (1%).
    after = {2500.0: 160.0, 5000.0: 208.0, 7500.0: 208.0, INF: 210.0}
    assert server_p99_ms(before, after) == 5.0
    # One more past the last bucket: the p99 is beyond what the buckets can tell.
    assert server_p99_ms(before, {**after, INF: 211.0}) == INF
    assert math.isnan(server_p99_ms(after, after))


def test_instance_use_reads_the_window_between_two_readings() -> None:
    before = {1: (10, 100_000_000)}
    # In 2 s: 90 batches of one at 10 ms and 5 of four at 30 ms (1.05 s of compute, 110 images).
    after = {1: (100, 1_000_000_000), 4: (5, 150_000_000)}
    assert instance_use(before, after, 2.0) == (
        "instance computing 52% of the time, batches of 1.2, 9.5 ms per image"
    )
    assert instance_use(after, after, 2.0) == "no batches"


def test_cpu_lists_read_as_taskset_writes_them() -> None:
    assert cpu_list("1") == {1}
    assert cpu_list("0,2") == {0, 2}
    assert cpu_list("0-3,6") == {0, 1, 2, 3, 6}
