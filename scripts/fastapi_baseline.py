"""The control group for scripts/bench.py: a naive FastAPI app, one `session.run` per request.

Usage: python scripts/fastapi_baseline.py --model NAME=MODEL_DIR [--model ...]

Serves `POST /infer/NAME` with uvicorn on a free 127.0.0.1 port and prints
`serving HTTP on 127.0.0.1:PORT` to stderr once it accepts connections. As a typical first
FastAPI model server does, it takes JSON (`{"data": [...]}`, the FP32 input of batch 1 as a flat
list, validated by a pydantic model) and answers JSON (`{"output": [...]}`). The handler is a
plain `def`, so FastAPI's threadpool runs it: no queue and no batching, just as many concurrent
`session.run` calls as there are requests. MODEL_DIR is a Triton model directory; its
config.pbtxt gives the session the options Convoy would give it. One session serves all threads
(ONNX Runtime allows concurrent runs), whatever the instance count.

Also holds what bench.py shares with it: `open_sessions` (the session options Convoy derives from
a config.pbtxt) and `closed_loop`, the aiohttp load generator that bench.py runs in its own
process against this app.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from backends import OrtSettings
from proto.model_config_pb2 import ModelConfig
from server.core.repository import read_config

JSON = "application/json"


class InferBody(BaseModel):
    data: list[float]  # the input tensor of batch 1, flattened


def json_body(tensor: np.ndarray) -> bytes:
    """The request body the app takes for one input tensor."""
    return json.dumps({"data": tensor.ravel().tolist()}).encode("utf-8")


def open_sessions(model_dir: Path) -> list[ort.InferenceSession]:
    """One session per configured instance, with the options Convoy derives from config.pbtxt."""
    config = read_config(model_dir) or ModelConfig()
    options = OrtSettings.from_config(config).session_options()
    count = sum(group.count for group in config.instance_group) or 1
    model_path = str(model_dir / "1" / "model.onnx")
    return [
        ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        for _ in range(count)
    ]


def build_app(sessions: Mapping[str, ort.InferenceSession]) -> FastAPI:
    app = FastAPI()

    @app.post("/infer/{model}")
    def infer(model: str, body: InferBody) -> dict[str, list[float]]:
        session = sessions.get(model)
        if session is None:
            raise HTTPException(status_code=404, detail=f"unknown model '{model}'")
        meta = session.get_inputs()[0]
        tensor = np.array(body.data, dtype=np.float32).reshape(1, *meta.shape[1:])
        outputs = session.run(None, {meta.name: tensor})
        return {"output": outputs[0].ravel().tolist()}

    return app


async def closed_loop(
    url: str, body: bytes, concurrency: int, warmup_s: float, window_s: float
) -> list[int]:
    """`concurrency` clients post `body` back to back; returns the latencies (ns) of the replies
    that arrive within `window_s` after `warmup_s`. Raises aiohttp.ClientError on a failed call.
    """
    latencies_ns: list[int] = []
    window_start_ns = time.monotonic_ns() + int(warmup_s * 1e9)
    window_end_ns = window_start_ns + int(window_s * 1e9)
    headers = {"content-type": JSON}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def client() -> None:
            while (sent_ns := time.monotonic_ns()) < window_end_ns:
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                    response.raise_for_status()
                done_ns = time.monotonic_ns()
                if window_start_ns <= done_ns <= window_end_ns:
                    latencies_ns.append(done_ns - sent_ns)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies_ns


def _model_arg(text: str) -> tuple[str, Path]:
    name, _, model_dir = text.partition("=")
    if not name or not model_dir:
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL_DIR, got '{text}'")
    return name, Path(model_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=_model_arg, action="append", required=True)
    args = parser.parse_args(argv)
    sessions = {name: open_sessions(model_dir)[0] for name, model_dir in args.model}
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
