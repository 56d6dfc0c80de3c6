"""The table of Triton's wordings: each message Triton clients look for comes with the status
Triton answers it with, over gRPC and HTTP alike."""

import grpc
import pytest

from server.contract import errors
from server.contract.errors import TRITON_WORDINGS, Wording
from server.frontend.grpc import status_for
from server.frontend.http import http_status_for

# Triton's status for each wording (core Status codes, through its front ends' tables).
TRITON_STATUS = {
    errors.CONTENTS_WITH_RAW: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.VERSION_NOT_A_NUMBER: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.VERSION_NEGATIVE: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.LOAD_NOT_POLLED: (grpc.StatusCode.INTERNAL, 500),
    errors.LOAD_FAILED: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.CLASSIFICATION_NOT_INT64: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.CLASSIFICATION_NOT_POSITIVE: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.CLASSIFICATION_IN_SHM_GRPC: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.CLASSIFICATION_IN_SHM_HTTP: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    errors.CLASSIFICATION_TYPE: (grpc.StatusCode.INVALID_ARGUMENT, 400),
}


def test_the_table_is_every_wording_of_the_module() -> None:
    found = {value for value in vars(errors).values() if isinstance(value, Wording)}
    assert found == set(TRITON_WORDINGS) == set(TRITON_STATUS)


@pytest.mark.parametrize("wording", TRITON_WORDINGS, ids=lambda w: w.text[:40])
def test_each_wording_gets_tritons_status_on_both_protocols(wording: Wording) -> None:
    fields = {"input": "x", "model": "m", "version": "v", "reason": "r", "datatype": "BYTES"}
    error = wording(**fields)
    assert (status_for(error), http_status_for(error)) == TRITON_STATUS[wording]
    assert str(error) == wording.text.format(**fields)


def test_a_wording_fills_its_fields_word_for_word() -> None:
    error = errors.VERSION_NOT_A_NUMBER(version="latest")
    assert str(error) == (
        "failed to get model version from specified version string 'latest' (details: stol), "
        "version should be an integral value > 0"
    )
