"""`convoy profile`'s pure parts: the configurations it tries, the choice under a latency
objective, the recommended config.pbtxt (read back by doctor), and percentiles."""

from __future__ import annotations

from google.protobuf import text_format

from proto import model_config_pb2 as mc
from server.core.repository import parse_config
from server.tools._measured import MeasuredExecution, read_measured
from server.tools.profile import (
    KEEP,
    Choice,
    Point,
    Variant,
    apply,
    choose,
    latency_target_ms,
    percentile_ms,
    recommended_config,
    variants,
)

USER_CONFIG = """
name: "m"
max_batch_size: 16
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 5000 }
"""


def point(
    infer_per_s: float,
    p99_ms: float,
    concurrency: int = 1,
    variant: Variant | None = None,
    where: str = "in process",
) -> Point:
    return Point(
        variant=variant or Variant(instances=1),
        concurrency=concurrency,
        where=where,
        infer_per_s=infer_per_s,
        p50_ms=p99_ms / 2,
        p95_ms=p99_ms * 0.9,
        p99_ms=p99_ms,
        average_batch=4.0,
        cpu_percent=150.0,
        gpu_percent=None,
        execution=MeasuredExecution(4, 2.5),
    )


def test_the_most_throughput_under_the_objective() -> None:
    slow, fast_but_late, best = point(100, 5), point(900, 80), point(400, 19)
    assert choose([slow, fast_but_late, best], latency_p99_ms=20) == Choice(best, True)


def test_without_an_objective_the_most_throughput() -> None:
    assert choose([point(100, 5), point(900, 80)], None) == Choice(point(900, 80), True)


def test_a_tie_goes_to_the_lower_p99_then_the_lower_concurrency() -> None:
    late, early = point(400, 15, concurrency=8), point(400, 10, concurrency=16)
    assert choose([late, early], 20) == Choice(early, True)
    low, high = point(400, 10, concurrency=4), point(400, 10, concurrency=8)
    assert choose([high, low], 20) == Choice(low, True)


def test_when_nothing_meets_the_objective_the_lowest_p99() -> None:
    points = [point(900, 80), point(300, 40), point(500, 40)]
    assert choose(points, 10) == Choice(point(500, 40), False)


def test_the_point_on_the_objective_meets_it() -> None:
    assert choose([point(100, 20.0)], 20.0) == Choice(point(100, 20.0), True)


def test_points_over_the_wire_and_empty_points_are_not_chosen() -> None:
    remote = point(5000, 1, where="127.0.0.1:8001")
    assert choose([remote, point(0, 0)], 20) is None
    assert choose([], None) is None
    assert choose([remote, point(10, 30)], 20) == Choice(point(10, 30), False)


def test_variants_are_every_combination() -> None:
    tried = variants([1, 2], [], [0, 8], [100])
    assert tried == [
        Variant(1, KEEP, 0, 100),
        Variant(1, KEEP, 8, 100),
        Variant(2, KEEP, 0, 100),
        Variant(2, KEEP, 8, 100),
    ]
    assert variants([], [], [], []) == [Variant()]
    assert Variant().label == "as configured"
    assert Variant(2, KEEP, 8, KEEP).label == "instances=2, preferred=8"


def test_apply_changes_only_the_variant_fields() -> None:
    user = parse_config(USER_CONFIG, "test")
    done = apply(user, Variant(instances=3, preferred_batch_size=8, max_queue_delay_us=0))
    assert [g.count for g in done.instance_group] == [3]
    assert list(done.dynamic_batching.preferred_batch_size) == [8]
    assert done.dynamic_batching.max_queue_delay_microseconds == 0
    assert done.max_batch_size == 16
    assert apply(user, Variant()) == user
    assert user.dynamic_batching.max_queue_delay_microseconds == 5000  # not changed in place


def test_apply_to_a_config_without_groups_or_batching() -> None:
    done = apply(mc.ModelConfig(), Variant(instances=2, max_batch_size=8, preferred_batch_size=0))
    assert [g.count for g in done.instance_group] == [2]
    assert done.max_batch_size == 8
    assert done.HasField("dynamic_batching") and not done.dynamic_batching.preferred_batch_size


def test_the_recommended_config_is_the_users_plus_the_changes_and_the_figures() -> None:
    user = parse_config(USER_CONFIG, "test")
    chosen = point(412.5, 18.25, concurrency=8, variant=Variant(instances=2, max_queue_delay_us=0))
    text = recommended_config(user, Choice(chosen, True), 20.0, "in process on 2 core(s)")
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0] == (
        "# convoy profile: the most infer/s with p99 <= 20 ms: instances=2, delay_us=0 at "
        "concurrency 8: 412.5 infer/s, p50 9.12 ms, p95 16.43 ms, p99 18.25 ms, average batch 4.00"
    )
    assert comments[1] == "# convoy profile: measured in process on 2 core(s), requests of batch 1"
    assert comments[2] == (
        "# convoy profile: changed instance_group count: 2; "
        "dynamic_batching max_queue_delay_microseconds: 0"
    )
    written = parse_config(text, "recommended")
    expected = mc.ModelConfig()
    expected.CopyFrom(user)
    expected.instance_group[0].count = 2
    expected.dynamic_batching.max_queue_delay_microseconds = 0
    assert written == expected  # nothing auto-completed, nothing else added
    assert read_measured(text) == MeasuredExecution(4, 2.5)  # what doctor reads back


def test_a_recommendation_that_misses_the_objective_says_so() -> None:
    user = text_format.Parse('name: "m"', mc.ModelConfig())
    text = recommended_config(user, Choice(point(10, 30), False), 20.0, "in process")
    assert text.startswith(
        "# convoy profile: no configuration met p99 <= 20 ms: this one has the lowest p99"
    )


def test_percentiles_by_nearest_rank() -> None:
    latencies_ns = [i * 1_000_000 for i in range(1, 101)]  # 1..100 ms
    assert percentile_ms(latencies_ns, 50) == 50.0
    assert percentile_ms(latencies_ns, 99) == 99.0
    assert percentile_ms([3_000_000], 99) == 3.0
    assert percentile_ms([], 99) == 0.0


def test_fields_the_user_already_has_are_not_counted_as_changed() -> None:
    user = parse_config(USER_CONFIG, "test")
    same = point(10, 5, variant=Variant(instances=1, max_batch_size=16, max_queue_delay_us=0))
    text = recommended_config(user, Choice(same, True), None, "in process")
    assert "# convoy profile: changed dynamic_batching max_queue_delay_microseconds: 0\n" in text
    unchanged = point(10, 5, variant=Variant(instances=1, preferred_batch_size=0))
    text = recommended_config(user, Choice(unchanged, True), None, "in process")
    assert "# convoy profile: changed nothing\n" in text


def test_the_recommendation_names_a_latency_target_the_configuration_keeps() -> None:
    user = parse_config(USER_CONFIG, "test")
    chosen = point(412.5, 18.25, variant=Variant(instances=2))
    assert latency_target_ms(Choice(chosen, True), 20.0) == 20  # the objective, met
    assert latency_target_ms(Choice(chosen, True), None) == 23  # 18.25 ms + 25 %, whole ms
    assert latency_target_ms(Choice(chosen, False), 10.0) == 23  # missed: what it can keep
    text = recommended_config(user, Choice(chosen, True), 20.0, "in process")
    assert (
        "# convoy profile: a latency target this configuration keeps (p99 measured 18.25 ms): "
        'parameters { key: "convoy_latency_target_ms" value: { string_value: "20" } }'
    ) in text.splitlines()
    unbatched = text_format.Parse('name: "m"', mc.ModelConfig())
    text = recommended_config(unbatched, Choice(point(10, 5), True), None, "in process")
    assert "convoy_latency_target_ms" not in text  # the target needs dynamic batching
