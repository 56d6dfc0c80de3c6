"""Convoy's `triton_python_backend_utils`: the names a Triton model.py uses, as Triton has them.

The worker registers this package under Triton's name before it imports model.py. It imports
nothing from Convoy, so it runs the same in the worker process and in tests.
"""

from ._config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from ._errors import TritonError, TritonModelException
from ._logger import LOGGER_NAME, Logger, LogLevel
from ._metrics import Metric, MetricFamily
from ._requests import (
    InferenceRequest,
    InferenceTrace,
    ModelCaller,
    PreferredMemory,
    get_input_tensor_by_name,
)
from ._requests import _install_model_caller as _install_model_caller
from ._responses import (
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
    get_output_tensor_by_name,
)
from ._server import ServerAsk, is_model_ready, load_model, unload_model
from ._server import _install_server_ask as _install_server_ask
from ._shared_array import _install_shared_dir as _install_shared_dir
from ._shared_array import shared_array
from ._tensor import Tensor
from ._types import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_CPU_PINNED,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    numpy_to_triton_type,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "LOGGER_NAME",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelCaller",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "ServerAsk",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "shared_array",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]
