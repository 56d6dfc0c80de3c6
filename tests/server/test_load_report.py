"""The load report's header (`endpoint-load-metrics`, Triton #7839's ORCA layouts): which
request values ask for it, its TEXT and JSON forms, and the stream response parameter that
carries it."""

from __future__ import annotations

import json

import pytest

from proto import grpc_service_pb2 as pb
from server.contract.load import LoadReport
from server.contract.responses import InferResponse
from server.frontend.grpc.stream import stream_message
from server.frontend.orca import REPORT_HEADER, report_header, requested_format

REPORT = LoadReport(queue_length=3, in_flight=7, load_ratio=0.875)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["TEXT"], "text"),
        (["json"], "json"),
        ([" Json "], "json"),
        (["BIN", "text"], "text"),  # the first one this server writes
        (["bin"], None),  # ORCA's binary form: no report
        (["", "xml"], None),
        ([], None),
    ],
)
def test_requested_format(values: list[str], expected: str | None) -> None:
    assert requested_format(values) == expected


def test_text_layout() -> None:
    assert report_header(REPORT, "text") == (
        "TEXT named_metrics.nv_inference_pending_request_count=3, "
        "named_metrics.convoy_inference_inflight_requests=7, "
        "named_metrics.convoy_load_ratio=0.875"
    )


def test_json_layout() -> None:
    header = report_header(REPORT, "json")
    assert header.startswith("JSON {")
    assert json.loads(header.removeprefix("JSON ")) == {
        "named_metrics": {
            "nv_inference_pending_request_count": 3,
            "convoy_inference_inflight_requests": 7,
            "convoy_load_ratio": 0.875,
        }
    }


def test_an_idle_server_reports_zeros() -> None:
    idle = report_header(LoadReport(0, 0, 0.0), "text")
    assert idle.endswith("inflight_requests=0, named_metrics.convoy_load_ratio=0.0")


def test_a_stream_response_carries_the_report_as_a_parameter_when_asked() -> None:
    request = pb.ModelInferRequest(model_name="simple", id="r1")
    answered = InferResponse("simple", 1, [], load=REPORT)
    message = stream_message(request, answered, True, "json")
    assert message is not None
    parameters = message.infer_response.parameters
    assert parameters[REPORT_HEADER].string_param == report_header(REPORT, "json")
    assert parameters["triton_final_response"].bool_param

    unasked = stream_message(request, answered, True)
    assert unasked is not None and REPORT_HEADER not in unasked.infer_response.parameters
    # A decoupled model's final flag alone has no response to report with.
    final = stream_message(request, None, True, "text")
    assert final is None
