"""Developer scripts: ONNX model builders, the example repository generator and a sample client."""
