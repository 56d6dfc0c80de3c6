"""scripts/latency_harness.py's reading of the server's p99 from its request-duration histogram."""

import math

from scripts.latency_harness import server_p99_ms

INF = float("inf")


def test_the_p99_is_the_upper_bound_of_the_bucket_that_holds_it() -> None:
    before = {2500.0: 10.0, 5000.0: 10.0, 7500.0: 10.0, INF: 10.0}
    # 200 more requests: 150 under 2.5 ms, 48 more under 5 ms, 2 past 7.5 ms (1%).
    after = {2500.0: 160.0, 5000.0: 208.0, 7500.0: 208.0, INF: 210.0}
    assert server_p99_ms(before, after) == 5.0
    # One more past the last bucket: the p99 is beyond what the buckets can tell.
    assert server_p99_ms(before, {**after, INF: 211.0}) == INF
    assert math.isnan(server_p99_ms(after, after))
