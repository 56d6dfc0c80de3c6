"""The control group for scripts/bench.py: a naive FastAPI app in its fastest naive form.

Usage: python scripts/fastapi_baseline.py --model NAME=MODEL_ONNX [--model ...]

Serves the two naive handler forms, `POST /async/NAME` and `POST /def/NAME`, with uvicorn
(uvloop and httptools, one process) on a free 127.0.0.1 port and prints
`serving HTTP on 127.0.0.1:PORT` to stderr once it accepts connections. The body is the FP32
input of batch 1 as raw bytes and the answer is the first output's raw bytes: no JSON, no queue,
no batching. Each model is one `onnxruntime.InferenceSession(path)` with default session options,
shared by both forms, and each request is one `session.run`: on the event loop in the
`async def` form, in FastAPI's threadpool (as many concurrent runs as requests) in the plain
`def` form. Which is faster depends on the model and the load (a thread hop costs more than the
mlp's run; concurrent resnet18 runs share the cores), so bench.py measures both and takes the
faster as the control group.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import Body, FastAPI, HTTPException, Request, Response

RAW = "application/octet-stream"


def build_app(sessions: Mapping[str, ort.InferenceSession]) -> FastAPI:
    app = FastAPI()
    inputs = {name: session.get_inputs()[0] for name, session in sessions.items()}

    def run(model: str, body: bytes) -> Response:
        session = sessions.get(model)
        if session is None:
            raise HTTPException(status_code=404, detail=f"unknown model '{model}'")
        meta = inputs[model]
        tensor = np.frombuffer(body, np.float32).reshape(1, *meta.shape[1:])
        output = session.run(None, {meta.name: tensor})[0]
        return Response(output.tobytes(), media_type=RAW)

    @app.post("/async/{model}")
    async def infer_async(model: str, request: Request) -> Response:
        return run(model, await request.body())

    @app.post("/def/{model}")
    def infer_def(model: str, body: Annotated[bytes, Body(media_type=RAW)]) -> Response:
        return run(model, body)

    return app


def _model_arg(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL_ONNX, got '{text}'")
    return name, Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=_model_arg, action="append", required=True)
    args = parser.parse_args(argv)
    sessions = {name: ort.InferenceSession(str(path)) for name, path in args.model}
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(2048)  # connections queue from here on, before uvicorn accepts them
    port = listener.getsockname()[1]
    print(f"serving HTTP on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(build_app(sessions), log_level="warning"))
    server.run(sockets=[listener])
    return 0


if __name__ == "__main__":
    sys.exit(main())
