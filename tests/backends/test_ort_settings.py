"""ONNX Runtime session settings: the thread share of the cores, Triton's parameter names."""

import os

import pytest
from google.protobuf import text_format

from backends import ModelLoadError, OrtSettings, usable_cores
from backends.onnxruntime._settings import SMALL_WORK_US, small_work
from proto import model_config_pb2 as mc


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_instances_share_the_cores() -> None:
    two = _config('name: "m" instance_group [ { count: 2 kind: KIND_CPU } ]')
    assert OrtSettings.from_config(two, cores=2).intra_op_threads == 1
    assert OrtSettings.from_config(two, cores=8).intra_op_threads == 4
    assert OrtSettings.from_config(two, cores=8).inter_op_threads == 4
    assert OrtSettings.from_config(two, cores=1).intra_op_threads == 1  # never below one


def test_one_instance_takes_every_core() -> None:
    # No groups is one KIND_AUTO instance, as Triton's config for one instance and no parameters:
    # ONNX Runtime's own count (a pinned thread per physical core) when every CPU is usable.
    for cpus in (2, 16):
        whole = OrtSettings.from_config(mc.ModelConfig(), cores=cpus, machine_cpus=cpus)
        assert whole.intra_op_threads == 0
        assert whole.session_options().intra_op_num_threads == 0
    # A narrower affinity (taskset, a cpuset): ONNX Runtime would count the machine's cores.
    narrow = OrtSettings.from_config(mc.ModelConfig(), cores=2, machine_cpus=16)
    assert narrow.intra_op_threads == 2
    wide = OrtSettings.from_config(mc.ModelConfig(), cores=16, machine_cpus=64)
    assert (wide.intra_op_threads, wide.inter_op_threads) == (16, 16)


def test_every_group_of_the_model_counts() -> None:
    # A CPU group without a count runs two instances; a GPU group runs `count` on each GPU.
    config = _config(
        "instance_group [ { kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [ 0, 1 ] } ]"
    )
    assert OrtSettings.from_config(config, cores=8).intra_op_threads == 2


def test_cores_default_to_the_affinity() -> None:
    assert usable_cores() >= 1
    one = OrtSettings.from_config(mc.ModelConfig())
    assert one.intra_op_threads == (0 if usable_cores() == os.cpu_count() else usable_cores())


def test_triton_parameters_win_over_the_share() -> None:
    config = _config(
        """
        instance_group [ { count: 2 kind: KIND_CPU } ]
        parameters { key: "intra_op_thread_count" value: { string_value: "3" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "2" } }
        parameters { key: "execution_mode" value: { string_value: "1" } }
        parameters { key: "session.intra_op.allow_spinning" value: { string_value: "1" } }
        optimization { graph { level: -1 } }
        """
    )
    settings = OrtSettings.from_config(config, cores=64)
    assert settings == OrtSettings(
        3, 2, parallel_execution=True, optimize_graph=False, allow_spinning=True, spin_us=None
    )
    zero = _config('parameters { key: "intra_op_thread_count" value: { string_value: "0" } }')
    assert OrtSettings.from_config(zero, cores=64).intra_op_threads == 0  # ORT's own choice


def test_threads_spin_briefly_unless_told() -> None:
    settings = OrtSettings.from_config(mc.ModelConfig(), cores=2)
    assert (settings.allow_spinning, settings.spin_us) == (True, 50)
    options = settings.session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.intra_op.spin_duration_us") == "50"


@pytest.mark.parametrize(
    ("parameters", "spinning", "spin_us"),
    [
        ({"session.intra_op.allow_spinning": "0"}, "0", None),
        ({"session.intra_op.allow_spinning": "1"}, "1", None),  # ONNX Runtime's own spin
        ({"session.intra_op.spin_duration_us": "400"}, "1", "400"),
        (
            {"session.intra_op.allow_spinning": "1", "session.intra_op.spin_duration_us": "0"},
            "1",
            "0",
        ),
    ],
)
def test_spinning_as_the_config_says(
    parameters: dict[str, str], spinning: str, spin_us: str | None
) -> None:
    text = " ".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
        for key, value in parameters.items()
    )
    options = OrtSettings.from_config(_config(text), cores=2).session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spinning
    if spin_us is None:
        with pytest.raises(RuntimeError, match="does not have configuration"):
            options.get_session_config_entry("session.intra_op.spin_duration_us")
    else:
        assert options.get_session_config_entry("session.intra_op.spin_duration_us") == spin_us


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("intra_op_thread_count", "two"),
        ("inter_op_thread_count", "-1"),
        ("execution_mode", "parallel"),
        ("session.intra_op.allow_spinning", "yes"),
        ("session.intra_op.spin_duration_us", "-5"),
        ("intra_op_thread_count", "\u0662"),  # ASCII digits only
        ("inter_op_thread_count", "1_0"),
    ],
)
def test_bad_parameter_is_a_load_error(key: str, value: str) -> None:
    config = _config(
        f'name: "m" parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    )
    with pytest.raises(ModelLoadError, match=f"model 'm': parameter '{key}'"):
        OrtSettings.from_config(config, cores=2)


def test_only_a_pool_the_config_did_not_ask_for_is_measured() -> None:
    one = mc.ModelConfig()
    one.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    assert OrtSettings.from_config(one, cores=2, machine_cpus=2).measure_pool  # ORT's own pool
    two = mc.ModelConfig()
    two.instance_group.add(count=2, kind=mc.ModelInstanceGroup.KIND_CPU)
    assert not OrtSettings.from_config(two, cores=2, machine_cpus=2).measure_pool  # one each
    assert OrtSettings.from_config(two, cores=8, machine_cpus=8).measure_pool  # four each
    named = mc.ModelConfig()
    named.CopyFrom(one)
    named.parameters["intra_op_thread_count"].string_value = "2"
    assert not OrtSettings.from_config(named, cores=2, machine_cpus=2).measure_pool


def test_small_work_is_up_to_the_limit() -> None:
    assert small_work(SMALL_WORK_US)
    assert not small_work(SMALL_WORK_US + 1)
