"""`convoy doctor`: one broken repository per pitfall, each found with its expected message, and
the command line's table, JSON and exit status on the example repository and a broken one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from backends import driver_device_count
from scripts import gen_models, models
from server.tools.doctor import Check, DoctorSettings, Finding, Severity, as_table, examine
from server.tools.doctor._memory import Usage, check_memory

REPO_ROOT = Path(__file__).resolve().parents[2]
PLENTY_BYTES = 1 << 40
IDENTITY_CONFIG = models.identity_config("m", TensorProto.FLOAT)  # max_batch_size 8, dims [4]


def run(*repositories: Path, usable_bytes: int = PLENTY_BYTES, measure: bool = False):
    return asyncio.run(examine(list(repositories), usable_bytes, DoctorSettings(measure=measure)))


def only(findings: list[Finding], check: Check) -> Finding:
    found = [finding for finding in findings if finding.check is check]
    assert len(found) == 1, findings
    return found[0]


def identity_model(repo: Path, name: str = "m", config: str = IDENTITY_CONFIG) -> Path:
    return models.write_model(repo, name, models.identity(TensorProto.FLOAT), config)


def fixed_batch_identity() -> onnx.ModelProto:
    """[1, 4] in and out: a model exported without a dynamic batch axis."""
    tensor = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("IN", "OUT")]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["IN"], ["OUT"])], "fixed", tensor[:1], tensor[1:]
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", models.OPSET)], ir_version=models.IR_VERSION
    )


def test_a_good_model_has_no_finding(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG + "dynamic_batching { default_queue_policy { max_queue_size: 16 } }\n"
    identity_model(tmp_path, config=config)
    assert run(tmp_path) == (["m"], [])


def test_batch_axis_not_dynamic(tmp_path: Path) -> None:
    config = 'max_batch_size: 8\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    config += 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    models.write_model(tmp_path, "fixed", fixed_batch_identity(), config)
    finding = only(run(tmp_path)[1], Check.BATCH_AXIS)
    assert finding.severity is Severity.ERROR
    assert "max_batch_size is 8, but input 'IN' has shape [1, 4]" in finding.message
    assert "no dynamic batch dimension first" in finding.message
    assert "set max_batch_size: 0" in finding.fix
    assert finding.path == str(tmp_path / "fixed" / "config.pbtxt")


def test_names_that_do_not_match_the_file(tmp_path: Path) -> None:
    identity_model(tmp_path, config=IDENTITY_CONFIG.replace('"INPUT0"', '"input"'))
    finding = only(run(tmp_path)[1], Check.TENSOR_NAMES)
    assert finding.severity is Severity.ERROR
    assert "input 'input' is not in the model file (the file's inputs: ['INPUT0'])" in (
        finding.message
    )
    assert "['INPUT0']" in finding.fix


def test_dims_that_include_the_batch_dimension(tmp_path: Path) -> None:
    identity_model(tmp_path, config=IDENTITY_CONFIG.replace("dims: [ 4 ]", "dims: [ 8, 4 ]"))
    finding = only(run(tmp_path)[1], Check.BATCH_IN_DIMS)
    assert finding.severity is Severity.ERROR
    assert "has dims [8, 4] in the config, but the model file expects [4]" in finding.message
    assert "drop the batch dimension from input 'INPUT0': dims: [4]" in finding.fix


def test_a_version_directory_that_is_not_a_number(tmp_path: Path) -> None:
    model_dir = identity_model(tmp_path)
    (model_dir / "1").rename(model_dir / "v1")
    findings = run(tmp_path)[1]
    skipped = [f for f in findings if f.check is Check.VERSIONS and f.severity is Severity.WARNING]
    assert len(skipped) == 1
    assert "directory 'v1' is not a version number, so the server ignores it" in (
        skipped[0].message
    )
    assert skipped[0].fix.startswith("rename it to '1'")
    refused = [f for f in findings if f.check is Check.VERSIONS and f.severity is Severity.ERROR]
    assert "no version directory matches its version policy" in refused[0].message


def test_a_backend_convoy_cannot_serve(tmp_path: Path) -> None:
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "config.pbtxt").write_text('platform: "tensorflow_savedmodel"\n')
    finding = only(run(tmp_path)[1], Check.BACKEND)
    assert finding.severity is Severity.ERROR
    assert "backend 'tensorflow_savedmodel' is not supported" in finding.message
    assert "no extra of this Convoy serves 'tensorflow_savedmodel'" in finding.fix


def test_a_python_based_backend_is_found_where_the_server_finds_it(tmp_path: Path) -> None:
    backends, repo = tmp_path / "backends", tmp_path / "repo"
    (backends / "adder").mkdir(parents=True)
    (backends / "adder" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text(
        'backend: "adder"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    found = DoctorSettings(measure=False, backend_directory=backends)
    names, findings = asyncio.run(examine([repo], PLENTY_BYTES, found))
    assert list(names) == ["m"] and not findings
    elsewhere = DoctorSettings(measure=False, backend_directory=tmp_path / "none")
    _, findings = asyncio.run(examine([repo], PLENTY_BYTES, elsewhere))
    assert "or a Python-based backend" in only(findings, Check.BACKEND).message


@pytest.mark.skipif(driver_device_count() > 0, reason="a GPU is here: a KIND_GPU group loads")
def test_a_python_model_asking_for_a_gpu_where_there_is_none(tmp_path: Path) -> None:
    (tmp_path / "p" / "1").mkdir(parents=True)
    (tmp_path / "p" / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (tmp_path / "p" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "instance_group [ { kind: KIND_GPU } ]\n"
    )
    finding = only(run(tmp_path)[1], Check.CONFIG)
    assert finding.severity is Severity.ERROR and finding.model == "p"
    assert "instance group 'p_0' has kind KIND_GPU, but the NVIDIA driver" in finding.message


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        ("convoy_inline_execute", "true", "which only a model in the server's process can do"),
        ("convoy_execute_timeout_s", "soon", "must be a number of seconds, got 'soon'"),
    ],
)
def test_a_python_model_parameter_the_loader_refuses(
    tmp_path: Path, parameter: str, value: str, message: str
) -> None:
    (tmp_path / "p" / "1").mkdir(parents=True)
    (tmp_path / "p" / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (tmp_path / "p" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "{parameter}" value: {{ string_value: "{value}" }} }}\n'
    )
    finding = only(run(tmp_path)[1], Check.CONFIG)
    assert finding.severity is Severity.ERROR and finding.model == "p"
    assert message in finding.message


def test_a_missing_model_file_and_a_bad_config(tmp_path: Path) -> None:
    (tmp_path / "empty" / "1").mkdir(parents=True)
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "config.pbtxt").write_text("max_batch_sizes: 8\n")
    findings = run(tmp_path)[1]
    missing = only(findings, Check.MODEL_FILE)
    assert missing.model == "empty" and "model.onnx' not found" in missing.message
    typo = only(findings, Check.CONFIG)
    assert typo.model == "typo" and "line 1, column 1" in typo.message
    assert 'no field named "max_batch_sizes"' in typo.message


def test_models_that_do_not_fit_together(tmp_path: Path) -> None:
    for name in ("a_mlp", "b_mlp"):
        models.write_model(tmp_path, name, models.mlp(), None)  # auto-complete: max batch 4
    one = run(tmp_path)[1]
    assert not [f for f in one if f.check is Check.MEMORY]
    weights = (tmp_path / "a_mlp" / "1" / "model.onnx").stat().st_size
    # One instance each (no instance_group): weights plus a batch of 4, +20%: one fits, not two.
    findings = run(tmp_path, usable_bytes=int(weights * 1.2 * 1.5))[1]
    finding = only(findings, Check.MEMORY)
    assert finding.severity is Severity.ERROR and finding.model == ""
    assert "+20% for batch peaks" in finding.message
    assert "a_mlp fit" in finding.message
    assert "b_mlp would not fit beside them" in finding.message


def test_a_model_too_large_alone() -> None:
    usages = [Usage("big", "big/config.pbtxt", 500, 0)]
    (alone, together) = check_memory(usages, 550, "--memory-budget")
    assert alone.model == "big" and alone.severity is Severity.ERROR
    assert "needs 600 B (500 B of instances x (weights + one max batch), +20%" in alone.message
    assert "--memory-budget gives 550 B" in alone.message
    assert together.model == "" and "none fit" in together.message


def test_gpu_copies_of_the_weights() -> None:
    (note,) = check_memory([Usage("gpu", "gpu/config.pbtxt", 1000, 2)], 10_000, "x")
    assert note.severity is Severity.INFO
    assert "2 GPU instances each hold a copy of the weights" in note.message


def test_a_queue_delay_long_against_the_measured_batch(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG + (
        "dynamic_batching { max_queue_delay_microseconds: 1000000 "
        "default_queue_policy { max_queue_size: 16 } }\n"
    )
    identity_model(tmp_path, config=config)
    finding = only(run(tmp_path, measure=True)[1], Check.QUEUE_DELAY)
    assert finding.severity is Severity.WARNING
    assert "max_queue_delay_microseconds is 1000000 (1000 ms), but a batch of 8" in (
        finding.message
    )
    assert "(measured just now)" in finding.message
    assert run(tmp_path, measure=False)[1] == []


def test_a_queue_delay_long_against_the_recorded_measurement(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG + (
        "# convoy profile: batch 8 executes in 0.500 ms\n"
        "dynamic_batching { max_queue_delay_microseconds: 4000 "
        "default_queue_policy { max_queue_size: 16 } }\n"
    )
    identity_model(tmp_path, config=config)
    finding = only(run(tmp_path)[1], Check.QUEUE_DELAY)
    assert "a batch of 8 executes in 0.50 ms (recorded by convoy profile)" in finding.message
    assert "8.0x what its batch takes to run" in finding.message
    assert finding.fix.startswith("max_queue_delay_microseconds: 500 or less")


def test_an_unbounded_queue(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    identity_model(tmp_path, config=config + "dynamic_batching { }\n")
    finding = only(run(tmp_path)[1], Check.QUEUE_SIZE)
    assert finding.severity is Severity.WARNING
    assert "dynamic_batching has no max_queue_size, so its queue is unbounded" in finding.message
    assert "max_queue_size: 32 } } (2 batches of 8 per instance)" in finding.fix


def test_a_linked_version_directory_hides_changes_from_poll_mode(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = identity_model(repo)
    (model_dir / "1").rename(tmp_path / "stored")
    (model_dir / "1").symlink_to(tmp_path / "stored", target_is_directory=True)
    finding = only(run(repo)[1], Check.HOT_RELOAD)
    assert finding.severity is Severity.WARNING
    assert "'1' is a link to a directory; poll mode" in finding.message


def test_an_ensemble_step_that_does_not_fit_its_model(tmp_path: Path) -> None:
    identity_model(tmp_path, config=IDENTITY_CONFIG.replace('"m"', '"step"'), name="step")
    (tmp_path / "step" / "config.pbtxt").write_text(
        IDENTITY_CONFIG.replace('"m"', '"step"') + "dynamic_batching { default_queue_policy "
        "{ max_queue_size: 16 } }\n"
    )
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "step" model_version: -1 '
        'input_map { key: "WRONG" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }\n'
    )
    finding = only(run(tmp_path)[1], Check.ENSEMBLE)
    assert finding.model == "pipe" and "WRONG" in finding.message


def test_a_model_name_in_two_repositories(tmp_path: Path) -> None:
    identity_model(tmp_path / "one")
    identity_model(tmp_path / "two")
    names, findings = run(tmp_path / "one", tmp_path / "two")
    assert names == []
    assert "model 'm' is in two repositories" in only(findings, Check.CONFIG).message


def test_the_table_groups_findings_by_model(tmp_path: Path) -> None:
    identity_model(tmp_path, config=IDENTITY_CONFIG + "dynamic_batching { }\n")
    names, findings = run(tmp_path)
    table = as_table(names, findings, width=100)
    assert table.startswith("convoy doctor: 1 model(s), 0 error(s), 1 warning(s), 0 note(s)")
    assert "\nm\n  warning queue-size    model 'm': dynamic_batching" in table
    assert f"file: {tmp_path / 'm' / 'config.pbtxt'}" in table


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "server", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_command_on_a_broken_repository_exits_1(tmp_path: Path, output: str) -> None:
    identity_model(tmp_path, config=IDENTITY_CONFIG.replace("dims: [ 4 ]", "dims: [ 8, 4 ]"))
    done = doctor(str(tmp_path), "--format", output)
    assert done.returncode == 1, done.stderr
    if output == "json":
        report = json.loads(done.stdout)
        assert report["counts"] == {"error": 1, "warning": 0, "info": 0}
        assert report["findings"][0]["check"] == "batch-in-dims"
    else:
        assert "error   batch-in-dims" in done.stdout


def test_the_command_on_the_example_repository_exits_0(tmp_path: Path) -> None:
    for write in (gen_models.write_simple, gen_models.write_mlp, gen_models.write_simple_int32):
        write(tmp_path)
    done = doctor(str(tmp_path), "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["models"] == ["mlp", "simple", "simple_int32"]
    assert report["counts"]["error"] == 0
