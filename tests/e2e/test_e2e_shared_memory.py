"""System shared memory: inputs read from and outputs written to registered regions, as with
Triton's `tritonclient.utils.shared_memory`; every out-of-bounds use is INVALID_ARGUMENT."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from e2e_support import SIMPLE_BYTES as BYTES
from e2e_support import ConvoyServer, shm_inputs, shm_outputs
from tritonclient.utils import InferenceServerException


@pytest.fixture
def regions(convoy: ConvoyServer) -> Iterator[tuple[grpcclient.InferenceServerClient, str, dict]]:
    """An input region holding INPUT0 and INPUT1 and an output region for both outputs."""
    client = grpcclient.InferenceServerClient(convoy.url)
    tag = uuid.uuid4().hex[:8]
    handles = {
        "in": shm.create_shared_memory_region(f"in_{tag}", f"/convoy_in_{tag}", 2 * BYTES),
        "out": shm.create_shared_memory_region(f"out_{tag}", f"/convoy_out_{tag}", 2 * BYTES),
    }
    client.register_system_shared_memory(f"in_{tag}", f"/convoy_in_{tag}", 2 * BYTES)
    client.register_system_shared_memory(f"out_{tag}", f"/convoy_out_{tag}", 2 * BYTES)
    yield client, tag, handles
    client.unregister_system_shared_memory()
    for handle in handles.values():
        shm.destroy_shared_memory_region(handle)
    client.close()


def test_inputs_and_outputs_through_shared_memory(regions: tuple) -> None:
    client, tag, handles = regions
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, np.float32)
    shm.set_shared_memory_region(handles["in"], [a, b])
    outputs = shm_outputs(grpcclient, f"out_{tag}")
    result = client.infer("simple", shm_inputs(grpcclient, f"in_{tag}"), outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT0", "OUTPUT1"]
    total = shm.get_contents_as_numpy(handles["out"], np.float32, [2, 16])
    np.testing.assert_array_equal(total[0], (a + b)[0])
    np.testing.assert_array_equal(total[1], (a - b)[0])
    status = client.get_system_shared_memory_status(as_json=True)
    names = {region["name"] for region in status["regions"].values()}
    assert {f"in_{tag}", f"out_{tag}"} <= names


def test_a_shared_memory_input_beside_a_raw_one(regions: tuple) -> None:
    client, tag, handles = regions
    a = np.ones((1, 16), np.float32)
    shm.set_shared_memory_region(handles["in"], [a])
    first = shm_inputs(grpcclient, f"in_{tag}")[0]
    second = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    second.set_data_from_numpy(np.full((1, 16), 2, np.float32))
    result = client.infer("simple", [first, second])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 3, np.float32))


def test_out_of_bounds_and_unknown_regions_are_refused(regions: tuple) -> None:
    client, tag, _ = regions
    with pytest.raises(InferenceServerException) as beyond:
        # INPUT1 ends 4 bytes past the region.
        client.infer("simple", shm_inputs(grpcclient, f"in_{tag}", BYTES + 4))
    assert beyond.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "fall outside" in beyond.value.message()
    with pytest.raises(InferenceServerException) as unknown:
        client.infer("simple", shm_inputs(grpcclient, "in_nope"))
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    assert "Unable to find shared memory region: 'in_nope'" in unknown.value.message()
    with pytest.raises(InferenceServerException) as too_big:
        client.register_system_shared_memory("huge", f"/convoy_in_{tag}", 1 << 30)
    assert too_big.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException) as twice:
        client.register_system_shared_memory(f"in_{tag}", f"/convoy_in_{tag}", BYTES)
    assert twice.value.status() == "StatusCode.ALREADY_EXISTS"
    with pytest.raises(InferenceServerException) as escape:
        client.register_system_shared_memory("escape", "/../etc/passwd", 8)
    assert escape.value.status() == "StatusCode.INVALID_ARGUMENT"
