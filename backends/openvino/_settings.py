"""`OpenVinoSettings`: how a model is compiled and batched, under the parameter names of Triton's
OpenVINO backend (`NUM_STREAMS`, `PERFORMANCE_HINT`, `INFERENCE_NUM_THREADS`, `RESHAPE_IO_LAYERS`
and the rest), and the share of the cores an instance takes when the config names no count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from backends.config import instance_count, is_digits, string_parameters
from backends.device import usable_cores
from backends.errors import ModelLoadError
from proto import model_config_pb2 as mc

_HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
_HINTS["cumulative_throughput"] = "CUMULATIVE_THROUGHPUT"
_STREAMS = {"auto": "AUTO", "numa": "NUMA"}
_PRECISIONS = ("f32", "bf16", "f16")


@dataclass(frozen=True, slots=True)
class OpenVinoSettings:
    """OpenVINO properties for `compile_model` and the backend's batching switches.

    Without `INFERENCE_NUM_THREADS`, a model's instances share the cores: each compiled model
    takes max(1, cores // instances) threads (the ONNX Runtime backend's rule), since every
    instance compiles its own copy and runs one request at a time on its worker thread.
    OpenVINO pins a compiled model's threads to the first cores, so every compiled model taking
    fewer threads than the cores would pin to the same ones (two one-thread instances on two
    cores ran as fast as one); such instances leave their threads unpinned unless
    `ENABLE_CPU_PINNING` says otherwise.
    """

    properties: Mapping[str, str] = field(default_factory=dict)  # OpenVINO key -> value
    cpu_extension_path: str = ""  # `CPU_EXTENSION_PATH`: a library of custom CPU kernels
    reshape_io_layers: bool = False  # `RESHAPE_IO_LAYERS`: inputs take the config's dims
    skip_dynamic_batch: bool = False  # `SKIP_OV_DYNAMIC_BATCHSIZE`: batch fixed at the maximum
    batch_padding: bool = False  # `ENABLE_BATCH_PADDING`: pad a smaller batch to the fixed one

    @classmethod
    def from_config(cls, config: mc.ModelConfig, cores: int | None = None) -> OpenVinoSettings:
        """The settings of `config`'s instances; `cores` defaults to `usable_cores()`."""
        model, params = config.name, string_parameters(config)
        instances = instance_count(config, 1)
        usable = usable_cores() if cores is None else cores
        properties = {"INFERENCE_NUM_THREADS": str(max(1, usable // instances))}
        for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            raw = params.get(key, "").strip()
            if raw:
                properties[key] = _count(model, key, raw)
        # Convoy's own, passed to OpenVINO: YES or NO.
        raw = params.get("ENABLE_CPU_PINNING", "").strip()
        if raw:
            if raw.lower() not in ("yes", "no"):
                raise _bad(model, "ENABLE_CPU_PINNING", "YES or NO", raw)
            properties["ENABLE_CPU_PINNING"] = raw.upper()
        elif 0 < int(properties["INFERENCE_NUM_THREADS"]) < usable:
            properties["ENABLE_CPU_PINNING"] = "NO"
        raw = params.get("NUM_STREAMS", "").strip()
        if raw:
            properties["NUM_STREAMS"] = _STREAMS.get(raw.lower()) or _streams(model, raw)
        raw = params.get("PERFORMANCE_HINT", "").strip()
        if raw:
            if raw.lower() not in _HINTS:
                raise _bad(
                    model, "PERFORMANCE_HINT", "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT", raw
                )
            properties["PERFORMANCE_HINT"] = _HINTS[raw.lower()]
        raw = params.get("HINT_BF16", "").strip()
        if raw:
            if raw.lower() != "yes":
                raise _bad(model, "HINT_BF16", "YES", raw)
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        # Convoy's own, passed to OpenVINO as is: its CPU plugin computes in bf16 where the CPU
        # has bf16 units unless told f32, which changes FP32 models' results.
        raw = params.get("INFERENCE_PRECISION_HINT", "").strip()
        if raw:
            if raw.lower() not in _PRECISIONS:
                raise _bad(model, "INFERENCE_PRECISION_HINT", "f32, bf16 or f16", raw)
            properties["INFERENCE_PRECISION_HINT"] = raw.lower()
        return cls(
            properties=properties,
            cpu_extension_path=params.get("CPU_EXTENSION_PATH", "").strip(),
            reshape_io_layers=_yes(params, "RESHAPE_IO_LAYERS"),
            skip_dynamic_batch=_yes(params, "SKIP_OV_DYNAMIC_BATCHSIZE"),
            batch_padding=_yes(params, "ENABLE_BATCH_PADDING"),
        )


def _yes(params: Mapping[str, str], key: str) -> bool:
    # Triton's OpenVINO backend: "yes" in any case turns a switch on; anything else leaves it off.
    return params.get(key, "").strip().lower() == "yes"


def _count(model: str, key: str, raw: str) -> str:
    if not is_digits(raw):
        raise _bad(model, key, "a non-negative number", raw)
    return str(int(raw))


def _streams(model: str, raw: str) -> str:
    if not is_digits(raw):
        raise _bad(model, "NUM_STREAMS", "either AUTO/NUMA/<int_value>", raw)
    return str(int(raw))


def _bad(model: str, key: str, expected: str, raw: str) -> ModelLoadError:
    return ModelLoadError(
        f"model '{model}': expected the parameter '{key}' to be {expected}, got {raw}"
    )
