"""The documentation's reference pages that are generated from the code, so that they cannot
drift from it:

- docs/reference/metrics.md: every Prometheus family the metrics endpoint exports, read from the
  real collector (`server.core.metrics.StatsCollector`) over a real repository of one model, under
  each setting that adds or removes families: its type, labels, meaning and when it is there;
- docs/reference/model-config.md: every field of Triton's `ModelConfig` (from the protobuf
  descriptor Convoy parses `config.pbtxt` with), and what Convoy does with it.

    python scripts/gen_docs.py          # rewrite the pages
    python scripts/gen_docs.py --check  # exit 1 if a page is out of date

(The command-line reference's option tables come from scripts/options_table.py.)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/gen_docs.py`: Python puts scripts/ on sys.path, not the root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf.descriptor import FieldDescriptor

from batching import RateLimiter
from proto import model_config_pb2 as mc
from scripts.models import simple, write_model
from server.core.cache import LocalCache, ResponseCache
from server.core.metrics import MetricsOptions, StatsCollector
from server.core.metrics.samplers import GpuSampler
from server.core.repository import Repository

DOCS = Path(__file__).resolve().parents[1] / "docs"
METRICS_PAGE = DOCS / "reference" / "metrics.md"
CONFIG_PAGE = DOCS / "reference" / "model-config.md"

# --- the metrics reference ----------------------------------------------------------------------

_CONFIG = """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU
                   rate_limiter { resources [ { name: "R" count: 1 } ] } } ]
"""
_CACHED = "response_cache { enable: true }\n"
_SUFFIXES = ("_bucket", "_count", "_sum")


@dataclass
class Family:
    name: str
    kind: str
    help: str
    labels: set[str] = field(default_factory=set)
    when: str = "always"
    off: list[str] = field(default_factory=list)


async def _repository(root: Path, *, cached: bool, limited: bool) -> Repository:
    write_model(root, "simple", simple(), _CONFIG + (_CACHED if cached else ""))
    cache: ResponseCache | None = LocalCache(1 << 20) if cached else None
    repository = Repository(
        [root],
        cache=cache,
        limiter=RateLimiter([]) if limited else None,
        latency_histograms=True,
    )
    await repository.load_many()
    failures = repository.failures()
    if failures:
        raise SystemExit(f"the docs' example model did not load: {failures}")
    return repository


# Everything on: the options under which the collector exports every family it has.
_ALL = MetricsOptions(gpu=False, summaries=True, latency_histograms=True)
_DEFAULT = MetricsOptions(gpu=False)
# (what adds the families, the options that add them to the default ones)
_ADDED = (
    ("with `--metrics-config summary_latencies=true`", replace(_DEFAULT, summaries=True)),
    (
        "with `--metrics-config histogram_latencies=true`",
        replace(_DEFAULT, latency_histograms=True),
    ),
)
# (the setting, the options with it, from everything on)
_REMOVED = (
    ("`--metrics-config counter_latencies=false`", replace(_ALL, counter_latencies=False)),
    (
        "`--metrics-config histogram_latencies=false`",
        replace(_ALL, histograms=False, latency_histograms=False),
    ),
    ("`--allow-cpu-metrics false`", replace(_ALL, cpu=False)),
)


class _Collection:
    """The families of several scrapes, their labels merged (a family may have samples in one
    repository and none in another)."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def collect(
        self, repository: Repository, options: MetricsOptions, cache: ResponseCache | None = None
    ) -> set[str]:
        names = set()
        for metric in StatsCollector(repository, options, cache).collect():
            family = self.families.setdefault(
                metric.name, Family(metric.name, metric.type, metric.documentation)
            )
            for sample in metric.samples:
                family.labels.update(sample.labels)
            names.add(metric.name)
        return names


async def _metric_families() -> list[Family]:
    with tempfile.TemporaryDirectory() as plain_dir, tempfile.TemporaryDirectory() as full_dir:
        plain = await _repository(Path(plain_dir), cached=False, limited=False)
        full = await _repository(Path(full_dir), cached=True, limited=True)
        try:
            seen = _Collection()
            cache = LocalCache(1 << 20)
            every = seen.collect(full, _ALL, cache) | seen.collect(plain, _ALL)
            default = seen.collect(plain, _DEFAULT)
            added = [
                ("with `--cache-config`", seen.collect(plain, _DEFAULT, cache)),
                ("with `--rate-limit execution_count`", seen.collect(full, _DEFAULT)),
                *((when, seen.collect(plain, options)) for when, options in _ADDED),
            ]
            for name in every - default:
                seen.families[name].when = next(w for w, names in added if name in names)
            for flag, options in _REMOVED:
                left = seen.collect(plain, options) | seen.collect(full, options, cache)
                for name in every - left:
                    family = seen.families[name]
                    if flag.strip("`").split("=")[0] not in family.when:  # not its own switch
                        family.off.append(flag)
        finally:
            await plain.unload_all(5.0)
            await full.unload_all(5.0)
    gpu = []
    for metric in _gpu_sampler().families():
        family = Family(metric.name, metric.type, metric.documentation)
        family.when = "with a GPU and the `gpu` extra (NVML)"
        family.off.append("`--allow-gpu-metrics false`")
        for sample in metric.samples:
            family.labels.update(sample.labels)
        gpu.append(family)
    return [*(seen.families[name] for name in _ordered(seen.families, every)), *gpu]


def _ordered(families: dict[str, Family], names: set[str]) -> list[str]:
    """The collector's own order (the order families were first seen)."""
    return [name for name in families if name in names]


class _Reading:
    gpu = total = used = 0


class _OneGpu:
    """NVML as one GPU answers it, so that the GPU families are read from the real sampler on a
    machine without a GPU (the docs are built on CPU machines)."""

    NVMLError = RuntimeError

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return "GPU-0"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> _Reading:
        return _Reading()

    nvmlDeviceGetMemoryInfo = nvmlDeviceGetUtilizationRates

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 0

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetPowerUsage
    nvmlDeviceGetTotalEnergyConsumption = nvmlDeviceGetPowerUsage


def _gpu_sampler() -> GpuSampler:
    sampler = GpuSampler()
    sampler._nvml = _OneGpu()
    sampler._energy_start_mj = {0: 0}
    return sampler


def metrics_page() -> str:
    families = asyncio.run(_metric_families())
    rows = [
        "| Family | Type | Labels | Meaning | Exported | Turned off by |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for family in families:
        labels = ", ".join(f"`{label}`" for label in sorted(family.labels)) or "none"
        rows.append(
            f"| `{family.name}` | {family.kind} | {labels} | {_escape(family.help)} | "
            f"{family.when} | {', '.join(family.off)} |"
        )
    triton = sum(1 for f in families if f.name.startswith("nv_"))
    return f"""# Prometheus metrics

<!-- Generated by scripts/gen_docs.py from the metrics collector: do not edit by hand. -->

The metrics endpoint (`--metrics-port`, 8002 by default, path `/metrics`) exports
{len(families)} metric families: {triton} under Triton's names (`nv_*`, with Triton's help texts
and labels) and {len(families) - triton} of Convoy's own (`convoy_*`). This table is generated by
`scripts/gen_docs.py` from the collector itself, run over a repository of one model under each
setting below, so it lists exactly what the server exports; a test fails when it is stale.

Labels: `model` and `version` name a loaded model version; `reason` is why requests failed
(`REJECTED`, `CANCELED`, `BACKEND`, `OTHER`); `le` is a histogram bucket's upper bound and
`quantile` a summary's quantile; `gpu_uuid` names a GPU. Counters keep Triton's exact names (no
`_total` suffix); histograms add `_bucket`, `_count` and `_sum` samples, summaries `_count` and
`_sum`. How to use them (Prometheus, the Grafana dashboard, autoscaling) is on
[Metrics](../operations/metrics.md).

{chr(10).join(rows)}
"""


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


# --- the config.pbtxt reference -----------------------------------------------------------------

# What Convoy does with each ModelConfig field it acts on; every other field parses and has no
# effect yet. A key that is not a ModelConfig field fails the generation.
CONFIG_SUPPORT: dict[str, str] = {
    "name": "must match the directory name (filled in when absent)",
    "platform": "`onnxruntime_onnx`, `pytorch_libtorch`, `ensemble` (see "
    "[Backends](../guide/backends.md))",
    "backend": "`onnxruntime`, `pytorch`, `openvino`, `python` (see "
    "[Backends](../guide/backends.md)), and any name a Python-based backend's model.py serves "
    "(see [Python-based backends](../guide/python-and-ensembles.md#python-based-backends))",
    "runtime": "a `.py` file: the Python-based backend of that name runs the model (see "
    "[Python-based backends](../guide/python-and-ensembles.md#python-based-backends)); other "
    "values parse and have no effect",
    "version_policy": "`latest { num_versions }` (default: latest 1), `all {}`, "
    "`specific { versions }`",
    "max_batch_size": "`0` (no batch dimension) or more; when above 0, every tensor's first "
    "dimension in the model file must be dynamic",
    "input": "`name`, `data_type`, `dims` (`-1` for a variable dimension), `optional`, `reshape` "
    "(the shape in the model file; clients and the batcher see `dims`), `allow_ragged_batch` "
    "(see [Ragged batching](../guide/batching.md#ragged-batching))",
    "output": "`name`, `data_type`, `dims`, `reshape`, `label_filename` (class labels, see "
    "[Classification](../guide/classification.md))",
    "batch_input": "every `kind` (element counts, accumulated with or without a leading 0, the "
    "largest count as a shape, item shapes and their flattened form), INT32 or FP32, for ONNX "
    "Runtime, PyTorch and OpenVINO models (see "
    "[Ragged batching](../guide/batching.md#ragged-batching))",
    "model_repository_agents": "the `checksum` agent (MD5 and SHA digests of the model's "
    "files); any other agent fails the load (see "
    "[Model repository](../guide/model-repository.md#repository-agents))",
    "model_operations": "`op_library_filename`: ONNX Runtime custom operator libraries (see "
    "[Backends](../guide/backends.md#onnx-runtime-custom-operators))",
    "batch_output": "`BATCH_SCATTER_WITH_INPUT_SHAPE` (see "
    "[Ragged batching](../guide/batching.md#ragged-batching))",
    "optimization": "`graph { level: -1 }` turns ONNX Runtime's graph optimizations off; "
    "`execution_accelerators { ... }`: ONNX Runtime's `tensorrt` and `cuda` (GPU instances) and "
    "`openvino` (CPU instances) accelerators (see [Backends](../guide/backends.md))",
    "dynamic_batching": "`preferred_batch_size`, `max_queue_delay_microseconds`, "
    "`preserve_ordering`, `priority_levels`, `default_priority_level`, `default_queue_policy` and "
    "`priority_queue_policy` (`timeout_action` `REJECT` / `DELAY`, "
    "`default_timeout_microseconds`, `allow_timeout_override`, `max_queue_size`) (see "
    "[Batching](../guide/batching.md))",
    "sequence_batching": "stateful models: `max_sequence_idle_microseconds`, `control_input` "
    "(START, END, READY, CORRID), `direct` and `oldest` strategies, implicit `state` with "
    "`initial_state`, and `iterative_sequence` (see "
    "[Stateful models](../guide/batching.md#stateful-models-the-sequence-batcher))",
    "ensemble_scheduling": "`step` (`model_name`, `model_version` `-1` or a version, "
    "`input_map`, `output_map`), `max_inflight_requests` (see "
    "[Ensembles](../guide/python-and-ensembles.md#ensembles))",
    "instance_group": "`count`, `kind` (`KIND_CPU`, `KIND_GPU`, `KIND_AUTO`) and `gpus` (see "
    "[GPU](../operations/gpu.md)); `rate_limiter` `resources` and `priority` (see "
    "[Rate limiter](../guide/cache-and-rate-limiter.md#rate-limiter))",
    "default_model_filename": "default `model.onnx` (`model.pt` for PyTorch, `model.xml` for "
    "OpenVINO, `model.py` for Python models)",
    "parameters": "ONNX Runtime's `intra_op_thread_count` and `inter_op_thread_count` (default: "
    "the usable cores shared by the model's instances, at least one each, and ONNX Runtime's own "
    "count for one instance free to use every CPU, except one thread for a model whose batch of "
    "one runs within 200 us; `0` is ONNX Runtime's own choice; see "
    "[ONNX Runtime threads](../performance/onnx-threads.md)), "
    "`session.intra_op.allow_spinning` and `session.intra_op.spin_duration_us` (default: idle "
    "threads spin for 50 us, then sleep; `allow_spinning` `1` alone is ONNX Runtime's own spin, "
    "`0` none), `execution_mode` (`1`: parallel); the PyTorch and OpenVINO backends' parameters "
    "(see [Backends](../guide/backends.md)); Convoy's `convoy_adaptive_queue_delay` and "
    "`convoy_natural_batching` (see [Batching](../guide/batching.md)), `convoy_execute_timeout_s`, "
    "`convoy_initialize_timeout_s`, `convoy_in_process` and `convoy_inline_execute` (Python "
    "models); every parameter "
    "reaches a Python model's `args['model_config']`",
    "model_warmup": "`zero_data`, `random_data`, `input_data_file` under `<model>/warmup/`; runs "
    "on every instance before a version is `READY` (see "
    "[Model control](../guide/model-control.md))",
    "model_transaction_policy": "`decoupled: true` for Python models (0..N responses per request "
    "over `ModelStreamInfer`)",
    "model_metrics": "`metric_control`: the model's own buckets for Triton's latency histograms "
    "(`--metrics-config histogram_latencies=true`); bounds that are not finite and strictly "
    "ascending fail the load, an unknown family is logged and ignored (see "
    "[Metrics](../operations/metrics.md))",
    "response_cache": "`enable: true` caches the model's responses when the server has a cache "
    "(see [Response cache](../guide/cache-and-rate-limiter.md#response-cache))",
}


def _type_name(descriptor: FieldDescriptor) -> str:
    message = descriptor.message_type
    kind = message.name if message is not None else _SCALARS[descriptor.type]
    return f"repeated {kind}" if descriptor.is_repeated else kind


_SCALARS = {9: "string", 5: "int32", 3: "int64", 8: "bool", 2: "float", 1: "double", 13: "uint32"}


def config_page() -> str:
    fields = {f.name: f for f in mc.ModelConfig.DESCRIPTOR.fields}
    unknown = sorted(set(CONFIG_SUPPORT) - set(fields))
    if unknown:
        raise SystemExit(f"CONFIG_SUPPORT names fields ModelConfig does not have: {unknown}")
    rows = ["| Field | Type | In Convoy |", "| --- | --- | --- |"]
    for name, descriptor in fields.items():
        support = CONFIG_SUPPORT.get(name, "parses; no effect yet")
        rows.append(f"| `{name}` | {_type_name(descriptor)} | {_escape(support)} |")
    acted = len(CONFIG_SUPPORT)
    return f"""# config.pbtxt fields

<!-- Generated by scripts/gen_docs.py from the ModelConfig protobuf: do not edit by hand. -->

`config.pbtxt` is parsed as Triton's `ModelConfig` in protobuf text format; a typo or unknown field
is an error that names the file, line and column. Convoy acts on {acted} of its
{len(fields)} top-level fields; the others parse and have no effect yet. The table lists every
field of the `ModelConfig` message Convoy parses with (`proto/model_config.proto`), in the
message's order; it is generated by `scripts/gen_docs.py`, and a test fails when it is stale.
What auto-complete fills in, and what is refused, is on
[Model repository](../guide/model-repository.md).

{chr(10).join(rows)}
"""


PAGES: dict[Path, Callable[[], str]] = {METRICS_PAGE: metrics_page, CONFIG_PAGE: config_page}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args()
    stale = 0
    for path, render in PAGES.items():
        wanted = render()
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if wanted == current:
            continue
        if args.check:
            print(f"{path} is stale: run scripts/gen_docs.py")
            stale = 1
        else:
            path.write_text(wanted, encoding="utf-8")
    return stale


if __name__ == "__main__":
    sys.exit(main())
