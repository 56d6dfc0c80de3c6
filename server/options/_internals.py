"""Triton's options that tune its C++ internals (memory pools, CUDA, plugin folders): accepted,
and logged once as having no effect, with the reason."""

from __future__ import annotations

from server.options._option import Option, Support
from server.options._values import BOOL, FILE, INT, Value

NO_EFFECT = Support.NO_EFFECT
_POOLS = "Convoy allocates through NumPy, CuPy and ONNX Runtime, not Triton's memory pools"
_PLUGINS = "Convoy's backends (ONNX Runtime, Python) and caches are built in"

INTERNALS = (
    Option(
        "enable-peer-access",
        BOOL,
        "CUDA peer access between GPUs",
        NO_EFFECT,
        "true",
        behaviour="each instance keeps its tensors on its own GPU",
    ),
    Option(
        "pinned-memory-pool-byte-size",
        INT,
        "pinned host memory pool",
        NO_EFFECT,
        "268435456",
        behaviour=_POOLS,
    ),
    Option(
        "cuda-memory-pool-byte-size",
        Value("DEVICE:BYTES", str),
        "CUDA memory pool per GPU; repeatable",
        NO_EFFECT,
        "67108864 per GPU",
        behaviour=_POOLS,
        repeat=True,
    ),
    Option(
        "cuda-virtual-address-size",
        Value("DEVICE:BYTES", str),
        "growable implicit-state limit per GPU; repeatable",
        NO_EFFECT,
        "1 GB per GPU",
        behaviour=_POOLS,
        repeat=True,
    ),
    Option(
        "min-supported-compute-capability",
        Value("X.Y", str),
        "GPUs below it are ignored",
        NO_EFFECT,
        "7.5 (GPU build)",
        behaviour="ONNX Runtime decides which GPUs it can use",
    ),
    Option(
        "buffer-manager-thread-count",
        INT,
        "threads that copy input buffers",
        NO_EFFECT,
        "0",
        behaviour="inputs are gathered on the event loop or by the instance's thread",
    ),
    Option(
        "host-policy",
        Value("NAME,KEY=VALUE", str),
        "NUMA node or CPU cores of instances; repeatable",
        NO_EFFECT,
        "none",
        behaviour="instances use the cores of the process (its CPU affinity)",
        repeat=True,
    ),
    Option(
        "model-load-gpu-limit",
        Value("DEVICE:FRACTION", str),
        "refuse loads past this fraction of a GPU's memory; repeatable",
        NO_EFFECT,
        "none",
        behaviour="`--memory-budget` bounds what loaded models take",
        repeat=True,
    ),
    Option(
        "repoagent-directory",
        FILE,
        "folder of repository agents",
        NO_EFFECT,
        "/opt/tritonserver/repoagents",
        behaviour="Convoy's one repository agent, checksum, is built in",
    ),
    Option(
        "cache-directory",
        FILE,
        "folder of cache libraries",
        NO_EFFECT,
        "/opt/tritonserver/caches",
        behaviour=_PLUGINS,
    ),
)
