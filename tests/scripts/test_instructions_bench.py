"""scripts/instructions_bench.py: the in-process path it counts serves real answers, batched and
not, and its request is perf_analyzer's for mlp."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from proto import grpc_service_pb2 as pb
from scripts import instructions_bench
from scripts.hotpath_bench import build_repository


def test_the_request_is_one_raw_fp32_row_of_256() -> None:
    request = pb.ModelInferRequest.FromString(instructions_bench.request_bytes("mlp_on"))
    assert request.model_name == "mlp_on"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("INPUT", "FP32", [1, 256])
    ]
    assert len(request.raw_input_contents[0]) == 256 * 4
    assert [o.name for o in request.outputs] == ["OUTPUT"]


@pytest.mark.parametrize(("concurrency", "model"), instructions_bench.CASES)
def test_each_case_is_served_in_process(tmp_path: Path, concurrency: int, model: str) -> None:
    repo = build_repository(tmp_path)
    served = asyncio.run(
        instructions_bench.serve_requests(repo, model, 2 * concurrency, concurrency)
    )
    assert served.seconds > 0
    response = pb.ModelInferResponse.FromString(served.answer)
    assert response.model_name == model
    assert [(o.name, list(o.shape)) for o in response.outputs] == [("OUTPUT", [1, 10])]
    output = np.frombuffer(response.raw_output_contents[0], np.float32)
    assert output.shape == (10,) and np.isfinite(output).all()
