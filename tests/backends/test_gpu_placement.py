"""Placing instances by Triton's instance group rules (ONNX Runtime's and Python models'): pure,
so every case runs on CPU."""

import pytest
from google.protobuf import text_format

from backends import Device, ModelLoadError, Placement, plan_placements, python_placements
from proto import model_config_pb2 as mc

CPU = Device.cpu()
GPU0, GPU1, GPU2 = Device.cuda(0), Device.cuda(1), Device.cuda(2)


def _config(groups: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m"\nbackend: "onnxruntime"\n{groups}', mc.ModelConfig())


def _devices(placements: list[Placement]) -> list[Device]:
    return [p.device for p in placements]


def test_kind_cpu_runs_count_instances_on_cpu() -> None:
    placements = plan_placements(_config("instance_group [ { count: 3 kind: KIND_CPU } ]"), 2)
    assert _devices(placements) == [CPU, CPU, CPU]
    assert {p.group for p in placements} == {"m_0"}  # the name autocomplete gives the group
    assert not any(p.auto or p.note for p in placements)


def test_kind_gpu_with_gpus_runs_count_on_each_listed_gpu_alternating() -> None:
    config = _config("instance_group [ { name: 'g' count: 2 kind: KIND_GPU gpus: [ 1, 0 ] } ]")
    placements = plan_placements(config, 2)
    # Count outer, GPUs inner, as Triton creates them: a light load spreads over the devices.
    assert _devices(placements) == [GPU1, GPU0, GPU1, GPU0]
    assert {p.group for p in placements} == {"g"}
    assert not any(p.auto for p in placements)


def test_kind_gpu_without_gpus_runs_on_every_available_gpu() -> None:
    placements = plan_placements(_config("instance_group [ { count: 1 kind: KIND_GPU } ]"), 3)
    assert _devices(placements) == [GPU0, GPU1, GPU2]


def test_no_count_means_two_on_cpu_and_one_per_gpu() -> None:
    cpu = plan_placements(_config("instance_group [ { kind: KIND_CPU } ]"), 1)
    gpu = plan_placements(_config("instance_group [ { kind: KIND_GPU } ]"), 2)
    assert _devices(cpu) == [CPU, CPU]
    assert _devices(gpu) == [GPU0, GPU1]


def test_kind_auto_is_gpu_where_there_is_one_and_cpu_otherwise() -> None:
    config = _config("instance_group [ { name: 'a' count: 2 kind: KIND_AUTO } ]")
    on_gpu = plan_placements(config, 1)
    assert _devices(on_gpu) == [GPU0, GPU0]
    assert all(p.auto and not p.note for p in on_gpu)  # may still fall back at session level
    on_cpu = plan_placements(config, 0)
    assert _devices(on_cpu) == [CPU, CPU]
    assert all(p.auto for p in on_cpu)
    assert "instance group 'a' is KIND_AUTO and runs on CPU" in on_cpu[0].note
    assert "onnxruntime-gpu" in on_cpu[0].note  # says what is missing


def test_no_instance_group_is_one_auto_instance_without_a_warning() -> None:
    config = _config("")
    assert _devices(plan_placements(config, 0)) == [CPU]
    assert plan_placements(config, 0)[0].note == ""  # nothing was asked, nothing to warn about
    assert _devices(plan_placements(config, 2)) == [GPU0, GPU1]


def test_groups_are_placed_in_order() -> None:
    config = _config(
        "instance_group [ { count: 1 kind: KIND_GPU gpus: [ 1 ] }, { count: 2 kind: KIND_CPU } ]"
    )
    placements = plan_placements(config, 2)
    assert _devices(placements) == [GPU1, CPU, CPU]
    assert [p.group for p in placements] == ["m_0", "m_1", "m_1"]


def test_kind_gpu_without_a_gpu_is_a_load_error_naming_the_group() -> None:
    config = _config("instance_group [ { name: 'fast' count: 1 kind: KIND_GPU } ]")
    with pytest.raises(ModelLoadError) as error:
        plan_placements(config, 0)
    message = str(error.value)
    assert "model 'm': instance group 'fast' has kind KIND_GPU" in message
    assert "no CUDA device is available" in message


@pytest.mark.parametrize(
    ("gpus", "count", "expected"),
    [
        ("[ 2 ]", 2, "asks for GPU 2, but the GPUs available are [0, 1]"),
        ("[ -1 ]", 2, "asks for GPU -1"),
        ("[ 0, 0 ]", 2, "lists a GPU more than once: [0, 0]"),
    ],
)
def test_bad_gpu_lists_are_load_errors(gpus: str, count: int, expected: str) -> None:
    config = _config(f"instance_group [ {{ name: 'g' kind: KIND_GPU gpus: {gpus} }} ]")
    with pytest.raises(ModelLoadError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        plan_placements(config, count)


def test_kind_cpu_with_gpus_and_kind_model_are_load_errors() -> None:
    with pytest.raises(ModelLoadError, match="KIND_CPU but lists GPUs"):
        plan_placements(_config("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]"), 1)
    with pytest.raises(ModelLoadError, match="KIND_MODEL"):
        plan_placements(_config("instance_group [ { kind: KIND_MODEL } ]"), 1)


def _python(groups: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "p"\nbackend: "python"\n{groups}', mc.ModelConfig())


def test_a_python_model_runs_kind_gpu_groups_on_their_gpus() -> None:
    config = _python(
        "instance_group [ { name: 'g' count: 2 kind: KIND_GPU gpus: [ 1 ] }, "
        "{ name: 'c' kind: KIND_CPU } ]"
    )
    placements = python_placements(config, gpus=2)
    assert _devices(placements) == [GPU1, GPU1, CPU]  # a CPU group without a count: one
    assert [p.group for p in placements] == ["g", "g", "c"]


def test_a_python_model_runs_on_cpu_unless_a_group_asks_for_a_gpu() -> None:
    # KIND_AUTO (and no group at all) means the CPU for a Python model, GPUs or not.
    assert _devices(python_placements(_python(""), gpus=2)) == [CPU]
    auto = _python("instance_group [ { count: 2 kind: KIND_AUTO } ]")
    assert _devices(python_placements(auto, gpus=2)) == [CPU, CPU]
    assert not any(p.auto or p.note for p in python_placements(auto, gpus=0))


def test_a_python_kind_gpu_group_without_a_gpu_is_a_load_error() -> None:
    config = _python("instance_group [ { kind: KIND_CPU }, { name: 'g' kind: KIND_GPU } ]")
    with pytest.raises(ModelLoadError, match="instance group 'g' has kind KIND_GPU, but the "):
        python_placements(config, gpus=0)
    with pytest.raises(ModelLoadError, match="asks for GPU 2"):
        python_placements(_python("instance_group [ { kind: KIND_GPU gpus: [2] } ]"), gpus=2)
