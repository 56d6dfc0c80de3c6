"""Request keys, the entry format Redis holds, and the local LRU bounded in bytes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from proto import model_config_pb2 as mc
from server.core.cache import (
    CacheEntryError,
    LocalCache,
    decode_entry,
    encode_entry,
    request_key,
    version_cache,
    version_prefix,
)

TYPES = {"A": "FP32", "B": "BYTES"}


def _key(arrays: dict[str, np.ndarray], prefix: bytes | None = None, **parameters: object) -> bytes:
    key = request_key(prefix or version_prefix("m", 1, b""), arrays, TYPES, parameters)  # type: ignore[arg-type]
    assert key is not None
    return key


def _inputs() -> dict[str, np.ndarray]:
    return {
        "A": np.arange(8, dtype=np.float32).reshape(2, 4),
        "B": np.array([[b"x"], [b"yz"]], dtype=object),
    }


def test_equal_inputs_give_one_key_whatever_their_order_or_memory() -> None:
    first = _inputs()
    second = {"B": first["B"].copy(), "A": np.asfortranarray(first["A"])}
    assert _key(first) == _key(second)


def test_anything_else_gives_another_key() -> None:
    base = _key(_inputs())
    one_byte = _inputs()
    one_byte["A"].reshape(-1).view(np.uint8)[5] ^= 1
    reshaped = _inputs()
    reshaped["A"] = reshaped["A"].reshape(4, 2)
    other_bytes = _inputs()
    other_bytes["B"][1, 0] = b"yZ"
    keys = {
        _key(one_byte),
        _key(reshaped),
        _key(other_bytes),
        _key(_inputs(), prefix=version_prefix("m", 2, b"")),
        _key(_inputs(), prefix=version_prefix("n", 1, b"")),
        _key(_inputs(), prefix=version_prefix("m", 1, b"other files")),
        _key(_inputs(), temperature=1),
        _key({"A": _inputs()["A"]}),
    }
    assert base not in keys
    assert len(keys) == 8


def test_an_input_not_in_host_memory_is_not_cached() -> None:
    class DeviceArray:  # what a CUDA shared memory input is: not a NumPy array
        shape = (1,)

    assert request_key(version_prefix("m", 1, b""), {"A": DeviceArray()}, TYPES, {}) is None  # type: ignore[dict-item]


def test_an_entry_round_trips_every_kind_of_tensor() -> None:
    outputs = {
        "f": np.linspace(0, 1, 6, dtype=np.float16).reshape(2, 3),
        "i": np.array([[-1, 2**40]], dtype=np.int64),
        "b": np.array([True, False]),
        "s": np.array([b"", b"naive", "日本".encode()], dtype=object),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    decoded = decode_entry(encode_entry(outputs))
    assert list(decoded) == list(outputs)
    for name, array in outputs.items():
        assert decoded[name].dtype == array.dtype
        assert decoded[name].shape == array.shape
        assert decoded[name].tolist() == array.tolist()
        assert not decoded[name].flags.writeable


@pytest.mark.parametrize(
    "entry",
    [
        b"",
        b"PICKLE" + b"\0" * 10,
        encode_entry({"x": np.ones(4, np.float32)})[:-1],
        encode_entry({"x": np.ones(4, np.float32)}) + b"\0",
        encode_entry({"x": np.ones(4, np.float32)}).replace(b"<f4", b"|O8"),
        encode_entry({"x": np.ones(4, np.float32)}).replace(b"[4]", b"[5]"),
    ],
)
def test_a_malformed_entry_is_an_error_never_code(entry: bytes) -> None:
    with pytest.raises(CacheEntryError):
        decode_entry(entry)


async def test_local_cache_evicts_least_recently_used_first() -> None:
    def outputs(value: float) -> dict[str, np.ndarray]:
        return {"y": np.full(16, value, dtype=np.float32)}  # 64 bytes

    cache = LocalCache(capacity_bytes=3 * (64 + 1))  # three entries of a 1-byte key
    for key in b"abc":
        await cache.insert(bytes([key]), outputs(key))
    assert await cache.lookup(b"a") is not None  # "a" is now the most recently used
    await cache.insert(b"d", outputs(4))
    assert await cache.lookup(b"b") is None
    assert all([await cache.lookup(k) is not None for k in (b"a", b"c", b"d")])
    counters = cache.counters
    assert (counters.entries, counters.used_bytes, counters.evictions) == (3, 195, 1)


async def test_local_cache_keeps_a_frozen_copy_and_skips_what_cannot_fit() -> None:
    cache = LocalCache(capacity_bytes=100)
    batch = np.arange(32, dtype=np.float32).reshape(2, 16)
    await cache.insert(b"k", {"y": batch[1]})  # a view of a batch's output
    batch[1] = -1
    found = await cache.lookup(b"k")
    assert found is not None
    assert found["y"].tolist() == list(range(16, 32))
    assert not found["y"].flags.writeable
    await cache.insert(b"big", {"y": np.zeros(64, np.float32)})  # 256 bytes > 100
    assert await cache.lookup(b"big") is None
    assert cache.counters.evictions == 0


def _config(text: str) -> mc.ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(f'name: "m"\n{text}', mc.ModelConfig())


def test_which_versions_use_the_cache(caplog: pytest.LogCaptureFixture) -> None:
    cache = LocalCache(1024)
    enabled = "response_cache { enable: true }\n"
    assert version_cache(cache, _config(""), 1, b"") is None
    assert version_cache(cache, _config(enabled), 1, b"") is not None
    with caplog.at_level(logging.WARNING):
        assert version_cache(None, _config(enabled), 1, b"") is None
        decoupled = enabled + "model_transaction_policy { decoupled: true }"
        assert version_cache(cache, _config(decoupled), 1, b"") is None
        assert version_cache(cache, _config(enabled + "sequence_batching { }"), 1, b"") is None
    assert [record.getMessage() for record in caplog.records] == [
        "model 'm' version 1 enables response_cache, but the server has no cache "
        "(--cache-config): its responses are not cached",
        "model 'm' version 1 is decoupled: decoupled models are never cached",
        "model 'm' version 1 has sequence_batching: sequence models are never cached",
    ]
