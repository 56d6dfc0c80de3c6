"""The config a server reports is the user's: every field of each example model's config.pbtxt
comes back as written, and auto-complete only adds; in particular no parameter appears that the
file does not have (Model Analyzer copies served configs into the ones it loads)."""

from __future__ import annotations

import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer
from google.protobuf.message import Message

from proto import model_config_pb2 as mc
from scripts.gen_models import EXAMPLES
from server.core.repository import parse_config


def _missing(written: Message, served: Message, where: str) -> list[str]:
    """Where `served` differs from what `written` sets (fields `written` leaves out may differ)."""
    found = []
    for field, value in written.ListFields():
        path = f"{where}.{field.name}"
        given = getattr(served, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if set(value) != set(given):
                found.append(f"{path}: keys {sorted(given)} instead of {sorted(value)}")
                continue
            for key in value:
                if isinstance(value[key], Message):
                    found += _missing(value[key], given[key], f"{path}[{key}]")
                elif value[key] != given[key]:
                    found.append(f"{path}[{key}]: {given[key]!r} instead of {value[key]!r}")
        elif field.is_repeated and field.message_type is not None:
            if len(value) != len(given):
                found.append(f"{path}: {len(given)} entries instead of {len(value)}")
                continue
            for index, (mine, theirs) in enumerate(zip(value, given, strict=True)):
                found += _missing(mine, theirs, f"{path}[{index}]")
        elif field.message_type is not None:
            found += _missing(value, given, path)
        elif field.is_repeated:
            if list(value) != list(given):
                found.append(f"{path}: {list(given)} instead of {list(value)}")
        elif value != given:
            found.append(f"{path}: {given!r} instead of {value!r}")
    return found


@pytest.mark.parametrize("name", [name for name, _ in EXAMPLES])
def test_the_served_config_is_the_files_plus_auto_complete(convoy: ConvoyServer, name: str) -> None:
    path = convoy.repository / name / "config.pbtxt"
    written = parse_config(path.read_text(), str(path))
    with grpcclient.InferenceServerClient(convoy.url) as client:
        answer = client.get_model_config(name).config
    served = mc.ModelConfig.FromString(answer.SerializeToString())
    assert set(served.parameters) == set(written.parameters)
    assert _missing(written, served, name) == []
