"""Ensemble plans: the DAG over tensor names, and every load error a config can have."""

import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import parse_config
from server.core.serving.ensemble import composing_models, plan_ensemble

MODELS = {
    "pre": 'name: "pre" max_batch_size: 8 input [{name: "RAW" data_type: TYPE_STRING dims: [1]}] '
    'output [{name: "PIX" data_type: TYPE_FP32 dims: [4]}]',
    "net": 'name: "net" max_batch_size: 8 input [{name: "x" data_type: TYPE_FP32 dims: [4]}] '
    'output [{name: "y" data_type: TYPE_FP32 dims: [3]}]',
    "head": 'name: "head" max_batch_size: 8 input [{name: "L" data_type: TYPE_FP32 dims: [3]}] '
    'output [{name: "C" data_type: TYPE_INT64 dims: [1]}]',
    "sq": 'name: "sq" max_batch_size: 8 input [{name: "x" data_type: TYPE_FP32 dims: [3]}] '
    'output [{name: "y" data_type: TYPE_FP32 dims: [3]}]',
    "small": 'name: "small" max_batch_size: 2 input [{name: "x" data_type: TYPE_FP32 dims: [4]}] '
    'output [{name: "y" data_type: TYPE_FP32 dims: [3]}]',
}


def composing(name: str) -> mc.ModelConfig | None:
    text = MODELS.get(name)
    return parse_config(text, name) if text else None


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {ins} {outs} }}'


PIPELINE = [
    step("pre", {"RAW": "IMAGE"}, {"PIX": "pixels"}),
    step("net", {"x": "pixels"}, {"y": "LOGITS"}),
    step("head", {"L": "LOGITS"}, {"C": "LABEL"}),
]


def ensemble(steps: list[str], outputs: str = "", max_batch_size: int = 8) -> mc.ModelConfig:
    outputs = outputs or (
        '{name: "LABEL" data_type: TYPE_INT64 dims: [1]}, '
        '{name: "LOGITS" data_type: TYPE_FP32 dims: [3]}'
    )
    text = (
        f'name: "ens" platform: "ensemble" max_batch_size: {max_batch_size} '
        'input [{name: "IMAGE" data_type: TYPE_STRING dims: [1]}] '
        f"output [{outputs}] "
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] max_inflight_requests: 4 }}"
    )
    return parse_config(text, "ens")


def test_a_pipeline_is_planned_in_dependency_order() -> None:
    shuffled = [PIPELINE[2], PIPELINE[0], PIPELINE[1]]
    plan = plan_ensemble(ensemble(shuffled), composing)
    assert [s.model for s in plan.steps] == ["pre", "net", "head"]
    assert plan.steps[1].inputs == {"x": "pixels"}
    assert plan.steps[0].version == ""
    assert plan.outputs == ("LABEL", "LOGITS")
    assert plan.max_inflight == 4
    assert composing_models(ensemble(shuffled)) == ["head", "pre", "net"]


def test_each_step_knows_who_reads_its_tensors_unless_one_leaves_the_ensemble() -> None:
    # LOGITS is an ensemble output: net's outputs must come back to the host.
    pre, net, head = plan_ensemble(ensemble(PIPELINE), composing).steps
    assert (pre.consumers, net.consumers, head.consumers) == ((("net", ""),), None, None)
    # Only LABEL leaves: net hands LOGITS to head alone; pixels feed two steps.
    steps = [
        step("pre", {"RAW": "IMAGE"}, {"PIX": "pixels"}),
        step("net", {"x": "pixels"}, {"y": "LOGITS"}),
        step("small", {"x": "pixels"}, {"y": "unused"}, version=2),
        step("head", {"L": "LOGITS"}, {"C": "LABEL"}),
    ]
    label = '{name: "LABEL" data_type: TYPE_INT64 dims: [1]}'
    planned = {s.model: s for s in plan_ensemble(ensemble(steps, label, 2), composing).steps}
    assert planned["pre"].consumers == (("net", ""), ("small", "2"))
    assert planned["net"].consumers == (("head", ""),)
    assert planned["small"].consumers == ()  # read by no step: nothing to hand over
    assert planned["head"].consumers is None


def test_a_specific_composing_version_is_kept() -> None:
    steps = [step("pre", {"RAW": "IMAGE"}, {"PIX": "pixels"}, version=3), *PIPELINE[1:]]
    assert plan_ensemble(ensemble(steps), composing).steps[0].version == "3"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("nowhere", {"x": "IMAGE"}, {"y": "LOGITS"})], "'nowhere' is not available"),
        ([step("ens", {"x": "IMAGE"}, {"y": "LOGITS"})], "refers to the ensemble itself"),
        (
            [step("pre", {"RAW": "IMAGE"}, {"PIX": "pixels"}), PIPELINE[2]],
            "tensor 'LOGITS' for .* is not produced by any step",
        ),
        (
            [step("pre", {"BAD": "IMAGE"}, {"PIX": "pixels"}), *PIPELINE[1:]],
            "input_map names 'BAD', which is not an input",
        ),
        (
            [step("pre", {"RAW": "IMAGE"}, {"NOPE": "pixels"}), *PIPELINE[1:]],
            "output_map names 'NOPE', which is not an output",
        ),
        (
            [step("pre", {}, {"PIX": "pixels"}), *PIPELINE[1:]],
            r"input\(s\) \['RAW'\] are not mapped",
        ),
        (
            [*PIPELINE, step("net", {"x": "pixels"}, {"y": "LOGITS"})],
            "tensor 'LOGITS' is already produced",
        ),
        (
            # pre's PIX is FP32 [4]; head wants FP32 [3]: shapes do not fit.
            [PIPELINE[0], step("head", {"L": "pixels"}, {"C": "LABEL"}), PIPELINE[1]],
            r"tensor 'pixels' has shape \[-1, 4\] .* expects \[-1, 3\]",
        ),
        (
            # head's LABEL is INT64, fed where net wants FP32.
            [*PIPELINE, step("net", {"x": "LABEL"}, {"y": "OTHER"})],
            "tensor 'LABEL' is TYPE_INT64 .* expects TYPE_FP32",
        ),
        (
            [step("pre", {"RAW": "IMAGE"}, {"PIX": "pixels"}, version=0), *PIPELINE[1:]],
            "model_version must be -1 or a version number",
        ),
    ],
)
def test_load_errors_name_what_is_wrong(steps: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_ensemble(ensemble(steps), composing)


def test_a_cycle_between_steps_is_refused() -> None:
    cycle = [step("sq", {"x": "b"}, {"y": "a"}), step("sq", {"x": "a"}, {"y": "b"})]
    config = ensemble(cycle, outputs='{name: "a" data_type: TYPE_FP32 dims: [3]}')
    with pytest.raises(ConfigError, match="cycle"):
        plan_ensemble(config, composing)


def test_a_composing_model_must_batch_as_far_as_the_ensemble() -> None:
    steps = [PIPELINE[0], step("small", {"x": "pixels"}, {"y": "LOGITS"}), PIPELINE[2]]
    with pytest.raises(ConfigError, match="max_batch_size is 8, but the model's is 2"):
        plan_ensemble(ensemble(steps), composing)


def test_an_ensemble_output_nobody_produces_is_refused() -> None:
    outputs = '{name: "MISSING" data_type: TYPE_INT64 dims: [1]}'
    with pytest.raises(ConfigError, match="tensor 'MISSING' for the output"):
        plan_ensemble(ensemble(PIPELINE, outputs=outputs), composing)


def test_an_optional_ensemble_input_may_feed_only_optional_inputs() -> None:
    config = ensemble(PIPELINE)
    config.input[0].optional = True  # IMAGE feeds pre's RAW, which pre requires
    with pytest.raises(ConfigError, match="optional ensemble input 'IMAGE' feeds input 'RAW'"):
        plan_ensemble(config, composing)
