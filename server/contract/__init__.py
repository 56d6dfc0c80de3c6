"""What a front-end process and the core share and send each other: requests and responses in
wire-neutral form, the models' declared tensors, data types, errors and settings both read."""

from server.contract.model_io import ModelIO, TensorSpec, check_request
from server.contract.requests import InferInput, InferOptions, InferRequest
from server.contract.responses import InferOutput, InferResponse

__all__ = [
    "InferInput",
    "InferOptions",
    "InferOutput",
    "InferRequest",
    "InferResponse",
    "ModelIO",
    "TensorSpec",
    "check_request",
]
