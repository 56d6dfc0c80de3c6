"""The PyTorch (TorchScript) and OpenVINO backends end to end with tritonclient: batching on and
off, mixed request batch sizes checked against the framework's own output for the same input,
two instances, dictionary inputs and tuple outputs, an ensemble crossing three frameworks, and
every load and execution error in Triton's words.

One server per module (per front-end mode) serves a repository this module writes with torch and
openvino themselves; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, StartServer, infer_input
from tritonclient.utils import InferenceServerException

from scripts import framework_models, models
from scripts.gen_models import write_simple
from tests.extras import require_extra

torch = require_extra("torch", "pytorch")
ov = require_extra("openvino", "openvino")

BATCH_SIZES = (1, 2, 3, 5, 1, 4)  # concurrent requests the dynamic batcher merges
OV_PROPERTIES = {"NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "1"}


class DictModel(torch.nn.Module):  # type: ignore[misc]
    """forward takes one Dict[str, Tensor]; returns a tuple, read by <name>__<index>."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return inputs["A"] * 2.0, inputs["A"] + inputs["B"]


def _config(name: str, backend: str, body: str) -> str:
    return f'name: "{name}"\n{backend}\n' + textwrap.dedent(body)


SIMPLE_IO = """\
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
"""
BATCHED = """\
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 100000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


def _write(repo: Path, name: str, config: str | None, files: dict[str, bytes | Path]) -> None:
    version = repo / name / "1"
    version.mkdir(parents=True)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
    for filename, content in files.items():
        target = version / filename
        if isinstance(content, Path):
            target.write_bytes(content.read_bytes())
        else:
            target.write_bytes(content)


def _build(repo: Path, work: Path) -> None:
    simple_pt = framework_models.save_simple_torchscript(work / "simple.pt")
    mlp_pt = framework_models.save_torchscript(
        models.mlp(), [np.zeros((1, 256), np.float32)], work / "mlp.pt"
    )
    dict_pt = work / "dict.pt"
    torch.jit.script(DictModel()).save(str(dict_pt))
    onnx.save_model(models.simple(), work / "simple.onnx")
    onnx.save_model(models.mlp(), work / "mlp.onnx")
    simple_xml = framework_models.save_openvino_ir(work / "simple.onnx", work / "ov" / "simple.xml")
    mlp_xml = framework_models.save_openvino_ir(work / "mlp.onnx", work / "ov" / "mlp.xml")

    def ir(xml: Path) -> dict[str, bytes | Path]:
        return {"model.xml": xml, "model.bin": xml.with_suffix(".bin")}

    pt, ovb = 'platform: "pytorch_libtorch"', 'backend: "openvino"'
    _write(
        repo, "pt_simple", _config("pt_simple", pt, SIMPLE_IO + BATCHED), {"model.pt": simple_pt}
    )
    _write(
        repo,
        "pt_simple_nobatch",
        _config("pt_simple_nobatch", 'backend: "pytorch"', "max_batch_size: 0\n" + SIMPLE_IO),
        {"model.pt": simple_pt},
    )
    _write(
        repo,
        "pt_mlp",
        _config(
            "pt_mlp",
            pt,
            """\
            max_batch_size: 16
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 256 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
            dynamic_batching { max_queue_delay_microseconds: 50000 }
            instance_group [ { count: 2 kind: KIND_CPU } ]
            parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }
            parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
            model_warmup [ { name: "b4" batch_size: 4 count: 2 inputs {
              key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 256 ] random_data: true }
            } } ]
            """,
        ),
        {"model.pt": mlp_pt},
    )
    _write(
        repo,
        "pt_dict",
        _config(
            "pt_dict",
            pt,
            """\
            max_batch_size: 4
            input [
              { name: "A" data_type: TYPE_FP32 dims: [ 3 ] },
              { name: "B" data_type: TYPE_FP32 dims: [ 3 ] }
            ]
            output [
              { name: "SUM__1" data_type: TYPE_FP32 dims: [ 3 ] },
              { name: "DOUBLE__0" data_type: TYPE_FP32 dims: [ 3 ] }
            ]
            """,
        ),
        {"model.pt": dict_pt},
    )
    # The backend comes from the file, as in Triton: no backend or platform in this config.
    _write(repo, "pt_detected", _config("pt_detected", "", SIMPLE_IO), {"model.pt": simple_pt})
    _write(repo, "simple_onnx", None, {"model.onnx": work / "simple.onnx"})
    ov_params = "".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
        for key, value in OV_PROPERTIES.items()
    )
    _write(
        repo,
        "ov_simple",
        _config("ov_simple", ovb, SIMPLE_IO + BATCHED + ov_params),
        ir(simple_xml),
    )
    _write(
        repo,
        "ov_mlp",
        _config(
            "ov_mlp",
            ovb,
            "max_batch_size: 16\ndynamic_batching { max_queue_delay_microseconds: 50000 }\n"
            'parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } }\n'
            + ov_params,
        ),
        ir(mlp_xml),
    )
    _write(
        repo,
        "ov_reshaped",
        _config(
            "ov_reshaped",
            ovb,
            """\
            max_batch_size: 0
            input [
              { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 16 ] },
              { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2, 16 ] }
            ]
            output [
              { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 16 ] },
              { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2, 16 ] }
            ]
            parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "yes" } }
            """,
        ),
        ir(simple_xml),
    )
    _write(
        repo,
        "ov_onnx",
        _config("ov_onnx", ovb, 'default_model_filename: "model.onnx"\n'),
        {"model.onnx": work / "simple.onnx"},
    )
    _write(
        repo,
        "ov_padded",
        _config(
            "ov_padded",
            ovb,
            """\
            max_batch_size: 4
            parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }
            parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }
            """,
        ),
        ir(simple_xml),
    )
    _write(
        repo,
        "ov_unpadded",
        _config(
            "ov_unpadded",
            ovb,
            """\
            max_batch_size: 4
            parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }
            """,
        ),
        ir(simple_xml),
    )
    _write(repo, "cross_ensemble", _ensemble(), {})
    write_simple(repo)  # the example repository's ONNX `simple`, which simple_frameworks uses
    framework_models.write_examples(repo)
    package = repo / "simple_aoti" / "1" / "model.pt2"
    if package.exists():  # compiled where a C++ compiler is found
        config = (repo / "simple_aoti" / "config.pbtxt").read_text(encoding="utf-8")
        batched = config.replace("max_batch_size: 1", "max_batch_size: 4")  # beyond the beta
        batched = batched.replace("simple_aoti", "aoti_batched")
        _write(repo, "aoti_batched", batched, {"model.pt2": package.read_bytes()})
        # The package's dict input and output go by key, whatever order the config lists.
        reordered = _config(
            "aoti_reordered",
            'platform: "torch_aoti"',
            """\
            max_batch_size: 1
            input [
              { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] },
              { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }
            ]
            output [
              { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] },
              { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }
            ]
            """,
        )
        _write(repo, "aoti_reordered", reordered, {"model.pt2": package.read_bytes()})
    # TensorRT asked for on a CPU instance: ignored there (as in Triton), and the completed
    # config reports the providers the session really runs with.
    _write(
        repo,
        "ort_tensorrt_on_cpu",
        _config(
            "ort_tensorrt_on_cpu",
            'backend: "onnxruntime"',
            """\
            instance_group [ { count: 1 kind: KIND_CPU } ]
            optimization { execution_accelerators { gpu_execution_accelerator [
              { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }
            ] } }
            """,
        ),
        {"model.onnx": work / "simple.onnx"},
    )
    _write_broken(repo, simple_pt, simple_xml)


def _ensemble() -> str:
    """INPUT0, INPUT1 -> TorchScript (sum, difference) -> ONNX (the same) -> OpenVINO (the same):
    OUTPUT0 = 2 (a + b), OUTPUT1 = 2 (a - b)."""
    steps = []
    feeds = ("INPUT0", "INPUT1")
    for index, model in enumerate(("pt_simple", "simple_onnx", "ov_simple")):
        last = index == 2
        outs = ("OUTPUT0", "OUTPUT1") if last else (f"s{index}", f"d{index}")
        steps.append(
            f'{{ model_name: "{model}" model_version: -1 '
            f'input_map {{ key: "INPUT0" value: "{feeds[0]}" }} '
            f'input_map {{ key: "INPUT1" value: "{feeds[1]}" }} '
            f'output_map {{ key: "OUTPUT0" value: "{outs[0]}" }} '
            f'output_map {{ key: "OUTPUT1" value: "{outs[1]}" }} }}'
        )
        feeds = outs
    return (
        'name: "cross_ensemble"\nplatform: "ensemble"\nmax_batch_size: 4\n'
        + SIMPLE_IO
        + "ensemble_scheduling { step [ "
        + ", ".join(steps)
        + " ] }\n"
    )


BROKEN_LOADS: dict[str, str] = {
    "pt_not_torchscript": "is not a TorchScript file",
    "pt_garbage": "is not a TorchScript file",
    "pt_input_count": "unable to load model 'pt_input_count', configuration expects 3 inputs, "
    "model provides 2",
    "pt_no_inputs": "model configuration must contain at least one input, none were specified",
    "pt_uint32": "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model 'pt_uint32'",
    "pt_gpu": "has kind KIND_GPU, but torch sees no CUDA device",
    "pt_bad_flag": "parameter 'INFERENCE_MODE' must be 0, 1, false or true, got 'maybe'",
    "ov_garbage": "OpenVINO cannot read",
    "ov_gpu": "Triton openVINO backend supports only CPU device",
    "ov_bad_streams": "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, "
    "got many",
    "ov_bad_hint": "expected the parameter 'PERFORMANCE_HINT' to be "
    "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got FAST",
    "ov_wrong_dims": "has dims [8] in the config, but the model file expects [16]",
    "ort_openvino_ep": "needs OpenVINOExecutionProvider, which this ONNX Runtime does not have",
    "ort_unknown_accelerator": "unknown Execution Accelerator 'tpu' is requested",
}


def _write_broken(repo: Path, simple_pt: Path, simple_xml: Path) -> None:
    pt = 'platform: "pytorch_libtorch"'
    state = repo.parent / "state.pt"
    torch.save({"weight": torch.zeros(2)}, state)  # a pickled state dict, not TorchScript
    _write(
        repo,
        "pt_not_torchscript",
        _config("pt_not_torchscript", pt, SIMPLE_IO),
        {"model.pt": state},
    )
    _write(
        repo, "pt_garbage", _config("pt_garbage", pt, SIMPLE_IO), {"model.pt": b"\x00garbage" * 9}
    )
    three = SIMPLE_IO.replace(
        '  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }\n',
        '  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '  { name: "INPUT2" data_type: TYPE_FP32 dims: [ 16 ] }\n',
    )
    _write(repo, "pt_input_count", _config("pt_input_count", pt, three), {"model.pt": simple_pt})
    _write(
        repo,
        "pt_no_inputs",
        _config("pt_no_inputs", pt, "max_batch_size: 8\n"),
        {"model.pt": simple_pt},
    )
    _write(
        repo,
        "pt_uint32",
        _config("pt_uint32", pt, SIMPLE_IO.replace("TYPE_FP32", "TYPE_UINT32")),
        {"model.pt": simple_pt},
    )
    _write(
        repo,
        "pt_gpu",
        _config("pt_gpu", pt, SIMPLE_IO + "instance_group [ { kind: KIND_GPU } ]\n"),
        {"model.pt": simple_pt},
    )
    _write(
        repo,
        "pt_bad_flag",
        _config(
            "pt_bad_flag",
            pt,
            SIMPLE_IO + 'parameters { key: "INFERENCE_MODE" value: { string_value: "maybe" } }\n',
        ),
        {"model.pt": simple_pt},
    )
    # Execution errors: the file loads, each batch fails with Triton's words.
    _write(
        repo,
        "pt_bad_index",
        _config(
            "pt_bad_index",
            pt,
            SIMPLE_IO.replace('"OUTPUT0"', '"OUTPUT__0"').replace('"OUTPUT1"', '"OUTPUT__3"'),
        ),
        {"model.pt": simple_pt},
    )
    bad_type = SIMPLE_IO.replace(
        '{ name: "OUTPUT1" data_type: TYPE_FP32', '{ name: "OUTPUT1" data_type: TYPE_INT32'
    )
    _write(repo, "pt_bad_dtype", _config("pt_bad_dtype", pt, bad_type), {"model.pt": simple_pt})
    ovb = 'backend: "openvino"'
    ir = {"model.xml": simple_xml, "model.bin": simple_xml.with_suffix(".bin")}
    _write(repo, "ov_garbage", _config("ov_garbage", ovb, SIMPLE_IO), {"model.xml": b"<not xml"})
    _write(repo, "ov_gpu", _config("ov_gpu", ovb, "instance_group [ { kind: KIND_GPU } ]\n"), ir)
    for name, key, value in (
        ("ov_bad_streams", "NUM_STREAMS", "many"),
        ("ov_bad_hint", "PERFORMANCE_HINT", "FAST"),
    ):
        param = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
        _write(repo, name, _config(name, ovb, param), ir)
    ort = 'backend: "onnxruntime"'
    simple_onnx = {"model.onnx": repo.parent / "work" / "simple.onnx"}
    for name, kind, accelerator in (
        ("ort_openvino_ep", "cpu", "openvino"),
        ("ort_unknown_accelerator", "gpu", "tpu"),
    ):
        asked = (
            f"optimization {{ execution_accelerators {{ {kind}_execution_accelerator [ "
            f'{{ name: "{accelerator}" }} ] }} }}\n'
        )
        _write(repo, name, _config(name, ort, asked), simple_onnx)
    wrong = SIMPLE_IO.replace("dims: [ 16 ]", "dims: [ 8 ]")
    _write(repo, "ov_wrong_dims", _config("ov_wrong_dims", ovb, "max_batch_size: 8\n" + wrong), ir)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("backends")
    repo = root / "models"
    repo.mkdir()
    _build(repo, root / "work")
    return repo


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    flags = ["--strict-readiness", "false"]
    convoy = ConvoyServer(repository, tmp_path_factory.mktemp("log") / "server.log", *flags)
    convoy.start(timeout_s=120)
    try:
        yield convoy
        assert convoy.stop() == 0, convoy.log()
    finally:
        convoy.kill()


@pytest.fixture(scope="module")
def triton(server: ConvoyServer) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        yield client


def _infer(
    client: grpcclient.InferenceServerClient, model: str, arrays: dict[str, np.ndarray]
) -> grpcclient.InferResult:
    inputs = [infer_input(name, array, "FP32") for name, array in arrays.items()]
    return client.infer(model, inputs)


def _pair(batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, 16) if batch else (16,)
    return {n: rng.standard_normal(shape, dtype=np.float32) for n in ("INPUT0", "INPUT1")}


def _concurrently(call: Any, count: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(call, range(count)))


def _executions(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(model).model_stats[0]
    return stats.inference_count, stats.execution_count


@pytest.mark.parametrize("model", ["pt_simple", "ov_simple"])
def test_mixed_batches_match_the_framework(
    triton: grpcclient.InferenceServerClient, repository: Path, model: str
) -> None:
    before = _executions(triton, model)

    def call(index: int) -> tuple[dict[str, np.ndarray], grpcclient.InferResult]:
        arrays = _pair(BATCH_SIZES[index], seed=index)
        return arrays, _infer(triton, model, arrays)

    own = _framework(model, repository)
    for arrays, result in _concurrently(call, len(BATCH_SIZES)):
        expected = own(arrays)
        for name in ("OUTPUT0", "OUTPUT1"):
            np.testing.assert_array_equal(result.as_numpy(name), expected[name])
    inferences, executions = (
        a - b for a, b in zip(_executions(triton, model), before, strict=True)
    )
    assert inferences == sum(BATCH_SIZES)
    assert executions < len(BATCH_SIZES)  # the dynamic batcher merged some requests


def test_named_index_model_matches_torch(
    triton: grpcclient.InferenceServerClient, repository: Path
) -> None:
    module = torch.jit.load(str(repository / "pt_mlp" / "1" / "model.pt"))

    def call(index: int) -> None:
        x = np.random.default_rng(index).standard_normal((BATCH_SIZES[index], 256), np.float32)
        got = triton.infer("pt_mlp", [infer_input("INPUT__0", x, "FP32")]).as_numpy("OUTPUT__0")
        with torch.no_grad():
            np.testing.assert_allclose(
                got, module(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5
            )

    _concurrently(call, len(BATCH_SIZES))


def test_openvino_mlp_autocompleted_matches_openvino(
    triton: grpcclient.InferenceServerClient, repository: Path
) -> None:
    config = triton.get_model_config("ov_mlp").config
    assert [t.name for t in config.input] == ["INPUT"] and list(config.input[0].dims) == [256]
    compiled = ov.Core().compile_model(
        str(repository / "ov_mlp" / "1" / "model.xml"),
        "CPU",
        {**OV_PROPERTIES, "INFERENCE_PRECISION_HINT": "f32"},
    )

    def call(index: int) -> None:
        x = np.random.default_rng(index).standard_normal((BATCH_SIZES[index], 256), np.float32)
        got = triton.infer("ov_mlp", [infer_input("INPUT", x, "FP32")]).as_numpy("OUTPUT")
        expected = compiled.create_infer_request().infer(x)[0]  # one request per thread
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    _concurrently(call, len(BATCH_SIZES))


@pytest.mark.parametrize("model", ["pt_simple_nobatch", "pt_detected", "ov_reshaped"])
def test_batching_off(triton: grpcclient.InferenceServerClient, model: str) -> None:
    config = triton.get_model_config(model).config
    assert config.max_batch_size == 0
    arrays = _pair(0, seed=7)
    if model == "ov_reshaped":
        arrays = {name: np.stack([array, array + 1]) for name, array in arrays.items()}
    result = _infer(triton, model, arrays)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])


def test_completed_configs_report_backends_and_instances(
    triton: grpcclient.InferenceServerClient,
) -> None:
    pt = triton.get_model_config("pt_simple").config
    assert (pt.backend, pt.platform, pt.default_model_filename) == (
        "pytorch",
        "pytorch_libtorch",
        "model.pt",
    )
    assert [(g.kind, g.count) for g in pt.instance_group] == [(pt.instance_group[0].KIND_CPU, 2)]
    detected = triton.get_model_config("pt_detected").config
    assert (detected.backend, detected.platform) == ("pytorch", "pytorch_libtorch")
    ovc = triton.get_model_config("ov_simple").config
    assert (ovc.backend, ovc.default_model_filename) == ("openvino", "model.xml")
    assert ovc.instance_group[0].count == 2
    onnx_read = triton.get_model_config("ov_onnx").config  # auto-completed from the ONNX file
    assert onnx_read.max_batch_size == 4 and [t.name for t in onnx_read.output] == [
        "OUTPUT0",
        "OUTPUT1",
    ]


def test_example_ensemble_crosses_frameworks(triton: grpcclient.InferenceServerClient) -> None:
    """scripts/gen_models.py's simple_torchscript -> simple -> simple_openvino, one call."""
    arrays = _pair(2, seed=5)
    result = _infer(triton, "simple_frameworks", arrays)
    a, b = arrays["INPUT0"], arrays["INPUT1"]
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * (a + b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), 2 * (a - b), rtol=1e-5, atol=1e-5)
    for model in ("simple_torchscript", "simple_openvino"):
        direct = _infer(triton, model, arrays)
        np.testing.assert_allclose(direct.as_numpy("OUTPUT0"), a + b, rtol=1e-6)


def test_accelerated_config_reports_its_providers(
    triton: grpcclient.InferenceServerClient,
) -> None:
    config = triton.get_model_config("ort_tensorrt_on_cpu").config
    providers = config.parameters["convoy_execution_providers"].string_value
    assert providers == "CPUExecutionProvider"  # a CPU instance: TensorRT applies to GPUs only
    arrays = _pair(2, seed=2)
    result = _infer(triton, "ort_tensorrt_on_cpu", arrays)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])
    plain = triton.get_model_config("simple_onnx").config
    assert "convoy_execution_providers" not in plain.parameters


def test_dict_input_and_tuple_output_by_index(triton: grpcclient.InferenceServerClient) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    result = triton.infer("pt_dict", [infer_input("A", a, "FP32"), infer_input("B", b, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("DOUBLE__0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("SUM__1"), a + b)


def test_openvino_reads_onnx(triton: grpcclient.InferenceServerClient) -> None:
    arrays = _pair(3, seed=3)
    result = _infer(triton, "ov_onnx", arrays)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])


def test_fixed_batch_is_padded_or_refused(triton: grpcclient.InferenceServerClient) -> None:
    arrays = _pair(3, seed=4)
    padded = _infer(triton, "ov_padded", arrays)
    assert padded.as_numpy("OUTPUT0").shape == (3, 16)
    np.testing.assert_allclose(padded.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])
    with pytest.raises(InferenceServerException) as refused:
        _infer(triton, "ov_unpadded", arrays)
    assert "expected requests with batch size '4', got '3'" in refused.value.message()
    assert "ENABLE_BATCH_PADDING" in refused.value.message()


def test_ensemble_crosses_three_frameworks(triton: grpcclient.InferenceServerClient) -> None:
    for batch in (1, 3):
        arrays = _pair(batch, seed=batch)
        result = _infer(triton, "cross_ensemble", arrays)
        a, b = arrays["INPUT0"], arrays["INPUT1"]
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * (a + b), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), 2 * (a - b), rtol=1e-5, atol=1e-5)


def test_example_aoti_package_answers_as_eager_pytorch(
    triton: grpcclient.InferenceServerClient, repository: Path
) -> None:
    """scripts/gen_models.py's simple_aoti (`platform: "torch_aoti"`, AOTInductor-compiled
    here, a dict in and out): the same answers as the eager module, also with the config's
    tensors in another order; batch size 1 only, as Triton's beta."""
    if not (repository / "simple_aoti").exists():
        pytest.skip("no C++ compiler: AOTInductor could not compile simple_aoti")
    config = triton.get_model_config("simple_aoti").config
    assert (config.platform, config.backend) == ("torch_aoti", "pytorch")
    for seed, model in ((3, "simple_aoti"), (4, "aoti_reordered")):
        arrays = _pair(1, seed=seed)
        result = _infer(triton, model, arrays)
        total, difference = framework_models.simple_eager(arrays["INPUT0"], arrays["INPUT1"])
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), total, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), difference, rtol=1e-6)
    with pytest.raises(InferenceServerException) as refused:
        _infer(triton, "simple_aoti", _pair(2, seed=5))
    assert "inference request batch-size must be <= 1" in refused.value.message()
    entry = {m.name: m for m in triton.get_model_repository_index().models}["aoti_batched"]
    assert entry.state == "UNAVAILABLE"
    assert "max_batch_size must be 0 or 1, not 4" in entry.reason


@pytest.mark.parametrize(("model", "reason"), sorted(BROKEN_LOADS.items()))
def test_load_errors(triton: grpcclient.InferenceServerClient, model: str, reason: str) -> None:
    entries = {m.name: m for m in triton.get_model_repository_index().models}
    assert entries[model].state == "UNAVAILABLE"
    assert reason in entries[model].reason
    assert not triton.is_model_ready(model)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "pt_bad_index",
            "The output OUTPUT__3 in the model configuration refers to an output index which "
            "doesn't exist. This model has 2 outputs",
        ),
        (
            "pt_bad_dtype",
            "configuration expects datatype TYPE_INT32 for output 'OUTPUT1', model provides "
            "TYPE_FP32",
        ),
    ],
)
def test_execution_errors_fail_only_their_requests(
    triton: grpcclient.InferenceServerClient, model: str, message: str
) -> None:
    with pytest.raises(InferenceServerException) as failed:
        _infer(triton, model, _pair(0, seed=1))
    assert failed.value.status() == "StatusCode.INTERNAL"
    assert message in failed.value.message()
    assert _infer(triton, "pt_simple", _pair(1, seed=1)).as_numpy("OUTPUT0").shape == (1, 16)


@pytest.mark.parametrize(
    ("module", "config", "filename", "extra"),
    [
        ("torch", 'backend: "pytorch"\n' + SIMPLE_IO, "model.pt", "pytorch"),
        ("openvino", 'backend: "openvino"\n', "model.xml", "openvino"),
    ],
)
def test_a_missing_framework_names_its_extra(
    start_server: StartServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    config: str,
    filename: str,
    extra: str,
) -> None:
    """A server whose Python cannot import the framework (a package of that name that fails to
    import first on its path, as where the extra is not installed) says how to install it."""
    shadow = tmp_path / "shadow"
    (shadow / module).mkdir(parents=True)
    failing = f"raise ImportError(\"No module named '{module}'\")\n"
    (shadow / module / "__init__.py").write_text(failing)
    repo = tmp_path / "models"
    repo.mkdir()
    _write(repo, "m", f'name: "m"\n{config}', {filename: b"x"})
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    server = start_server(repo, "--strict-readiness", "false")
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        entry = client.get_model_repository_index().models[0]
    assert entry.state == "UNAVAILABLE"
    assert f"pip install 'convoy[{extra}]'" in entry.reason


def _framework(model: str, repository: Path) -> Any:
    """The framework's own answer for `model`'s file, run in this process."""
    if model.startswith("pt_"):
        module = torch.jit.load(str(repository / model / "1" / "model.pt"))

        def run_torch(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            with torch.no_grad():
                out = module(*(torch.from_numpy(arrays[n]) for n in ("INPUT0", "INPUT1")))
            return {"OUTPUT0": out[0].numpy(), "OUTPUT1": out[1].numpy()}

        return run_torch
    compiled = ov.Core().compile_model(
        str(repository / model / "1" / "model.xml"), "CPU", OV_PROPERTIES
    )

    def run_openvino(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = compiled.create_infer_request().infer(arrays)
        return {"OUTPUT0": out["OUTPUT0"], "OUTPUT1": out["OUTPUT1"]}

    return run_openvino
