"""CUDA shared memory: the bounds shared with system shared memory, the registry and RPCs without
CUDA (UNIMPLEMENTED, as before), and, on a GPU machine, round trips through a real server whose
client opens regions with CuPy or with `tritonclient.utils.cuda_shared_memory`."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from backends import cuda_available
from proto import grpc_service_pb2 as pb
from scripts import models
from server.cuda_shm import CudaSharedMemoryRegistry
from server.errors import InvalidInputError, RegionNotFoundError, UnsupportedError
from server.grpc.codec import decode_inputs, output_locations
from server.shm import check_bounds, check_fits
from tests.e2e.e2e_support import ConvoyServer

CUDA = cuda_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a GPU, onnxruntime-gpu and CuPy")
without_cuda = pytest.mark.skipif(CUDA, reason="checks the behaviour without CUDA")
BYTES = 16 * 4  # one FP32 [1, 16] tensor


def test_bounds_are_the_same_rule_for_every_kind_of_region() -> None:
    check_bounds("r", 128, 0, 128)
    check_bounds("r", 128, 64, 64)
    check_bounds("r", 128, 128, 0)
    for offset, byte_size in ((64, 65), (129, 0), (-1, 4), (0, -1)):
        with pytest.raises(InvalidInputError, match="fall outside its 128 bytes"):
            check_bounds("r", 128, offset, byte_size)
    check_fits("r", 64, 64)
    with pytest.raises(InvalidInputError, match="needs 65 bytes, but only 64 were given"):
        check_fits("r", 65, 64)


def test_an_empty_registry_knows_no_region() -> None:
    registry = CudaSharedMemoryRegistry()
    assert "r" not in registry
    assert registry.status() == []
    registry.unregister("r")  # unknown: nothing to do, as Triton
    registry.unregister()
    with pytest.raises(RegionNotFoundError, match="Unable to find cuda shared memory region: 'r'"):
        registry.status("r")
    with pytest.raises(RegionNotFoundError):
        registry.read_device("r", 0, BYTES, np.dtype(np.float32), (1, 16))
    with pytest.raises(RegionNotFoundError):
        registry.write("r", 0, BYTES, np.zeros((1, 16), np.float32))


@without_cuda
def test_registering_without_cuda_says_what_is_missing() -> None:
    registry = CudaSharedMemoryRegistry()
    with pytest.raises(UnsupportedError, match=r"gpu extra \(onnxruntime-gpu"):
        registry.register("r", bytes(64), 0, BYTES)
    assert "r" not in registry


def _request(region: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    tensor.parameters["shared_memory_region"].string_param = region
    tensor.parameters["shared_memory_byte_size"].int64_param = BYTES
    output = request.outputs.add(name="OUTPUT0")
    output.parameters["shared_memory_region"].string_param = region
    output.parameters["shared_memory_byte_size"].int64_param = BYTES
    return request


def test_the_codec_looks_regions_up_in_the_cuda_registry() -> None:
    registry = CudaSharedMemoryRegistry()
    request = _request("nowhere")
    assert output_locations(request, None, registry) == {"OUTPUT0": ("nowhere", 0, BYTES)}
    with pytest.raises(RegionNotFoundError, match="'nowhere'"):
        decode_inputs(request, None, registry)


def _empty_server(tmp_path: Path, *flags: str) -> ConvoyServer:
    (tmp_path / "models").mkdir()
    return ConvoyServer(tmp_path / "models", tmp_path / "server.log", *flags).start()


@without_cuda
def test_without_cuda_the_rpcs_answer_unimplemented_behind_their_restriction(
    tmp_path: Path,
) -> None:
    server = _empty_server(tmp_path, "--grpc-restricted-protocol", "shared-memory:key=value")
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            with pytest.raises(InferenceServerException) as restricted:
                client.get_cuda_shared_memory_status()
            assert restricted.value.status() == "StatusCode.UNAVAILABLE"
            for call, args in (
                (client.get_cuda_shared_memory_status, ("r",)),
                (client.register_cuda_shared_memory, ("r", base64.b64encode(bytes(64)), 0, 8)),
                (client.unregister_cuda_shared_memory, ("r",)),
            ):
                with pytest.raises(InferenceServerException) as refused:
                    call(*args, headers={"key": "value"})
                assert refused.value.status() == "StatusCode.UNIMPLEMENTED", call
                assert "CUDA shared memory needs a CUDA device" in refused.value.message()
            # All regions: there are none, so listing and unregistering them succeed.
            status = client.get_cuda_shared_memory_status(headers={"key": "value"})
            assert len(status.regions) == 0
            client.unregister_cuda_shared_memory(headers={"key": "value"})
    finally:
        assert server.stop() == 0


# ---- round trips on a GPU machine: the client opens the regions in its own process ------------


@pytest.fixture
def gpu_server(tmp_path: Path) -> Iterator[ConvoyServer]:
    """`simple` on CPU and `simple_gpu` (KIND_GPU) on the GPU, in a real server process."""
    repo = tmp_path / "models"
    for name, kind in (("simple", "KIND_CPU"), ("simple_gpu", "KIND_GPU")):
        config = (
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
            f"instance_group [ {{ count: 1 kind: {kind} }} ]\n"
        )
        models.write_model(repo, name, models.simple(), config)
    server = ConvoyServer(repo, tmp_path / "server.log").start()
    yield server
    assert server.stop() == 0, server.log()


class DeviceRegion:
    """Client-side device memory from cudaMalloc (not CuPy's pool: an IPC handle maps a whole
    allocation, so a pool block's offset would be lost)."""

    def __init__(self, cupy: Any, byte_size: int) -> None:
        self.runtime = cupy.cuda.runtime
        self.byte_size = byte_size
        self.address = self.runtime.malloc(byte_size)
        self.raw_handle = bytes(self.runtime.ipcGetMemHandle(self.address))

    def put(self, array: np.ndarray, offset: int = 0) -> None:
        host = np.ascontiguousarray(array)
        kind = self.runtime.memcpyHostToDevice
        self.runtime.memcpy(self.address + offset, host.ctypes.data, host.nbytes, kind)

    def get(self, dtype: type, shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
        host = np.empty(shape, dtype)
        kind = self.runtime.memcpyDeviceToHost
        self.runtime.memcpy(host.ctypes.data, self.address + offset, host.nbytes, kind)
        return host

    def free(self) -> None:
        self.runtime.free(self.address)


def _cuda_inputs(region: str) -> list[grpcclient.InferInput]:
    first = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    first.set_shared_memory(region, BYTES)
    second = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    second.set_shared_memory(region, BYTES, offset=BYTES)
    return [first, second]


def _cuda_outputs(region: str) -> list[grpcclient.InferRequestedOutput]:
    outputs = [grpcclient.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory(region, BYTES)
    outputs[1].set_shared_memory(region, BYTES, offset=BYTES)
    return outputs


@needs_cuda
@pytest.mark.parametrize("model", ["simple", "simple_gpu"])
def test_cuda_regions_carry_inputs_and_outputs(gpu_server: ConvoyServer, model: str) -> None:
    import cupy

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, np.float32)
    inputs, outputs = DeviceRegion(cupy, 2 * BYTES), DeviceRegion(cupy, 2 * BYTES)
    inputs.put(np.concatenate([a, b]))
    with grpcclient.InferenceServerClient(gpu_server.url) as client:
        for name, region in (("in", inputs), ("out", outputs)):
            encoded = base64.b64encode(region.raw_handle)
            client.register_cuda_shared_memory(name, encoded, 0, region.byte_size)
        status = client.get_cuda_shared_memory_status(as_json=True)["regions"]
        assert {r["name"]: int(r["byte_size"]) for r in status.values()} == {
            "in": 2 * BYTES,
            "out": 2 * BYTES,
        }
        result = client.infer(model, _cuda_inputs("in"), outputs=_cuda_outputs("out"))
        assert [o.name for o in result.get_response().outputs] == ["OUTPUT0", "OUTPUT1"]
        np.testing.assert_array_equal(
            outputs.get(np.float32, (2, 16)), np.concatenate([a + b, a - b])
        )
        with pytest.raises(InferenceServerException) as beyond:
            bad = _cuda_inputs("in")
            bad[1].set_shared_memory("in", BYTES, offset=BYTES + 4)
            client.infer(model, bad)
        assert beyond.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "fall outside" in beyond.value.message()
        with pytest.raises(InferenceServerException) as twice:
            client.register_cuda_shared_memory("in", base64.b64encode(inputs.raw_handle), 0, 8)
        assert twice.value.status() == "StatusCode.ALREADY_EXISTS"
        with pytest.raises(InferenceServerException) as short:
            client.register_cuda_shared_memory("short", base64.b64encode(b"x" * 8), 0, 8)
        assert short.value.status() == "StatusCode.INVALID_ARGUMENT"
        client.unregister_cuda_shared_memory()
        assert client.get_cuda_shared_memory_status(as_json=True).get("regions", {}) == {}
        with pytest.raises(InferenceServerException) as gone:
            client.infer(model, _cuda_inputs("in"))
        assert gone.value.status() == "StatusCode.NOT_FOUND"
    inputs.free()
    outputs.free()


@needs_cuda
def test_tritonclients_cuda_shared_memory_utilities_work(gpu_server: ConvoyServer) -> None:
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except (ImportError, RuntimeError) as exc:  # needs cuda-python (tritonclient[cuda])
        pytest.skip(f"tritonclient.utils.cuda_shared_memory is unavailable: {exc}")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), np.float32)
    handles = {
        "in": cudashm.create_shared_memory_region("tc_in", 2 * BYTES, 0),
        "out": cudashm.create_shared_memory_region("tc_out", 2 * BYTES, 0),
    }
    cudashm.set_shared_memory_region(handles["in"], [a, b])
    with grpcclient.InferenceServerClient(gpu_server.url) as client:
        for name, handle in handles.items():
            raw = cudashm.get_raw_handle(handle)
            client.register_cuda_shared_memory(f"tc_{name}", raw, 0, 2 * BYTES)
        client.infer("simple_gpu", _cuda_inputs("tc_in"), outputs=_cuda_outputs("tc_out"))
        total = cudashm.get_contents_as_numpy(handles["out"], np.float32, [2, 16])
        np.testing.assert_array_equal(total, np.concatenate([a + b, a - b]))
        client.unregister_cuda_shared_memory()
    for handle in handles.values():
        cudashm.destroy_shared_memory_region(handle)
