"""CUDA shared memory: the bounds shared with system shared memory, the registry, the regions of
both kinds behind one `SharedMemory` (which resolves the locations the codecs decode), the RPCs
without CUDA (UNIMPLEMENTED, as before), and, on a GPU machine, round trips over gRPC and HTTP
through a real server whose client opens regions with CuPy or with
`tritonclient.utils.cuda_shared_memory`."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from backends import cuda_available
from proto import grpc_service_pb2 as pb
from scripts import models
from server.contract.datatypes import BY_WIRE
from server.contract.errors import InvalidInputError, RegionNotFoundError, UnsupportedError
from server.core.shared_memory.cuda import CudaSharedMemoryRegistry
from server.core.shared_memory.regions import SharedMemory
from server.core.shared_memory.system import SharedMemoryRegistry, check_bounds, check_fits
from server.frontend.grpc import codec as grpc_codec
from server.frontend.http import codec as http_codec
from tests.e2e.e2e_support import ConvoyServer, shm_inputs, shm_outputs

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


def _http_body(region: str) -> dict[str, Any]:
    parameters = {"shared_memory_region": region, "shared_memory_byte_size": BYTES}
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": parameters}
    return {"inputs": [tensor], "outputs": [{"name": "OUTPUT0", "parameters": parameters}]}


def test_both_codecs_carry_locations_that_the_regions_of_both_kinds_resolve() -> None:
    location = ("nowhere", 0, BYTES)
    request, body = _request("nowhere"), _http_body("nowhere")
    assert grpc_codec.decode_outputs(request)[1] == {"OUTPUT0": location}
    assert http_codec.output_locations(body) == {"OUTPUT0": location}
    for (tensor,) in (grpc_codec.decode_inputs(request), http_codec.decode_inputs(body, b"", "m")):
        assert (tensor.name, tensor.location, tensor.array) == ("INPUT0", location, None)
    shared = SharedMemory(SharedMemoryRegistry(), CudaSharedMemoryRegistry())
    unknown = "Unable to find shared memory region: 'nowhere'"  # Triton's words, either kind
    with pytest.raises(RegionNotFoundError, match=unknown):
        shared.read("INPUT0", BY_WIRE["FP32"], (1, 16), location)
    with pytest.raises(RegionNotFoundError, match=unknown):
        shared.write(location, BY_WIRE["FP32"], np.zeros((1, 16), np.float32))


def test_without_system_shared_memory_a_region_not_in_cuda_is_refused() -> None:
    shared = SharedMemory(None, CudaSharedMemoryRegistry())
    with pytest.raises(UnsupportedError, match="system shared memory is not enabled"):
        shared.read("INPUT0", BY_WIRE["FP32"], (1, 16), ("r", 0, BYTES))
    with pytest.raises(UnsupportedError, match="system shared memory is not enabled"):
        shared.system.status()


def test_cuda_regions_are_listed_and_refused_by_one_rule() -> None:
    without = SharedMemory(SharedMemoryRegistry())  # no usable GPU
    assert not without.serves_cuda
    assert without.cuda_status() == []  # listing and unregistering all: there are none
    without.cuda_unregister()
    for refused in (without.cuda_status, without.cuda_unregister):
        with pytest.raises(UnsupportedError, match="CUDA shared memory needs a CUDA device"):
            refused("r")
    with pytest.raises(UnsupportedError, match="CUDA shared memory needs a CUDA device"):
        without.cuda.register("r", bytes(64), 0, BYTES)
    served = SharedMemory(SharedMemoryRegistry(), CudaSharedMemoryRegistry())
    assert served.serves_cuda and served.cuda_status() == []
    served.cuda_unregister("r")  # unknown: nothing to do, as Triton
    with pytest.raises(RegionNotFoundError, match="Unable to find cuda shared memory region"):
        served.cuda_status("r")


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


@dataclass(frozen=True)
class Protocol:
    """What differs between tritonclient's gRPC and HTTP clients in the round trips below."""

    client: Any  # the tritonclient.grpc or tritonclient.http module
    invalid: str  # the status() of an invalid argument
    exists: str  # of a region registered twice
    not_found: str  # of a region no registry knows

    def connect(self, server: ConvoyServer) -> Any:
        if self.client is grpcclient:
            return grpcclient.InferenceServerClient(server.url)
        return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")

    def regions(self, client: Any) -> dict[str, int]:
        """The registered CUDA regions' byte sizes, by name."""
        if self.client is grpcclient:
            listed = client.get_cuda_shared_memory_status(as_json=True).get("regions", {})
            return {r["name"]: int(r["byte_size"]) for r in listed.values()}
        return {r["name"]: int(r["byte_size"]) for r in client.get_cuda_shared_memory_status()}

    def outputs(self, result: Any) -> list[dict[str, Any]]:
        """The response's outputs as JSON (gRPC's int64 shapes as strings)."""
        if self.client is grpcclient:
            return list(result.get_response(as_json=True)["outputs"])
        return list(result.get_response()["outputs"])


GRPC = Protocol(
    grpcclient, "StatusCode.INVALID_ARGUMENT", "StatusCode.ALREADY_EXISTS", "StatusCode.NOT_FOUND"
)
# Triton's HTTP front end answers every shared memory fault, an unknown region too, with 400.
HTTP = Protocol(httpclient, "400", "400", "400")


def _b64(raw_handle: bytes) -> str:
    # A str: tritonclient.http puts it in a JSON body as it is; tritonclient.grpc decodes either.
    return base64.b64encode(raw_handle).decode("ascii")


@needs_cuda
@pytest.mark.parametrize("model", ["simple", "simple_gpu"])
@pytest.mark.parametrize("protocol", [GRPC, HTTP], ids=["grpc", "http"])
def test_cuda_regions_carry_inputs_and_outputs(
    gpu_server: ConvoyServer, model: str, protocol: Protocol
) -> None:
    import cupy

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, np.float32)
    inputs, outputs = DeviceRegion(cupy, 2 * BYTES), DeviceRegion(cupy, 2 * BYTES)
    inputs.put(np.concatenate([a, b]))
    other = HTTP if protocol is GRPC else GRPC  # one registry: what one registers, both see
    with (
        contextlib.closing(protocol.connect(gpu_server)) as client,
        contextlib.closing(other.connect(gpu_server)) as observer,
    ):
        for name, region in (("in", inputs), ("out", outputs)):
            client.register_cuda_shared_memory(name, _b64(region.raw_handle), 0, region.byte_size)
        expected = {"in": 2 * BYTES, "out": 2 * BYTES}
        assert protocol.regions(client) == expected
        assert other.regions(observer) == expected
        requested = shm_outputs(protocol.client, "out")
        result = client.infer(model, shm_inputs(protocol.client, "in"), outputs=requested)
        # As Triton's: an output written to a region answers only its name, type and shape.
        answered = protocol.outputs(result)
        assert [o["name"] for o in answered] == ["OUTPUT0", "OUTPUT1"]
        for output in answered:
            assert set(output) == {"name", "datatype", "shape"}, output
            assert (output["datatype"], [int(d) for d in output["shape"]]) == ("FP32", [1, 16])
        np.testing.assert_array_equal(
            outputs.get(np.float32, (2, 16)), np.concatenate([a + b, a - b])
        )
        with pytest.raises(InferenceServerException) as beyond:
            client.infer(model, shm_inputs(protocol.client, "in", BYTES + 4))
        assert beyond.value.status() == protocol.invalid
        assert "fall outside" in beyond.value.message()
        with pytest.raises(InferenceServerException) as twice:
            client.register_cuda_shared_memory("in", _b64(inputs.raw_handle), 0, 8)
        assert twice.value.status() == protocol.exists
        assert "already in manager" in twice.value.message()
        with pytest.raises(InferenceServerException) as short:
            client.register_cuda_shared_memory("short", _b64(b"x" * 8), 0, 8)
        assert short.value.status() == protocol.invalid
        assert "cudaIpcMemHandle_t has 64" in short.value.message()
        client.unregister_cuda_shared_memory()
        assert protocol.regions(client) == {}
        assert other.regions(observer) == {}
        with pytest.raises(InferenceServerException) as gone:
            client.infer(model, shm_inputs(protocol.client, "in"))
        assert gone.value.status() == protocol.not_found
        assert "Unable to find shared memory region: 'in'" in gone.value.message()
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
        inputs, outputs = shm_inputs(grpcclient, "tc_in"), shm_outputs(grpcclient, "tc_out")
        client.infer("simple_gpu", inputs, outputs=outputs)
        total = cudashm.get_contents_as_numpy(handles["out"], np.float32, [2, 16])
        np.testing.assert_array_equal(total, np.concatenate([a + b, a - b]))
        client.unregister_cuda_shared_memory()
    for handle in handles.values():
        cudashm.destroy_shared_memory_region(handle)
