"""The documentation's generated reference pages are what scripts/gen_docs.py makes of the code
now: a metric family or a ModelConfig field added, renamed or changed without regenerating them
fails here."""

from proto import model_config_pb2 as mc
from scripts import gen_docs


def test_the_metrics_reference_is_up_to_date() -> None:
    page = gen_docs.METRICS_PAGE.read_text(encoding="utf-8")
    assert gen_docs.metrics_page() == page, "run: python scripts/gen_docs.py"


def test_the_config_reference_is_up_to_date() -> None:
    page = gen_docs.CONFIG_PAGE.read_text(encoding="utf-8")
    assert gen_docs.config_page() == page, "run: python scripts/gen_docs.py"


def test_the_metrics_reference_has_triton_s_families_and_convoy_s() -> None:
    page = gen_docs.METRICS_PAGE.read_text(encoding="utf-8")
    for family in (
        "nv_inference_request_success",  # per model version
        "nv_cache_num_hits_per_model",  # with a response cache
        "nv_inference_queue_summary_us",  # with summaries
        "convoy_rate_limiter_waits",  # with the rate limiter
        "nv_gpu_utilization",  # with a GPU
        "convoy_load_ratio",
    ):
        assert f"| `{family}` |" in page


def test_the_config_reference_has_a_row_per_model_config_field() -> None:
    rows = [r for r in gen_docs.config_page().splitlines() if r.startswith("| `")]
    assert len(rows) == len(mc.ModelConfig.DESCRIPTOR.fields)
