"""Measuring a running server over gRPC with tritonclient, as a client sees it (the same closed
loop as in process); the average batch size comes from the server's ModelStatistics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from server.contract.datatypes import BY_WIRE
from server.tools._inputs import VARIABLE_DIM, sample_array
from server.tools.profile._loop import Window, closed_loop
from server.tools.profile._points import Point, percentile_ms
from server.tools.profile._space import Variant


async def measure_remote(
    url: str,
    model: str,
    concurrency: int,
    window: Window,
    advance: Callable[[float], None],
) -> Point:
    """One point against `url`: `concurrency` requests of batch 1 in flight."""
    try:
        import tritonclient.grpc.aio as grpcclient
    except ImportError as exc:
        raise RuntimeError("--url needs tritonclient: pip install 'convoy[profile]'") from exc
    client = grpcclient.InferenceServerClient(url)
    try:
        metadata = await client.get_model_metadata(model, as_json=True)
        inputs = [_input(grpcclient, tensor) for tensor in metadata["inputs"]]
        edges: list[tuple[int, int]] = []

        async def call() -> object:
            return await client.infer(model, inputs)

        async def on_edge(opening: bool) -> None:
            stats = await client.get_inference_statistics(model, as_json=True)
            versions = stats.get("model_stats", [])
            edges.append(
                (
                    sum(int(v.get("execution_count", 0)) for v in versions),
                    sum(int(v.get("inference_count", 0)) for v in versions),
                )
            )

        done = await closed_loop(call, concurrency, window, on_edge, advance)
    finally:
        await client.close()
    (first_executions, first_inferences), (last_executions, last_inferences) = edges
    executions = last_executions - first_executions
    return Point(
        variant=Variant(),
        concurrency=concurrency,
        where=url,
        infer_per_s=len(done.latencies_ns) / done.window_s,
        p50_ms=percentile_ms(done.latencies_ns, 50),
        p95_ms=percentile_ms(done.latencies_ns, 95),
        p99_ms=percentile_ms(done.latencies_ns, 99),
        average_batch=(last_inferences - first_inferences) / executions if executions else 0.0,
        cpu_percent=None,
        gpu_percent=None,
        execution=None,
    )


def _input(grpcclient: Any, tensor: dict[str, Any]) -> Any:
    """A request input of batch 1 from the model's metadata (-1 dims: VARIABLE_DIM)."""
    shape = tuple(VARIABLE_DIM if int(dim) < 0 else int(dim) for dim in tensor["shape"])
    array = sample_array(BY_WIRE[tensor["datatype"]].numpy, shape, np.random.default_rng(0))
    request_input = grpcclient.InferInput(tensor["name"], list(shape), tensor["datatype"])
    request_input.set_data_from_numpy(array)
    return request_input
