"""Three Convoy replicas behind a real load balancer, scraped by a real Prometheus: what the
Kubernetes deployment (scripts/deploy/kubernetes) relies on, proven on one machine.

The replicas run as separate hosts on 127.0.0.2-4 (Linux routes all of 127.0.0.0/8 to loopback),
as a cluster gives pods their own IPs. Debian's nginx stands for the ingress: HTTP through
proxy_pass and gRPC through grpc_pass, balanced per request. A small endpoints controller in the
test stands for Kubernetes': it probes each replica's /v2/health/ready as the readiness probe
does and reloads nginx with the ready set, as an ingress follows a Service's endpoints. Debian's
prometheus scrapes the three with the labels a ServiceMonitor adds (namespace, pod, service,
job) and answers the HPA's query, read from the shipped prometheus-adapter rule and KEDA
ScaledObject, Triton's queue-time rule for comparison, and the Grafana dashboard's queries.

Proven, under continuous load from tritonclient (gRPC and HTTP), every answer checked:
- load spreads over the replicas (each replica's statistics);
- a rolling restart (Terminating, preStop, SIGTERM, start again, wait for ready) fails no
  request of clients that never retry, through nginx's default next-upstream rule (error and
  timeout: a refused connect goes elsewhere, a request already sent never does), in process
  and onto and from 2 front-end workers per replica;
- a SIGKILLed replica leaves the rotation; the requests it held fail (bounded by the clients'
  one request each) and none after it is out;
- convoy_load_ratio rises with offered load and falls when it stops, through the adapter's query,
  with one busy model and three idle ones per replica, where Triton's rule reads low.
Everything binds loopback; every process is the test's own and is stopped at the end. The
figures are printed (pytest -s) for the README.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException

from scripts import models
from scripts.drain_check import child_pids
from scripts.gen_models import write_simple
from tests.deploy.test_deploy_stack import DASHBOARD, dashboard_queries
from tests.e2e.e2e_support import REPO_ROOT, serve_command

KUBERNETES = REPO_ROOT / "scripts" / "deploy" / "kubernetes"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NAMESPACE = "convoy"
SERVICE = "convoy-metrics"  # the ServiceMonitor's job label is the Service's name
BUSY_SLEEP_S = 0.05  # one execution of the busy model
BUSY_CAPACITY = 4  # one instance x max_batch_size 4
IDLE_MODELS = ("simple", "idle_a", "idle_b")
PROBE_PERIOD_S = 0.1  # the test's readiness probe (Kubernetes: periodSeconds, here shortened)
FAILURE_THRESHOLD = 2  # the readiness probe's failureThreshold, as in the Deployment
PRESTOP_S = 0.5  # the Deployment's preStop sleep (10 s), shortened like the probe
SCRAPE_S = 1
RETRIES = 5  # a retrying client's further tries per request (the load ratio's tests)
THINK_S = 0.005  # between two requests of a client of the fast model

BUSY = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({BUSY_SLEEP_S})
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)
            ])
            for r in requests
        ]
"""


def _binary(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str, timeout_s: float = 1.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return 0, b""


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> float:
    """Seconds until the condition held; fails past the timeout."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def _repository(root: Path) -> Path:
    repo = root / "models"
    models.write_python_model(
        repo,
        "busy",
        BUSY,
        'name: "busy"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "dynamic_batching { }\n",
    )
    write_simple(repo)
    for name in IDLE_MODELS[1:]:
        config = (repo / "simple" / "config.pbtxt").read_text().replace('"simple"', f'"{name}"')
        models.write_model(repo, name, models.simple(), config)
    return repo


@dataclass
class Replica:
    """One `convoy serve` on its own loopback address, as one pod."""

    pod: str
    address: str
    repository: Path
    log_path: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    flags: tuple[str, ...] = ()  # beyond the addresses and ports

    def __post_init__(self) -> None:
        self.http_port, self.grpc_port, self.metrics_port = (
            _free_port(self.address) for _ in range(3)
        )

    def start(self) -> None:
        command = serve_command(
            self.repository,
            *("--host", self.address, "--http-port", str(self.http_port)),
            *("--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port)),
            *("--exit-timeout-secs", "10"),
            *self.flags,
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # its Python model workers go with it
            )

    def ready(self) -> bool:
        return _get(f"http://{self.address}:{self.http_port}/v2/health/ready", 1.0)[0] == 200

    def wait_ready(self, timeout_s: float = 60.0) -> float:
        def ready() -> bool:
            assert self.process is not None and self.process.poll() is None, self.log()
            return self.ready()

        return _wait_for(ready, f"{self.pod} ready", timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL its whole process group (the server and its model workers)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def inference_counts(self) -> dict[str, int]:
        client = grpcclient.InferenceServerClient(f"{self.address}:{self.grpc_port}")
        try:
            stats = client.get_inference_statistics(as_json=True)["model_stats"]
        finally:
            client.close()
        return {s["name"]: int(s.get("inference_count", 0)) for s in stats}


class Balancer:
    """nginx in front of the replicas, its upstreams kept to the ready ones by `follow()`."""

    def __init__(self, root: Path, replicas: list[Replica]) -> None:
        self._root = root
        self._replicas = replicas
        self.http_port = _free_port("127.0.0.1")
        self.grpc_port = _free_port("127.0.0.1")
        self._process: subprocess.Popen[bytes] | None = None
        self._in_rotation = {r.pod for r in replicas}
        self._terminating: set[str] = set()  # pods being deleted: out whatever they answer
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="endpoints", daemon=True)
        self.reloads: list[tuple[float, frozenset[str]]] = []  # (monotonic s, ready pods)

    def start(self, nginx: str) -> None:
        for folder in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self._root / folder).mkdir(parents=True, exist_ok=True)
        self._write(self.in_rotation())
        self._process = subprocess.Popen(
            [nginx, "-p", str(self._root), "-c", str(self._root / "nginx.conf")],
            stdout=subprocess.DEVNULL,
            stderr=(self._root / "stderr.log").open("wb"),
            start_new_session=True,
        )
        _wait_for(
            lambda: _get(f"http://127.0.0.1:{self.http_port}/v2/health/ready")[0] == 200,
            "nginx",
        )
        self._thread.start()

    def in_rotation(self) -> set[str]:
        with self._lock:
            return set(self._in_rotation)

    def terminating(self, pod: str, deleted: bool = True) -> None:
        """A pod turns Terminating (its endpoints go at once), or its successor replaces it."""
        with self._lock:
            if deleted:
                self._terminating.add(pod)
            else:
                self._terminating.discard(pod)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()

    def error_log(self) -> str:
        return (self._root / "error.log").read_text(errors="replace")

    def _follow(self) -> None:
        # The endpoints controller: a replica leaves the rotation after FAILURE_THRESHOLD failed
        # readiness probes in a row (a slow answer on a busy machine is not a drain), and comes
        # back after one that passes, as the Deployment's readinessProbe. The rotation changes
        # once nginx has reloaded: its old workers route nothing new (an ingress's update has
        # reached it).
        failures = dict.fromkeys((r.pod for r in self._replicas), 0)
        while not self._stop.wait(PROBE_PERIOD_S):
            for replica in self._replicas:
                failures[replica.pod] = 0 if replica.ready() else failures[replica.pod] + 1
            ready = {pod for pod, failed in failures.items() if failed < FAILURE_THRESHOLD}
            with self._lock:
                ready -= self._terminating
                if ready == self._in_rotation:
                    continue
            self._write(ready)
            assert self._process is not None
            old_workers = self._workers()
            self._process.send_signal(signal.SIGHUP)  # nginx reloads, old workers drain
            _wait_for(
                lambda old=old_workers: self._workers().isdisjoint(old), "nginx's reload", 10.0
            )
            with self._lock:
                self._in_rotation = ready
            self.reloads.append((time.monotonic(), frozenset(ready)))

    def _workers(self) -> set[int]:
        """nginx's workers taking new requests (not those finishing theirs after a reload)."""
        assert self._process is not None
        found = set()
        for child in child_pids(self._process.pid):
            with contextlib.suppress(OSError):
                title = Path(f"/proc/{child}/cmdline").read_bytes()
                if title.rstrip(b"\0 ") == b"nginx: worker process":
                    found.add(child)
        return found

    def _write(self, ready: set[str]) -> None:
        def servers(port_of: Callable[[Replica], int]) -> str:
            return "\n".join(
                f"    server {r.address}:{port_of(r)} max_fails=1 fail_timeout=2s"
                f"{'' if r.pod in ready else ' down'};"
                for r in self._replicas
            )

        user = "user root;" if os.geteuid() == 0 else ""
        temp = "\n".join(
            f"  {name}_temp_path {self._root / folder};"
            for name, folder in (
                ("client_body", "client_body"),
                ("proxy", "proxy"),
                ("fastcgi", "fastcgi"),
                ("uwsgi", "uwsgi"),
                ("scgi", "scgi"),
            )
        )
        config = f"""
{user}
daemon off;
worker_processes 1;
pid {self._root / "nginx.pid"};
error_log {self._root / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp}
  keepalive_requests 1000000;
  upstream convoy_http {{
{servers(lambda r: r.http_port)}
    keepalive 32;
  }}
  upstream convoy_grpc {{
{servers(lambda r: r.grpc_port)}
    keepalive 32;
  }}
  server {{
    listen 127.0.0.1:{self.http_port};
    # This stand-in reloads nginx when the endpoints change (ingress-nginx updates its
    # upstreams without one), and a reload closes idle client keep-alive connections, racing a
    # request a client is sending on one: a race between client and balancer, not the replica.
    # So HTTP clients open a connection per request here; nginx keeps its upstream ones.
    keepalive_timeout 0;
    location / {{
      proxy_pass http://convoy_http;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream error timeout;
    }}
  }}
  server {{
    listen 127.0.0.1:{self.grpc_port} http2;
    location / {{
      grpc_pass grpc://convoy_grpc;
      grpc_next_upstream error timeout;
    }}
  }}
}}
"""
        (self._root / "nginx.conf").write_text(config, encoding="utf-8")


class Prometheus:
    """Debian's prometheus scraping the replicas every second with a ServiceMonitor's labels."""

    def __init__(self, root: Path, replicas: list[Replica]) -> None:
        self._root = root
        self.port = _free_port("127.0.0.1")
        targets = [
            {
                "targets": [f"{r.address}:{r.metrics_port}"],
                "labels": {"namespace": NAMESPACE, "pod": r.pod, "service": SERVICE},
            }
            for r in replicas
        ]
        config = {
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
            "scrape_configs": [{"job_name": SERVICE, "static_configs": targets}],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, binary: str) -> None:
        self._process = subprocess.Popen(
            [
                binary,
                f"--config.file={self._root / 'prometheus.yml'}",
                f"--storage.tsdb.path={self._root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self._root / "prometheus.log").open("wb"),
            start_new_session=True,
        )
        _wait_for(lambda: _get(f"http://127.0.0.1:{self.port}/-/ready")[0] == 200, "prometheus")

    def query(self, expression: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """The expression's instant vector, evaluated now or at the Unix time `at`."""
        parameters = {"query": expression} if at is None else {"query": expression, "time": at}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(parameters)
        status, body = _get(url, 5.0)
        assert status == 200, f"{expression}: HTTP {status}"
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def by_pod(self, expression: str, at: float | None = None) -> dict[str, float]:
        return {labels["pod"]: value for labels, value in self.query(expression, at)}

    def stop(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGTERM)
            self._process.wait(20)


@dataclass
class Tally:
    """Outcomes of requests under load (thread-safe)."""

    counts: Counter[str] = field(default_factory=Counter)
    errors: list[tuple[float, str]] = field(default_factory=list)  # (monotonic s, what)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, error: str | None = None) -> None:
        with self.lock:
            self.counts[key] += 1
            if error is not None:
                self.errors.append((time.monotonic(), error))

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def errors_since(self, start_s: float) -> list[str]:
        with self.lock:
            return [what for at, what in self.errors if at >= start_s]


def _retryable(error: Exception) -> str | None:
    """What a retryable error was (UNAVAILABLE, or a proxy's 502/503), or None."""
    if isinstance(error, InferenceServerException):
        status = str(error.status())
        if status in ("StatusCode.UNAVAILABLE", "502", "503"):
            return f"{status}: {error.message()[:60]}"
        return None
    if isinstance(error, OSError | http.client.HTTPException):
        # An idle keep-alive connection that a reloaded nginx worker closed: nothing was served.
        return f"{type(error).__name__}"
    return None


def _call(tally: Tally, send: Callable[[], bool], retries: int) -> None:
    """One request, tried again up to `retries` times on a retryable error; `send` returns
    whether the answer was right."""
    for _ in range(retries + 1):
        try:
            right = send()
        except Exception as error:
            kind = _retryable(error)
            if kind is None or not retries:
                tally.add("failed", f"{type(error).__name__}: {error}")
                return
            tally.add("retried", kind)
            time.sleep(0.02)
            continue
        tally.add("served" if right else "wrong", None if right else "wrong answer")
        return
    tally.add("failed", "out of retries")


class Load:
    """Client threads sending checked requests through the balancer until stopped."""

    def __init__(
        self, balancer: Balancer, grpc_busy: int, grpc_simple: int, http: int, retries: int = 0
    ) -> None:
        self.tally = Tally()
        self._retries = retries
        self._stop = threading.Event()
        grpc_url = f"127.0.0.1:{balancer.grpc_port}"
        http_url = f"127.0.0.1:{balancer.http_port}"
        plan = [("busy", grpc_url)] * grpc_busy + [("simple", grpc_url)] * grpc_simple
        plan += [("http", http_url)] * http
        self._threads = [
            threading.Thread(target=self._run, args=(kind, url, seed), daemon=True)
            for seed, (kind, url) in enumerate(plan)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> Counter[str]:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        return self.tally.snapshot()

    def _run(self, kind: str, url: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        if kind == "http":
            client: Any = httpclient.InferenceServerClient(url, network_timeout=30)
        else:
            client = grpcclient.InferenceServerClient(url)
        module: Any = httpclient if kind == "http" else grpcclient
        try:
            while not self._stop.is_set():
                if kind == "busy":
                    _call(self.tally, lambda: self._busy(client, rng), self._retries)
                else:
                    _call(self.tally, lambda: self._simple(client, module, rng), self._retries)
                    # A pause between fast requests leaves the 2 cores to the restarts.
                    self._stop.wait(THINK_S)
        finally:
            client.close()

    @staticmethod
    def _busy(client: Any, rng: np.random.Generator) -> bool:
        x = rng.random((1, 4), dtype=np.float32)
        tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer("busy", [tensor], client_timeout=20)
        return bool(np.array_equal(result.as_numpy("Y"), x + 1))

    @staticmethod
    def _simple(client: Any, module: Any, rng: np.random.Generator) -> bool:
        a, b = (rng.random((1, 16), dtype=np.float32) for _ in range(2))
        inputs = []
        for name, value in (("INPUT0", a), ("INPUT1", b)):
            tensor = module.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        result = client.infer("simple", inputs)
        return bool(
            np.array_equal(result.as_numpy("OUTPUT0"), a + b)
            and np.array_equal(result.as_numpy("OUTPUT1"), a - b)
        )


@dataclass
class Stack:
    replicas: list[Replica]
    balancer: Balancer
    prometheus: Prometheus
    figures: dict[str, Any]

    def pods_selector(self) -> str:
        pods = "|".join(r.pod for r in self.replicas)
        return f'namespace="{NAMESPACE}",pod=~"{pods}"'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    nginx, prometheus = _binary("nginx"), _binary("prometheus")
    if nginx is None or prometheus is None:
        pytest.skip("needs Debian's nginx and prometheus (.ci/run installs them when missing)")
    for address in ADDRESSES:
        try:
            _free_port(address)
        except OSError as error:
            pytest.skip(f"cannot bind {address} ({error}): no 127.0.0.0/8 loopback here")
    root = tmp_path_factory.mktemp("replicas")
    repository = _repository(root)
    replicas = [
        Replica(f"convoy-{i}", address, repository, root / f"convoy-{i}.log")
        for i, address in enumerate(ADDRESSES)
    ]
    balancer = Balancer(root / "nginx", replicas)
    scraper = Prometheus(root, replicas)
    figures: dict[str, Any] = {}
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        balancer.start(nginx)
        scraper.start(prometheus)
        yield Stack(replicas, balancer, scraper, figures)
    finally:
        balancer.stop()
        scraper.stop()
        for replica in replicas:
            replica.kill()
        print(f"\nreplica figures: {json.dumps(figures, indent=1, sort_keys=True)}")


def _adapter_query(stack: Stack) -> str:
    """The shipped prometheus-adapter rule's metricsQuery, as the adapter expands it for a pods
    query over the three replicas."""
    config = yaml.safe_load(
        (KUBERNETES / "prometheus-adapter" / "adapter-config.yaml").read_text(encoding="utf-8")
    )
    (rule,) = yaml.safe_load(config["data"]["config.yaml"])["rules"]
    series = rule["seriesQuery"].split("{", 1)[0]
    return (
        rule["metricsQuery"]
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", stack.pods_selector())
        .replace("<<.GroupBy>>", "pod")
    )


def _keda_query() -> str:
    scaled = yaml.safe_load(
        (KUBERNETES / "components" / "keda" / "scaledobject.yaml").read_text(encoding="utf-8")
    )
    query: str = scaled["spec"]["triggers"][0]["metadata"]["query"]
    return query


def _triton_queue_rule(stack: Stack) -> str:
    """Triton's k8s-onprem prometheus-adapter metricsQuery (avg_time_queue_us), expanded."""
    matchers = stack.pods_selector()
    return (
        f"avg(delta(nv_inference_queue_duration_us{{{matchers}}}[30s])"
        f"/(1+delta(nv_inference_request_success{{{matchers}}}[30s]))) by (pod)"
    )


def _busy_queue_us(stack: Stack) -> str:
    """The busy model's own mean queue time per request over the same window."""
    matchers = stack.pods_selector() + ',model="busy"'
    return (
        f"sum by (pod) (delta(nv_inference_queue_duration_us{{{matchers}}}[30s]))"
        f" / clamp_min(sum by (pod) (delta(nv_inference_request_success{{{matchers}}}[30s])), 1)"
    )


def test_load_spreads_over_the_replicas(stack: Stack) -> None:
    before = [r.inference_counts() for r in stack.replicas]
    load = Load(stack.balancer, grpc_busy=6, grpc_simple=3, http=3)
    time.sleep(4)
    counts = load.stop()
    after = [r.inference_counts() for r in stack.replicas]
    assert counts["failed"] == counts["wrong"] == counts["retried"] == 0, counts
    served = [sum(after[i][m] - before[i].get(m, 0) for m in after[i]) for i in range(len(after))]
    total = sum(served)
    assert total >= counts["served"] > 0  # the statistics count every answer
    shares = [count / total for count in served]
    stack.figures["spread"] = {
        "requests": counts["served"],
        "shares": [round(s, 3) for s in shares],
    }
    for replica, share in zip(stack.replicas, shares, strict=True):
        assert 0.2 <= share <= 0.47, f"{replica.pod} served {share:.0%} of {total}"


def test_load_ratio_rises_and_falls_where_triton_queue_time_reads_low(stack: Stack) -> None:
    hpa = _adapter_query(stack)
    keda = _keda_query()
    pods = {r.pod for r in stack.replicas}
    _wait_for(lambda: set(stack.prometheus.by_pod(hpa)) == pods, "every pod's load ratio")
    _wait_for(lambda: all(v == 0 for v in stack.prometheus.by_pod(hpa).values()), "an idle start")

    def readings(seconds: float) -> list[tuple[dict[str, float], float]]:
        """(the HPA's per-pod values, KEDA's sum), both evaluated at one instant."""
        found = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            at = time.time()
            ((_, keda_sum),) = stack.prometheus.query(keda, at)
            found.append((stack.prometheus.by_pod(hpa, at), keda_sum))
            time.sleep(SCRAPE_S)
        return found

    every_reading: list[tuple[dict[str, float], float]] = []

    levels: dict[str, dict[str, float]] = {}
    for name, clients in (("low", 3), ("high", 24)):
        load = Load(stack.balancer, grpc_busy=clients, grpc_simple=0, http=0, retries=RETRIES)
        time.sleep(2)  # the queues fill and Prometheus scrapes
        seen = readings(3)
        every_reading += seen
        if name == "high":
            triton = stack.prometheus.by_pod(_triton_queue_rule(stack))
            busy_queue = stack.prometheus.by_pod(_busy_queue_us(stack))
            keda_high = float(np.median([keda_sum for _, keda_sum in seen]))
            pooled = stack.prometheus.by_pod(
                f"sum by (pod) (convoy_inference_inflight_requests{{{stack.pods_selector()}}})"
                f" / sum by (pod) (convoy_inference_capacity{{{stack.pods_selector()}}})"
            )
        counts = load.stop()
        assert counts["failed"] == counts["wrong"] == 0, counts
        per_pod = {pod: float(np.median([r[pod] for r, _ in seen if pod in r])) for pod in pods}
        levels[name] = per_pod
        stack.figures[f"load_ratio_{name}"] = {
            "clients": clients,
            "per_pod_median": {p: round(v, 2) for p, v in sorted(per_pod.items())},
        }
    fall_s = _wait_for(
        lambda: all(v == 0 for v in stack.prometheus.by_pod(hpa).values()), "the ratio at 0"
    )
    average = {name: float(np.mean(list(level.values()))) for name, level in levels.items()}
    # Three clients over three replicas: about one request in flight per replica (1/4 of the
    # busy model's room); 24: about eight, twice what its instance runs at once.
    assert 0.1 <= average["low"] < 0.7 < 1.2 <= average["high"]
    # KEDA's query sums the pods: at any one instant, the HPA's per-pod values added up.
    for by_pod, keda_sum in every_reading:
        assert keda_sum == pytest.approx(sum(by_pod.values())), every_reading
    triton_mean = float(np.mean(list(triton.values())))
    busy_mean = float(np.mean(list(busy_queue.values())))
    pooled_mean = float(np.mean(list(pooled.values())))
    # Four models per replica, one busy: Triton's rule averages the busy model's queue time
    # with three zeros; the pooled ratio divides by the idle models' room too.
    assert triton_mean < 0.5 * busy_mean
    assert pooled_mean < 0.7 < average["high"]
    stack.figures["load_ratio_fall_s"] = round(fall_s, 1)
    stack.figures["hpa_desired_replicas_at_high"] = int(np.ceil(3 * average["high"] / 0.7))
    stack.figures["keda_sum_at_high"] = round(keda_high, 2)
    stack.figures["pooled_ratio_at_high"] = round(pooled_mean, 2)
    stack.figures["triton_rule_us_at_high"] = round(triton_mean)
    stack.figures["busy_model_queue_us_at_high"] = round(busy_mean)


def test_the_dashboard_queries_answer_from_the_replicas(stack: Stack) -> None:
    """The Grafana dashboard's PromQL, run by Prometheus over the last minute's traffic (the
    `$model` selector at All); only the GPU panel is empty on a CPU machine."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    empty = []
    for query in dashboard_queries(dashboard):
        expression = query.replace("$model", ".*")
        if not stack.prometheus.query(expression) and "nv_gpu_" not in expression:
            empty.append(expression)
    assert not empty, f"no data from the replicas for: {empty}"


def _roll(stack: Stack, flags: tuple[str, ...], name: str) -> None:
    """Restart the replicas one by one under load (onto `flags`), as a Deployment's rollout
    does; clients never retry, so any failure is one."""
    load = Load(stack.balancer, grpc_busy=6, grpc_simple=2, http=2)
    time.sleep(1)
    steps = []
    for replica in stack.replicas:
        before = load.tally.snapshot()
        # As the Deployment's pods go: Terminating (the endpoints drop it), preStop, SIGTERM.
        stack.balancer.terminating(replica.pod)
        _wait_for(lambda r=replica: r.pod not in stack.balancer.in_rotation(), "out of rotation")
        time.sleep(PRESTOP_S)
        start = time.monotonic()
        code = replica.terminate()
        drained_s = time.monotonic() - start
        assert code == 0, replica.log()
        replica.flags = flags
        replica.start()
        stack.balancer.terminating(replica.pod, deleted=False)
        ready_s = replica.wait_ready()
        _wait_for(lambda r=replica: r.pod in stack.balancer.in_rotation(), "back in rotation")
        after = load.tally.snapshot()
        steps.append(
            {
                "pod": replica.pod,
                "drain_s": round(drained_s, 2),
                "restart_to_ready_s": round(ready_s, 2),
                "requests": after["served"] - before["served"],
                "failed": after["failed"] - before["failed"],
            }
        )
    time.sleep(1)
    counts = load.stop()
    errors = load.tally.errors_since(0)
    stack.figures[name] = {
        "steps": steps,
        "totals": dict(counts),
        "errors": sorted(Counter(errors).items()),
    }
    assert counts["served"] > 0
    assert counts["failed"] == 0 and counts["wrong"] == 0, errors[:10]


def test_a_rolling_restart_under_load_fails_no_request(stack: Stack) -> None:
    """In-process replicas drained, each restarted with 2 front-end workers."""
    _roll(stack, ("--frontend-workers", "2"), "rollout")


def test_a_rolling_restart_of_front_end_workers_fails_no_request(stack: Stack) -> None:
    """Replicas with 2 front-end workers drained, each restarted in process."""
    _roll(stack, (), "rollout_from_workers")


def test_a_killed_replica_leaves_the_rotation(stack: Stack) -> None:
    victim = stack.replicas[1]
    load = Load(stack.balancer, grpc_busy=6, grpc_simple=2, http=2)
    time.sleep(1)
    before = load.tally.snapshot()
    killed_at = time.monotonic()
    victim.kill()
    _wait_for(lambda: victim.pod not in stack.balancer.in_rotation(), "out of rotation")
    out_s = time.monotonic() - killed_at
    quiet_from = time.monotonic() + 0.5  # the reload's old nginx worker finishes meanwhile
    time.sleep(2.5)
    during = load.tally.snapshot()
    late_errors = load.tally.errors_since(quiet_from)
    counts = load.stop()  # the last test: the victim stays down until the teardown
    errors = load.tally.errors_since(killed_at)
    failed = during["failed"] - before["failed"]
    stack.figures["sigkill"] = {
        "out_of_rotation_s": round(out_s, 2),
        "failed": failed,
        "requests_meanwhile": during["served"] - before["served"],
        "errors": sorted(Counter(errors).items()),
    }
    assert counts["wrong"] == 0, errors[:10]
    # At most the requests it held: each of the 10 clients has one request at a time, and a
    # refused connect goes to another replica.
    assert failed <= 10, errors
    assert not late_errors, late_errors
