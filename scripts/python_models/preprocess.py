"""Convoy's example Python-backend model (served as `preprocess`): encoded images in, normalised
ResNet input out. Written for Triton's Python backend API, so it runs unchanged on either server.

Input IMAGE: BYTES [1] per item (a JPEG or PNG file); output PIXELS: FP32 [3, 224, 224].
"""

from __future__ import annotations

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

IMAGE_SIZE = 224
RESIZE_SHORT_SIDE = 256
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def to_pixels(data: bytes) -> np.ndarray:
    """Resize the short side to 256, center-crop 224, ImageNet-normalise; returns [3, 224, 224]."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    scale = RESIZE_SHORT_SIDE / min(rgb.size)
    width, height = (
        max(round(rgb.width * scale), IMAGE_SIZE),
        max(round(rgb.height * scale), IMAGE_SIZE),
    )
    rgb = rgb.resize((width, height), Image.Resampling.BILINEAR)
    left, top = (width - IMAGE_SIZE) // 2, (height - IMAGE_SIZE) // 2
    rgb = rgb.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    hwc = np.asarray(rgb, dtype=np.float32) / 255.0
    return np.ascontiguousarray(((hwc - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "PIXELS")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            try:
                pixels = np.stack([to_pixels(bytes(item)) for item in images.reshape(-1)])
            except (UnidentifiedImageError, OSError, ValueError) as exc:
                error = pb_utils.TritonError(
                    f"IMAGE is not a readable JPEG or PNG: {exc}", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            tensor = pb_utils.Tensor("PIXELS", pixels.astype(self.dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses
