"""Classify an image with stock tritonclient over gRPC: seeded noise straight into resnet18, or an
image file through the server's own pre-processing (`preprocess`, a Python-backend model).

Usage: python scripts/client.py [--url 127.0.0.1:8001] [--model resnet18] [--image PATH]
       python scripts/client.py --ensemble --image PATH   (one call to the `classify` ensemble:
                                                          preprocess -> resnet18 -> label_head)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

IMAGE_SIZE = 224
TOP_K = 5


def random_image(seed: int = 0) -> np.ndarray:
    """Seeded standard-normal noise, already in the normalised input's range."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)


def infer(
    client: grpcclient.InferenceServerClient,
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
) -> dict[str, np.ndarray]:
    """One ModelInfer call with the named arrays; returns the requested outputs."""
    tensors = []
    for name, array in inputs.items():
        datatype = "BYTES" if array.dtype == object else "FP32"
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
    result = client.infer(model, tensors, outputs=requested)
    found = {name: result.as_numpy(name) for name in outputs}
    missing = [name for name, array in found.items() if array is None]
    if missing:
        sys.exit(f"model {model!r} returned no tensor named {missing}")
    return {name: array for name, array in found.items() if array is not None}


def image_bytes(path: Path) -> np.ndarray:
    """The file's bytes as a [1, 1] BYTES tensor (decoding happens on the server)."""
    return np.array([[path.read_bytes()]], dtype=object)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Top-5 classes for an image from a Triton-style server."
    )
    parser.add_argument("--url", default="127.0.0.1:8001", help="gRPC host:port")
    parser.add_argument("--model", default="resnet18", help="image model (without --ensemble)")
    parser.add_argument("--image", type=Path, help="JPEG or PNG file; seeded noise when omitted")
    parser.add_argument(
        "--ensemble",
        nargs="?",
        const="classify",
        metavar="NAME",
        help="send the image file to this ensemble in one call (default: classify)",
    )
    args = parser.parse_args(argv)
    client = grpcclient.InferenceServerClient(args.url)

    if args.ensemble:
        if args.image is None:
            parser.error("--ensemble needs --image")
        answer = infer(
            client, args.ensemble, {"IMAGE": image_bytes(args.image)}, ["LABEL", "LOGITS"]
        )
        print(f"label {int(answer['LABEL'].ravel()[0])} (from ensemble {args.ensemble!r})")
        scores = answer["LOGITS"][0]
    else:
        if args.image is not None:
            pixels = infer(client, "preprocess", {"IMAGE": image_bytes(args.image)}, ["PIXELS"])
            batch = pixels["PIXELS"]
        else:
            batch = random_image()
        scores = infer(client, args.model, {"input": batch}, ["output"])["output"][0]
    for rank, index in enumerate(np.argsort(scores)[::-1][:TOP_K], start=1):
        print(f"{rank}. class {int(index):4d}  score {float(scores[index]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
