"""The dynamic batcher's two pitfalls: a queue delay long against what one batch takes to run,
and an unbounded queue (the seed's "queue explosion")."""

from __future__ import annotations

import statistics
from pathlib import Path

from backends import BackendError, Instance, prepare_inputs
from batching import BatchPolicy
from proto import model_config_pb2 as mc
from server.core.serving import Reshape
from server.tools._inputs import sample_inputs
from server.tools._measured import MeasuredExecution
from server.tools.doctor._examined import Examined
from server.tools.doctor._files import CONFIG_FILENAME
from server.tools.doctor._findings import Check, Severity

TIMED_RUNS = 3  # executions timed after one warm-up run; the median counts
QUEUED_BATCHES = 2  # the suggested max_queue_size: this many full batches per instance


def waits(config: mc.ModelConfig) -> bool:
    """Whether the model's dynamic batcher may hold a request back for a fuller batch."""
    policy = BatchPolicy.from_config(config)
    return policy.dynamic and policy.max_queue_delay_ns > 0


async def measure_execution(config: mc.ModelConfig, instance: Instance) -> MeasuredExecution | None:
    """The median compute time of one execution at the largest preferred batch size (the batch
    the delay waits to fill); None when the model cannot run on sample data."""
    policy = BatchPolicy.from_config(config)
    batch = max(policy.preferred_batch_sizes)
    inputs = sample_inputs(config, batch)
    reshape = Reshape.from_config(config)
    prepared = prepare_inputs(reshape.to_model(inputs) if reshape is not None else inputs)
    times_ns = []
    for _ in range(TIMED_RUNS + 1):
        try:
            result = await instance.execute([prepared])
        except BackendError:
            return None
        if any(isinstance(response, BackendError) for response in result.responses):
            return None
        times_ns.append(
            result.compute_input_ns + result.compute_infer_ns + result.compute_output_ns
        )
    return MeasuredExecution(batch, statistics.median(times_ns[1:]) / 1e6)


def check_delay(
    examined: Examined, config: mc.ModelConfig, measured: MeasuredExecution, declared: bool
) -> None:
    """A delay longer than a whole preferred batch takes to run: at low load each request waits
    the full delay, longer than running the batch it waits to fill."""
    policy = BatchPolicy.from_config(config)
    delay_ms = policy.max_queue_delay_ns / 1e6
    if not waits(config) or delay_ms <= measured.execute_ms:
        return
    source = "recorded by convoy profile" if declared else "measured just now"
    examined.add(
        Severity.WARNING,
        Check.QUEUE_DELAY,
        f"model '{config.name}': max_queue_delay_microseconds is "
        f"{policy.max_queue_delay_ns // 1000} ({delay_ms:g} ms), but a batch of "
        f"{measured.batch_size} executes in {measured.execute_ms:.2f} ms ({source}); at low "
        f"load every request waits the whole delay, {delay_ms / measured.execute_ms:.1f}x what "
        "its batch takes to run",
        examined.path / CONFIG_FILENAME,
        f"max_queue_delay_microseconds: {int(measured.execute_ms * 1000)} or less, or measure "
        "the choice under load with convoy profile",
    )


def check_queue(examined: Examined, config: mc.ModelConfig, config_path: Path) -> None:
    """A dynamic batcher whose queue has no bound (a level without max_queue_size)."""
    policy = BatchPolicy.from_config(config)
    if not policy.dynamic or all(q.max_queue_size > 0 for q in policy.queue_policies):
        return
    instances = sum(group.count for group in config.instance_group)
    bound = QUEUED_BATCHES * config.max_batch_size * max(instances, 1)
    examined.add(
        Severity.WARNING,
        Check.QUEUE_SIZE,
        f"model '{config.name}': dynamic_batching has no max_queue_size, so its queue is "
        "unbounded: past its capacity, requests pile up and every one waits longer (queue "
        "explosion) instead of being refused at once",
        config_path,
        f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {bound} }} }} "
        f"({QUEUED_BATCHES} batches of {config.max_batch_size} per instance); clients then "
        "get UNAVAILABLE and can retry elsewhere",
    )
