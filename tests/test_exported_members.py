"""Each package states its public surface in `__all__`, and every name there exists."""

import importlib

import pytest

PACKAGES = [
    "proto",
    "backends",
    "batching",
    "server",
    "server.contract",
    "server.frontend",
    "server.frontend.grpc",
    "server.frontend.http",
    "server.core",
    "server.workers",
    "server.core.repository",
    "server.core.serving",
    "server.core.serving.ensemble",
    "server.core.shared_memory",
    "server.core.observability",
    "server.core.metrics",
    "server.core.storage",
    "server.options",
    "server.core.cache",
    "server.tools",
    "server.tools.doctor",
    "server.tools.profile",
    "backends.onnxruntime",
    "backends.python",
    "backends.pytorch",
    "backends.openvino",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist_and_are_public(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    for member in exported:
        assert not member.startswith("_")
        assert hasattr(package, member), f"{name}.__all__ names missing '{member}'"


@pytest.mark.parametrize("name", PACKAGES)
def test_no_public_name_is_left_out_of_all(name: str) -> None:
    package = importlib.import_module(name)
    public = {
        attr
        for attr, value in vars(package).items()
        if not attr.startswith("_")
        and getattr(value, "__module__", name).startswith(name.split(".")[0])
        and not isinstance(value, type(importlib))
    }
    assert public <= set(package.__all__)
