"""OpenVINO backend: a model (OpenVINO IR `model.xml` + `model.bin`, or an ONNX file) compiled for
the CPU per instance, with Triton's OpenVINO parameters; openvino is imported only on load."""

from backends.openvino._instance import OpenVinoInstance, import_openvino
from backends.openvino._settings import OpenVinoSettings

__all__ = ["OpenVinoInstance", "OpenVinoSettings", "import_openvino"]
