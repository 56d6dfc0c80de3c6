"""Where arrays live: devices, CUDA discovery without CUDA, host copies, staging buffers."""

import importlib.util

import numpy as np
import onnxruntime as ort
import pytest

from backends import (
    Device,
    DeviceKind,
    ModelLoadError,
    cuda_available,
    cuda_device_count,
    cuda_memory_total_bytes,
    import_cupy,
    is_device_array,
    on_host,
)
from backends.device import CUDA_PROVIDER, GrowingBuffer, gather, host_tensors

CPU_ONLY_RUNTIME = CUDA_PROVIDER not in ort.get_available_providers()
CUPY_MISSING = importlib.util.find_spec("cupy") is None


def test_devices_name_themselves_as_frameworks_do() -> None:
    assert str(Device.cpu()) == "cpu"
    assert str(Device.cuda(1)) == "cuda:1"
    assert Device.cuda(0).is_cuda and not Device.cpu().is_cuda
    assert Device.cuda(2) == Device(DeviceKind.CUDA, 2)
    assert DeviceKind.CUDA.value == "cuda"  # the device type ONNX Runtime's IOBinding takes


@pytest.mark.skipif(not CPU_ONLY_RUNTIME, reason="this ONNX Runtime has the CUDA provider")
def test_a_cpu_onnxruntime_means_no_cuda_and_nothing_raises() -> None:
    assert cuda_device_count() == 0
    assert cuda_available() is False
    assert cuda_memory_total_bytes() == 0


@pytest.mark.skipif(not CUPY_MISSING, reason="CuPy is installed")
def test_the_gpu_path_without_cupy_is_a_clear_load_error() -> None:
    with pytest.raises(ModelLoadError, match="cupy-cuda13x"):
        import_cupy()


class DeviceLike:
    """What the CPU-side code sees of a CuPy array: the CUDA array interface and `get`."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.__cuda_array_interface__ = {"shape": values.shape, "version": 3}

    def get(self) -> np.ndarray:
        return self.values.copy()


def test_host_arrays_pass_through_and_device_ones_are_copied_back() -> None:
    host = np.arange(4, dtype=np.float32)
    assert on_host(host) is host
    assert not is_device_array(host)
    device = DeviceLike(np.ones(3, np.int64))
    assert is_device_array(device)
    np.testing.assert_array_equal(on_host(device), np.ones(3, np.int64))
    request = {"a": host}
    assert host_tensors(request) is request  # no copy of the mapping on the common path
    mixed = host_tensors({"a": host, "b": device})
    assert mixed["a"] is host
    assert isinstance(mixed["b"], np.ndarray)


def test_a_staging_buffer_grows_by_powers_of_two_and_is_reused() -> None:
    buffer = GrowingBuffer(bytearray, min_bytes=1024)
    first = buffer.reserve(10)
    assert len(first) == buffer.capacity_bytes == 1024
    assert buffer.reserve(1024) is first  # fits: the same block, nothing allocated
    grown = buffer.reserve(1025)
    assert grown is not first
    assert len(grown) == buffer.capacity_bytes == 2048
    assert buffer.reserve(3000) is not grown
    assert buffer.capacity_bytes == 4096
    for nbytes in (1, 4096, 2000):
        assert buffer.reserve(nbytes) is buffer.reserve(4096)
    assert buffer.allocations == 3


def test_a_staging_buffer_allocates_nothing_before_it_is_used() -> None:
    sizes: list[int] = []

    def allocate(nbytes: int) -> bytearray:
        sizes.append(nbytes)
        return bytearray(nbytes)

    buffer = GrowingBuffer(allocate, min_bytes=64)
    assert sizes == [] and buffer.capacity_bytes == 0
    buffer.reserve(0)
    buffer.reserve(100)
    assert sizes == [64, 128]


def test_gather_writes_requests_back_to_back_into_the_block() -> None:
    block = bytearray(1024)
    parts = [np.full((n, 3), n, np.float32) for n in (1, 3, 2)]
    batch = gather(parts, block)
    assert batch.shape == (6, 3) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, np.concatenate(parts))
    assert np.shares_memory(batch, np.frombuffer(block, np.uint8))  # a view: one copy only
    again = gather([np.zeros((2, 3), np.float32)], block)
    assert np.shares_memory(again, batch)  # the next batch reuses the same bytes
    np.testing.assert_array_equal(batch[:2], np.zeros((2, 3)))


def test_gather_keeps_shapes_without_a_batch_axis_and_any_dtype() -> None:
    block = bytearray(64)
    single = np.array([[True, False], [False, True]])
    np.testing.assert_array_equal(gather([single], block), single)
    assert gather([np.zeros((0, 4), np.int64)], block).shape == (0, 4)
    bits = [np.array([[0x3F80]], np.uint16), np.array([[0xC000]], np.uint16)]  # BF16 bits
    np.testing.assert_array_equal(gather(bits, block), [[0x3F80], [0xC000]])
