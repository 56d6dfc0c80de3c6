"""Which pitfall a refused signature is, and its fix. The refusal itself, and its words, come
from the loader's `check_signature`; this only reads the config and the file to say what to
change."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata

from backends import ModelSignature, TensorSignature
from proto import model_config_pb2 as mc
from server.tools.doctor._findings import Check

# Triton backends and platforms an extra of Convoy may serve, by the extra's name.
BACKEND_EXTRAS = {
    "pytorch": "pytorch",
    "pytorch_libtorch": "pytorch",
    "torch_aoti": "pytorch",
    "openvino": "openvino",
}


# (side, the config's tensors of that side, the file's)
_Side = tuple[str, Sequence[mc.ModelInput | mc.ModelOutput], Sequence[TensorSignature]]


def backend_fix(config: mc.ModelConfig) -> str:
    """The extra that would bring a backend, where this install of Convoy declares one."""
    kind = config.backend or config.platform
    extra = BACKEND_EXTRAS.get(kind)
    if extra is not None and extra in _declared_extras():
        return f"pip install 'convoy[{extra}]'"
    return (
        f"no extra of this Convoy serves '{kind}': convert the model to ONNX (backend: "
        '"onnxruntime", model.onnx) or serve it from a Python model (backend: "python")'
    )


def _declared_extras() -> set[str]:
    try:
        return set(metadata.metadata("convoy").get_all("Provides-Extra") or [])
    except metadata.PackageNotFoundError:
        return set()


def diagnose(config: mc.ModelConfig, signature: ModelSignature) -> tuple[Check, str]:
    """The pitfall behind a signature `check_signature` refused, and how to fix it."""
    sides: tuple[_Side, ...] = (
        ("input", config.input, signature.inputs),
        ("output", config.output, signature.outputs),
    )
    for side, declared, actual in sides:
        names = sorted(t.name for t in actual)
        unknown = [t.name for t in declared if t.name not in names]
        if unknown:
            return Check.TENSOR_NAMES, (
                f"name the {side}s {unknown} as the model file does ({names}), or leave "
                f"{side} out of config.pbtxt and let auto-complete fill it"
            )
    undeclared = sorted({t.name for t in signature.inputs} - {t.name for t in config.input})
    if undeclared:
        return Check.TENSOR_NAMES, f"declare the model file's inputs {undeclared} in config.pbtxt"
    if config.max_batch_size > 0:
        by_name = {t.name: t for t in (*signature.inputs, *signature.outputs)}
        every: list[mc.ModelInput | mc.ModelOutput] = [*config.input, *config.output]
        fixed = [t.name for t in every if _fixed_first(by_name[t.name])]
        if fixed:
            return Check.BATCH_AXIS, (
                f"the file's {fixed} have no dynamic first (batch) dimension: set max_batch_size: "
                "0 and give dims as the file's full shapes, or export the model with a dynamic "
                "batch axis (torch.onnx.export(..., dynamic_axes={name: {0: 'batch'}}))"
            )
        for side, tensors, _ in sides:
            for tensor in tensors:
                if _repeats_batch(list(tensor.dims), by_name[tensor.name].shape[1:]):
                    return Check.BATCH_IN_DIMS, (
                        f"drop the batch dimension from {side} '{tensor.name}': dims: "
                        f"{list(tensor.dims[1:])} (max_batch_size > 0 adds it in front)"
                    )
    return Check.SIGNATURE, (
        "make data_type and dims match the model file, or leave them out of config.pbtxt and "
        "let auto-complete fill them"
    )


def _fixed_first(tensor: TensorSignature) -> bool:
    return not tensor.shape or tensor.shape[0] != -1


def _repeats_batch(dims: list[int], file_dims: tuple[int, ...]) -> bool:
    """dims = [batch, *the file's dims after its batch axis]."""
    rest = dims[1:]
    return len(dims) == len(file_dims) + 1 and all(
        want == have or have == -1 for want, have in zip(rest, file_dims, strict=True)
    )
