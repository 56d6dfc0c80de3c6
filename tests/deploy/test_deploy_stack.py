"""The deployment stack, checked without a Docker engine: compose.yaml (and the GPU override),
Prometheus's scrape config, Grafana's provisioning and dashboard, Dockerfile.gpu's requirement
list, and that both images' builder stages copy every file the example generator reads.

How the compose files are validated: by Compose itself, `config -q`, which parses, interpolates,
merges the override and checks every key against the compose-spec schema, all without an engine.
`docker compose` (v2) is used when present, else `docker-compose` (v1, Debian's 1.29 package);
with neither on PATH that one test is skipped and says so. Compose cannot come from PyPI: the
`docker-compose` package is the dead v1 line, pinned to PyYAML < 6, which no longer builds on
Python 3.11, so it cannot join the dev extra. A home-made subset of the schema would check less
than Compose and drift from it, so there is none. The other checks always run: they read the
files with PyYAML and hold them to what the stack needs (pinned images, the mounts Prometheus and
Grafana read, the OTLP settings), and check every dashboard query against the metric names a real
server exports after one inference.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml

from scripts.deploy.gpu_requirements import gpu_requirements
from scripts.gen_models import write_simple
from tests.e2e.e2e_support import ConvoyServer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "scripts" / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "convoy.json"
COMPOSE_FILE_SETS = (("compose.yaml",), ("compose.yaml", "compose.gpu.yaml"))
SERVICES = {"convoy", "prometheus", "grafana", "jaeger"}

# Named by the dashboard's GPU panel before the server exports them: they come with the GPU work.
NOT_YET_EXPORTED = frozenset(
    {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"}
)
# What each panel of the issue needs: throughput, request rate, latency, queue depth, batch sizes
# (distribution and average), failures by reason, CPU and GPU utilization.
DASHBOARD_METRICS = frozenset(
    {
        "nv_inference_count",
        "nv_inference_request_success",
        "convoy_inference_request_duration_us_bucket",
        "nv_inference_pending_request_count",
        "convoy_inference_batch_size_bucket",
        "nv_inference_exec_count",
        "nv_inference_request_failure",
        "nv_cpu_utilization",
        "nv_gpu_utilization",
    }
)

# PromQL words that look like metric names: operators, modifiers and the literals Inf and NaN.
PROMQL_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"offset", "bool", "inf", "nan", "atan2"}
)
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.+?)\s*,\s*\w+\s*\)\s*$")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(REPO_ROOT / "compose.yaml")
    return loaded


def mounts(service: dict[str, Any]) -> dict[str, tuple[Path, str]]:
    """Bind mounts of a service (short syntax): container path -> (host path, mode)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        if source.startswith("./"):
            found[target] = (REPO_ROOT / source, mode[0] if mode else "rw")
    return found


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside label matchers, ranges and
    grouping clauses that are neither function calls nor keywords."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    names = set()
    for found in _IDENTIFIER.finditer(text):
        name, call = found.groups()
        if call is None and name.lower() not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def values_of(node: object, key: str) -> Iterator[object]:
    """Every value stored under `key` anywhere in a JSON document."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key:
                yield value
            else:
                yield from values_of(value, key)
    elif isinstance(node, list):
        for item in node:
            yield from values_of(item, key)


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query of the dashboard: panel targets and the variables' label_values."""
    queries = [expr for expr in values_of(dashboard["panels"], "expr") if isinstance(expr, str)]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        found = _LABEL_VALUES.match(query)
        assert found, f"variable {variable['name']}: only label_values(metric, label) is checked"
        queries.append(found.group(1))
    return queries


def is_exported(name: str, families: dict[str, str]) -> bool:
    """Whether a sample name belongs to an exported family (a histogram's _bucket/_sum/_count)."""
    if name in families:
        return True
    return any(
        name.endswith(suffix) and families.get(name.removesuffix(suffix)) == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    )


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        version = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if version.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.parametrize("files", COMPOSE_FILE_SETS, ids="+".join)
def test_compose_config_validates(files: tuple[str, ...]) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is on PATH to run `config -q`")
    file_args = [arg for name in files for arg in ("-f", str(REPO_ROOT / name))]
    result = subprocess.run(
        [*command, *file_args, "config", "-q"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(files)} is invalid:\n{result.stderr}"


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    for name, service in compose["services"].items():
        if "build" in service:
            continue
        image = service["image"]
        tag = image.rpartition("/")[2].partition(":")[2]
        assert tag and tag != "latest", f"service {name}: image {image} has no pinned tag"
    for dockerfile in ("Dockerfile", "Dockerfile.gpu"):
        text = (REPO_ROOT / dockerfile).read_text(encoding="utf-8")
        for image in re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE):
            tag = image.rpartition("/")[2].partition(":")[2]
            assert tag and tag != "latest", f"{dockerfile}: FROM {image} has no pinned tag"
    gpu_text = (REPO_ROOT / "Dockerfile.gpu").read_text(encoding="utf-8")
    final_base = re.findall(r"^FROM\s+(\S+)\s*$", gpu_text, flags=re.MULTILINE)[-1]
    assert re.fullmatch(r"nvidia/cuda:13\.[\d.]+-\S*runtime-ubuntu[\d.]+", final_base)


def test_convoy_service_serves_the_repository_with_tracing(compose: dict[str, Any]) -> None:
    convoy = compose["services"]["convoy"]
    assert convoy["command"][:2] == ["convoy", "serve"]
    assert convoy["command"][2:4] == ["--model-repository", "/models"]
    assert {"8001:8001", "8002:8002"} <= set(convoy["ports"])
    environment = convoy["environment"]
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317"
    assert environment["OTEL_SERVICE_NAME"] == "convoy"
    assert "4317:4317" in compose["services"]["jaeger"]["ports"]
    assert compose["services"]["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    # Every flag the service passes exists in this server's CLI.
    usage = subprocess.run(
        [sys.executable, "-m", "server", "serve", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for flag in (arg for arg in convoy["command"] if arg.startswith("--")):
        assert flag in usage, f"compose.yaml passes {flag}, which `convoy serve` does not know"


def test_prometheus_scrapes_convoy_every_5s(compose: dict[str, Any]) -> None:
    mounted = mounts(compose["services"]["prometheus"])
    host, mode = mounted["/etc/prometheus/prometheus.yml"]
    assert host == DEPLOY / "prometheus.yml" and mode == "ro"
    config = load_yaml(host)
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == "convoy"]
    assert len(jobs) == 1
    job = jobs[0]
    targets = [target for static in job["static_configs"] for target in static["targets"]]
    assert targets == ["convoy:8002"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scrape_interval", config["global"]["scrape_interval"]) == "5s"


def test_grafana_provisions_the_dashboard_and_its_data_sources(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounted = mounts(grafana)
    for target, (host, mode) in mounted.items():
        assert host.is_dir(), f"grafana mounts {host} at {target}, and it is not a folder"
        assert mode == "ro"
    provisioning = "/etc/grafana/provisioning"
    dashboards_host, _ = mounted[f"{provisioning}/dashboards"]
    datasources_host, _ = mounted[f"{provisioning}/datasources"]

    providers = [p for f in dashboards_host.glob("*.yml") for p in load_yaml(f)["providers"]]
    assert len(providers) == 1
    dashboard_folder = providers[0]["options"]["path"]
    host_folder, _ = mounted[dashboard_folder]
    assert host_folder / "convoy.json" == DASHBOARD and DASHBOARD.is_file()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboard_folder}/convoy.json"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"

    sources = [s for f in datasources_host.glob("*.yml") for s in load_yaml(f)["datasources"]]
    by_uid = {source["uid"]: source for source in sources}
    assert by_uid["prometheus"]["url"] == "http://prometheus:9090"
    assert by_uid["jaeger"]["url"] == "http://jaeger:16686"
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    used = {ref["uid"] for ref in values_of(dashboard, "datasource") if isinstance(ref, dict)}
    assert used and used <= set(by_uid), f"the dashboard uses data sources {used}"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (model) (rate(nv_inference_count{model=~"$model"}[1m]))', {"nv_inference_count"}),
        (
            "histogram_quantile(0.99, sum by (le, model) "
            "(rate(convoy_inference_request_duration_us_bucket[5m] offset 1m)))",
            {"convoy_inference_request_duration_us_bucket"},
        ),
        ("a / on(model) group_left(reason) b > bool 1e-3", {"a", "b"}),
        ("nv_cpu_utilization", {"nv_cpu_utilization"}),
    ],
)
def test_metric_names_parse_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_dashboard_has_every_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    named = set().union(*(metric_names(query) for query in dashboard_queries(dashboard)))
    assert named >= DASHBOARD_METRICS, f"no panel queries {sorted(DASHBOARD_METRICS - named)}"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


@pytest.fixture(scope="module")
def exported_families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Family name -> type from `# TYPE` lines of a real server's /metrics after one inference."""
    repository = tmp_path_factory.mktemp("models")
    write_simple(repository)
    log_path = tmp_path_factory.mktemp("convoy") / "server.log"
    server = ConvoyServer(repository, log_path).start()
    try:
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as c:
            inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
            result = c.infer("simple", inputs)
            assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode("utf-8")
        assert server.stop() == 0, server.log()
    finally:
        server.kill()
    # The one inference reached the per-model histograms, so the scrape saw real samples.
    assert 'convoy_inference_batch_size_bucket{le="1",model="simple",version="1"} 1' in page
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", page, flags=re.MULTILINE))


def test_dashboard_queries_name_only_exported_metrics(exported_families: dict[str, str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = dashboard_queries(dashboard)
    assert queries
    unknown = {}
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric name found in {query!r}"
        missing = {n for n in names if not is_exported(n, exported_families)} - NOT_YET_EXPORTED
        if missing:
            unknown[query] = sorted(missing)
    assert not unknown, f"queries naming metrics the server does not export: {unknown}"


def test_gpu_requirements_leave_out_the_cpu_onnxruntime() -> None:
    requires = [
        "grpcio>=1.81",
        "onnxruntime>=1.20",
        "uvloop>=0.19; sys_platform != 'win32'",
        'onnxruntime-gpu>=1.31; extra == "gpu"',
        'cupy-cuda13x[ctk]>=13.6; extra == "gpu"',
        'pytest>=8; extra == "dev"',
    ]
    assert gpu_requirements(requires) == [
        "grpcio>=1.81",
        "uvloop>=0.19; sys_platform != 'win32'",
        "onnxruntime-gpu>=1.31",
        "cupy-cuda13x[ctk]>=13.6",
    ]
    with pytest.raises(ValueError, match="unsupported marker"):
        gpu_requirements(['x; python_version >= "3.11" and extra == "gpu"'])


def test_gpu_requirements_expand_an_extra_made_of_convoys_own() -> None:
    requires = [
        "numpy>=1.26",
        'onnxruntime-gpu>=1.31; extra == "gpu"',
        'boto3>=1.34; extra == "s3"',
        'gcloud-rest-storage>=9.6; extra == "gcs"',
        'azure-storage-blob>=12.19; extra == "azure"',
        'convoy[azure,gcs,s3]; extra == "cloud"',
        'convoy[cloud]; extra == "all"',
        'convoy[gcs]; extra == "dev"',
        'pytest>=8; extra == "dev"',
    ]
    cloud = ["boto3>=1.34", "gcloud-rest-storage>=9.6", "azure-storage-blob>=12.19"]
    assert gpu_requirements(requires, ["gpu", "cloud"]) == [
        "numpy>=1.26",
        "onnxruntime-gpu>=1.31",
        *cloud,
    ]
    assert gpu_requirements(requires, ["all"]) == ["numpy>=1.26", *cloud]  # two levels down
    assert gpu_requirements(requires) == ["numpy>=1.26", "onnxruntime-gpu>=1.31"]


def _listed_names(*arguments: str) -> set[str]:
    """The distribution names gpu_requirements.py prints for `arguments`, lower-cased."""
    listed = subprocess.run(
        [sys.executable, str(DEPLOY / "gpu_requirements.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    return {re.split(r"[^A-Za-z0-9._-]", line, maxsplit=1)[0].lower() for line in listed}


def test_gpu_requirements_of_the_installed_convoy() -> None:
    # As Dockerfile.gpu runs it, against this environment's convoy metadata.
    names = _listed_names("convoy")
    assert {"onnxruntime-gpu", "cupy-cuda13x", "grpcio", "numpy"} <= names
    assert "onnxruntime" not in names
    assert not {"pytest", "ruff", "tritonclient"} & names

    # As Dockerfile.gpu runs it for its image: the cloud extra's libraries, never convoy itself.
    cloud_names = _listed_names("convoy", "gpu", "cloud")
    assert names | {"boto3", "gcloud-rest-storage", "azure-storage-blob"} <= cloud_names
    assert "convoy" not in cloud_names and "onnxruntime" not in cloud_names


def _builder_copies(dockerfile: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of the builder stage's `COPY scripts...` lines."""
    text = (REPO_ROOT / dockerfile).read_text(encoding="utf-8")
    builder = text.split("\nFROM ", 2)[1]
    copies = []
    for line in builder.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and words[1].startswith("scripts/"):
            *sources, target = words[1:]
            copies += [(source, target) for source in sources]
    return copies


def test_the_builder_stage_copies_all_the_example_generator_reads(tmp_path: Path) -> None:
    # Lay out only what each builder's `COPY scripts...` lines copy, then write the examples
    # there; the two images' builders copy the same, so the (slow) generator runs once.
    copies = _builder_copies("Dockerfile")
    assert copies and _builder_copies("Dockerfile.gpu") == copies
    for source, target in copies:
        destination = tmp_path / target / Path(source).name
        if source.endswith("/"):
            shutil.copytree(REPO_ROOT / source, tmp_path / target, dirs_exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / source, destination)
    result = subprocess.run(
        [sys.executable, "scripts/gen_models.py", str(tmp_path / "models")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "models" / "preprocess" / "1" / "model.py").is_file()
    assert (tmp_path / "models" / "classify" / "config.pbtxt").is_file()
