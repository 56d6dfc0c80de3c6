"""`--cache-config` values into a cache spec: Triton's spellings, Convoy's defaults, and a clear
error for everything else."""

from __future__ import annotations

import pytest

from server.contract.errors import ConfigError
from server.core.cache import LocalCacheSpec, RedisCacheSpec, parse_cache_config


def test_no_value_is_no_cache() -> None:
    assert parse_cache_config(()) is None


def test_local_size() -> None:
    assert parse_cache_config(["local,size=1048576"]) == LocalCacheSpec(1048576)


def test_redis_keys_over_several_values_as_triton() -> None:
    spec = parse_cache_config(
        ["redis,host=cache.local", "redis,port=6380", "redis,password=secret", "redis,db=2"]
    )
    assert spec == RedisCacheSpec("cache.local", 6380, password="secret", db=2)
    assert isinstance(spec, RedisCacheSpec)
    assert spec.address == "cache.local:6380"
    assert spec.connect_timeout_ms == 1000  # Convoy's default: a dead host is a quick miss


def test_redis_timeouts_and_pool() -> None:
    spec = parse_cache_config(
        [
            "redis,host=h",
            "redis,port=1",
            "redis,user=u",
            "redis,connect_timeout=0",
            "redis,socket_timeout=250",
            "redis,pool_size=2",
            "redis,wait_timeout=5",
        ]
    )
    assert spec == RedisCacheSpec("h", 1, "u", None, 0, 0, 250, 2, 5)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (["local"], "expected <cache>,<key>=<value>"),
        (["memcached,size=1"], "one of local, redis"),
        (["local,size="], "expected <cache>,<key>=<value>"),
        (["local,size=abc"], "local,size=abc: expected a non-negative integer"),
        (["local,size=0"], "the size must be positive"),
        (["local,capacity=5"], "unknown key(s) ['capacity']"),
        (["local,size=8", "redis,host=h"], "one cache at a time, and 'local' is configured"),
        (["redis,host=h"], "port required"),
        (["redis,port=6379"], "host required"),
        (["redis,host=h", "redis,port=70000"], "not a TCP port"),
        (["redis,host=h", "redis,port=1", "redis,colour=red"], "unknown key(s) ['colour']"),
        (["redis,host=h", "redis,port=1", "redis,pool_size=0"], "pool_size: at least 1"),
    ],
)
def test_wrong_values_name_what_is_wrong(values: list[str], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_cache_config(values)
    assert words in str(raised.value)
