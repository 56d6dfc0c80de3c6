"""Classify one image (or seeded noise) with an image model over gRPC using stock tritonclient.

Usage: python scripts/client.py [--url 127.0.0.1:8001] [--model resnet18] [--image PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

INPUT_NAME = "input"
OUTPUT_NAME = "output"
IMAGE_SIZE = 224
RESIZE_SHORT_SIDE = 256
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
TOP_K = 5


def load_image(path: Path) -> np.ndarray:
    """Resize the short side to 256, center-crop 224, ImageNet-normalise; returns [1,3,224,224]."""
    try:
        # Pillow is only needed for --image, so it is not a project dependency.
        from PIL import Image
    except ImportError:
        sys.exit("--image needs Pillow: pip install pillow")
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    scale = RESIZE_SHORT_SIDE / min(rgb.size)
    width, height = round(rgb.width * scale), round(rgb.height * scale)
    rgb = rgb.resize((width, height), Image.Resampling.BILINEAR)
    left, top = (width - IMAGE_SIZE) // 2, (height - IMAGE_SIZE) // 2
    rgb = rgb.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    hwc = np.asarray(rgb, dtype=np.float32) / 255.0
    normalised = (hwc - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[np.newaxis])


def random_image(seed: int = 0) -> np.ndarray:
    """Seeded standard-normal noise, already in the normalised input's range."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)


def classify(url: str, model: str, batch: np.ndarray) -> np.ndarray:
    """One ModelInfer call; returns the output scores, shape [1, classes]."""
    client = grpcclient.InferenceServerClient(url)
    infer_input = grpcclient.InferInput(INPUT_NAME, list(batch.shape), "FP32")
    infer_input.set_data_from_numpy(batch)
    outputs = [grpcclient.InferRequestedOutput(OUTPUT_NAME)]
    result = client.infer(model, [infer_input], outputs=outputs)
    scores: np.ndarray | None = result.as_numpy(OUTPUT_NAME)
    if scores is None:
        sys.exit(f"model {model!r} returned no tensor named {OUTPUT_NAME!r}")
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Top-5 classes for an image from a Triton-style server."
    )
    parser.add_argument("--url", default="127.0.0.1:8001", help="gRPC host:port")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image", type=Path, help="image file; seeded noise when omitted")
    args = parser.parse_args(argv)

    batch = load_image(args.image) if args.image else random_image()
    scores = classify(args.url, args.model, batch)[0]
    for rank, index in enumerate(np.argsort(scores)[::-1][:TOP_K], start=1):
        print(f"{rank}. class {int(index):4d}  score {float(scores[index]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
