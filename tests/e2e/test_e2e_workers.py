"""Front-end worker processes (`--frontend-workers`): every protocol serves through them (what each
`Core` call does across the boundary is tests/server/test_workers_boundary.py's), a killed worker
is replaced while clients of the other one see no failure, SIGTERM under load leaves no process
behind, a dead core takes its workers with it, a region registered through one worker serves
requests through another, statistics count every request whichever worker took it, and a second
server is refused a port the first holds (whether either shares ports among its own processes).

Which worker a client's connection reached is read from the kernel: each worker's socket inodes
(/proc/<pid>/fd) against the connections of /proc/net/tcp."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from e2e_support import (
    REPO_ROOT,
    SIMPLE_BYTES,
    ConvoyServer,
    serve_command,
    shm_inputs,
    simple_inputs,
)
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from proto import grpc_service_pb2 as pb
from scripts import models
from scripts.drain_check import child_pids

WORKERS = ("--frontend-workers", "2")
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture
def server(subset_repository, tmp_path: Path) -> Iterator[ConvoyServer]:
    """A server of `simple` with two front-end workers (killed at the end if still running)."""
    started = ConvoyServer(subset_repository("simple"), tmp_path / "server.log", *WORKERS)
    try:
        yield started.start()
    finally:
        started.kill()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while being read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def _wait_gone(pids: set[int], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), f"still running: {pids}"


def _workers(server: ConvoyServer, count: int = 2, timeout_s: float = 30.0) -> set[int]:
    """The server's worker processes, once `count` of them serve."""
    assert server.process is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = {pid for pid in child_pids(server.process.pid) if _alive(pid)}
        if len(children) == count and all(_listening(pid, server.grpc_port) for pid in children):
            return children
        time.sleep(0.1)
    pytest.fail(f"the server did not have {count} serving workers; log:\n{server.log()}")


def _tcp() -> list[tuple[int, int, int]]:
    """(local port, remote port, inode) of every TCP socket (gRPC listens on IPv6 sockets that
    take IPv4 too)."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], int(fields[9])
            rows.append((int(local.rsplit(":")[1], 16), int(remote.rsplit(":")[1], 16), inode))
    return rows


def _inodes(pid: int) -> set[int]:
    found = set()
    with contextlib.suppress(FileNotFoundError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    found.add(int(target[8:-1]))
    return found


def _listening(pid: int, port: int) -> bool:
    inodes = _inodes(pid)
    return any(local == port and remote == 0 and inode in inodes for local, remote, inode in _tcp())


def _worker_of_clients(server_port: int, workers: set[int]) -> dict[int, int]:
    """Client port -> the worker holding the other end of that connection."""
    owners = {inode: pid for pid in workers for inode in _inodes(pid)}
    return {
        remote: owners[inode]
        for local, remote, inode in _tcp()
        if local == server_port and remote and inode in owners
    }


def _our_ports(server_port: int) -> set[int]:
    ours = _inodes(os.getpid())
    return {local for local, remote, inode in _tcp() if remote == server_port and inode in ours}


Client = tuple[grpcclient.InferenceServerClient, int]  # a client and its connection's local port


@contextlib.contextmanager
def _clients(
    server: ConvoyServer, count: int, spread_over: set[int] | None = None
) -> Iterator[list[Client]]:
    """`count` clients, each on its own connection; with `spread_over` (worker pids), more until
    each of those workers holds one (the kernel hashes a connection to a worker, so a few clients
    may all reach the same one)."""
    opened: list[Client] = []

    def enough() -> bool:
        if len(opened) < count:
            return False
        if spread_over is None:
            return True
        owners = _worker_of_clients(server.grpc_port, spread_over)
        return {owners[port] for _, port in opened} == spread_over

    try:
        while not enough():
            assert len(opened) < count + 64, "the kernel gave every connection to one worker"
            before = _our_ports(server.grpc_port)
            # gRPC shares one connection among a process's channels to one address unless told.
            client = grpcclient.InferenceServerClient(server.url, channel_args=OWN_CONNECTION)
            try:
                client.infer("simple", simple_inputs(1)[0])  # opens the connection
            except BaseException:
                client.close()
                raise
            (port,) = _our_ports(server.grpc_port) - before
            opened.append((client, port))
        yield opened
    finally:
        for client, _ in opened:
            client.close()


def _load(
    clients: list[Client], stop: threading.Event, outcomes: dict[int, list[str]]
) -> list[threading.Thread]:
    """One thread per client sending `simple` requests until `stop`; each answer checked."""

    def run(client: grpcclient.InferenceServerClient, port: int) -> None:
        seed = port
        while not stop.is_set():
            inputs, a, b = simple_inputs(1, seed=seed)
            seed += 1
            try:
                result = client.infer("simple", inputs, client_timeout=10)
                ok = np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                outcomes[port].append("ok" if ok else "WRONG")
            except InferenceServerException as exc:
                outcomes[port].append(str(exc.status()))

    threads = [threading.Thread(target=run, args=entry, daemon=True) for entry in clients]
    for thread in threads:
        thread.start()
    return threads


def test_a_killed_worker_is_replaced_and_clients_of_the_other_see_no_failure(
    server: ConvoyServer,
) -> None:
    workers = _workers(server)
    with _clients(server, 12, spread_over=workers) as clients:
        owners = _worker_of_clients(server.grpc_port, workers)
        by_worker = {pid: [port for _, port in clients if owners[port] == pid] for pid in workers}
        victim = max(by_worker, key=lambda pid: len(by_worker[pid]))
        survivors = [port for _, port in clients if owners[port] != victim]
        outcomes: dict[int, list[str]] = {port: [] for _, port in clients}
        stop = threading.Event()
        threads = _load(clients, stop, outcomes)
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        _wait_gone({victim})
        replaced = _workers(server) - workers
        time.sleep(1.0)
        stop.set()
        for thread in threads:
            thread.join(15)
    assert len(replaced) == 1, "the killed worker was not replaced"
    for port in survivors:
        assert outcomes[port] and set(outcomes[port]) == {"ok"}, outcomes[port]
    for port in by_worker[victim]:
        # Its requests in flight at the kill fail as UNAVAILABLE; none is answered wrongly.
        assert set(outcomes[port]) <= {"ok", "StatusCode.UNAVAILABLE"}, outcomes[port]
    assert server.stop() == 0


def test_a_worker_whose_loop_stops_answering_is_killed_and_replaced(
    subset_repository, tmp_path: Path
) -> None:
    """A worker stopped (SIGSTOP; a deadlock looks the same to the core) holds its share of the
    ports' new connections, and of the liveness probes, until the core's heartbeat goes
    unanswered for --frontend-worker-timeout-secs: then it is killed and replaced, and every new
    connection is served again. Before, it stayed, and half of the new connections hung."""
    flags = (*WORKERS, "--frontend-worker-timeout-secs", "2")
    server = ConvoyServer(subset_repository("simple"), tmp_path / "server.log", *flags)
    try:
        server.start()
        workers = _workers(server)
        victim = min(workers)
        os.kill(victim, signal.SIGSTOP)
        _wait_gone({victim}, timeout_s=15)
        assert len(_workers(server) - workers) == 1, server.log()
        assert "has not answered for" in server.log()
        for _ in range(12):  # fresh connections, dealt over both workers
            channel = grpcclient.InferenceServerClient(server.url, channel_args=OWN_CONNECTION)
            with contextlib.closing(channel) as client:
                inputs, a, b = simple_inputs(1)
                result = client.infer("simple", inputs, client_timeout=5)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        assert server.stop() == 0
    finally:
        server.kill()


def test_sigterm_under_load_leaves_no_process_behind(server: ConvoyServer) -> None:
    workers = _workers(server)
    with _clients(server, 6) as clients:
        outcomes: dict[int, list[str]] = {port: [] for _, port in clients}
        stop = threading.Event()
        threads = _load(clients, stop, outcomes)
        time.sleep(1.0)
        server.send_signal(signal.SIGTERM)
        code = server.wait()
        stop.set()
        for thread in threads:
            thread.join(15)
    assert code == 0, server.log()
    assert not any(_alive(pid) for pid in workers)
    answers = [outcome for port in outcomes for outcome in outcomes[port]]
    assert answers.count("ok") > 0 and "WRONG" not in answers
    # Refused while draining, or on its way when the connections closed: UNAVAILABLE, never
    # CANCELLED (a call grpc's own shutdown turns away).
    unexpected = set(answers) - {"ok", "StatusCode.UNAVAILABLE"}
    assert not unexpected, (unexpected, answers.count("ok"), server.log())


def test_workers_exit_when_the_core_dies(server: ConvoyServer) -> None:
    workers = _workers(server)
    server.kill()  # SIGKILL: the core cannot stop them
    _wait_gone(workers)


def test_a_region_registered_through_one_worker_serves_another(server: ConvoyServer) -> None:
    workers = _workers(server)
    _, a, b = simple_inputs(1)
    handle = shm.create_shared_memory_region("in_workers", "/convoy_in_workers", 2 * SIMPLE_BYTES)
    try:
        shm.set_shared_memory_region(handle, [a, b])
        with _clients(server, 2, spread_over=workers) as clients:
            owners = _worker_of_clients(server.grpc_port, workers)
            first = next(entry for entry in clients if owners[entry[1]] == min(workers))
            second = next(entry for entry in clients if owners[entry[1]] == max(workers))
            first[0].register_system_shared_memory(
                "in_workers", "/convoy_in_workers", 2 * SIMPLE_BYTES
            )
            result = second[0].infer("simple", shm_inputs(grpcclient, "in_workers"))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            status = second[0].get_system_shared_memory_status()
            assert list(status.regions) == ["in_workers"]
            second[0].unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(handle)


def test_every_protocol_serves_through_the_workers(server: ConvoyServer) -> None:
    """Unary and streaming gRPC and HTTP, with the real clients: the boundary's own tests cover
    each `Core` call; this is the processes wired together."""
    _workers(server)
    inputs, a, b = simple_inputs(2)
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT1"), a - b)
        answers: queue.Queue[tuple[object, object]] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer("simple", inputs)
        result, error = answers.get(timeout=10)
        client.stop_stream()
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)  # type: ignore[attr-defined]
    http_url = f"127.0.0.1:{server.http_port}"
    with contextlib.closing(httpclient.InferenceServerClient(http_url)) as web:
        http_inputs = []
        for name, array in (("INPUT0", a), ("INPUT1", b)):
            http_inputs.append(httpclient.InferInput(name, list(array.shape), "FP32"))
            http_inputs[-1].set_data_from_numpy(array)
        np.testing.assert_array_equal(web.infer("simple", http_inputs).as_numpy("OUTPUT0"), a + b)
        assert web.get_model_metadata("simple")["name"] == "simple"


def test_statistics_count_every_request_whichever_worker_took_it(server: ConvoyServer) -> None:
    workers = _workers(server)
    per_client = 25
    with _clients(server, 8, spread_over=workers) as clients:

        def send(client: grpcclient.InferenceServerClient) -> None:
            for seed in range(per_client):
                inputs, a, b = simple_inputs(1, seed=seed)
                np.testing.assert_array_equal(
                    client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b
                )

        threads = [threading.Thread(target=send, args=(entry[0],)) for entry in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        (stats,) = clients[0][0].get_inference_statistics("simple").model_stats
    # One opening request per client, then `per_client` each.
    total = len(clients) * (per_client + 1)
    assert stats.inference_count == total
    assert stats.inference_stats.success.count == total
    assert server.stop() == 0


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_second_server_never_shares_a_port_it_finds_taken(
    server: ConvoyServer, workers: str
) -> None:
    command = serve_command(
        server.repository, "--grpc-port", str(server.grpc_port), "--frontend-workers", workers
    )
    second = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False)
    assert second.returncode == 1
    refusal = f"cannot bind 127.0.0.1:{server.grpc_port}: Address already in use".encode()
    assert refusal in second.stderr, second.stderr[-2000:]
    # One clear line: neither grpc's own bind failure (add_port.cc) nor a traceback.
    assert b"add_port" not in second.stderr and b"Traceback" not in second.stderr
    client = grpcclient.InferenceServerClient(server.url)
    inputs, a, b = simple_inputs(1)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)


@pytest.fixture(params=["in process", "one worker"])
def wide(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConvoyServer]:
    """A server of `wide`, an FP32 identity of up to 32,768 rows of 16 bytes, in process or
    behind one worker."""
    repo = tmp_path / "models"
    config = models.identity_config("wide", TensorProto.FLOAT, max_batch_size=1 << 15)
    models.write_model(repo, "wide", models.identity(TensorProto.FLOAT), config)
    flags = ("--frontend-workers", "1") if request.param == "one worker" else ()
    started = ConvoyServer(repo, tmp_path / "server.log", *flags)
    try:
        yield started.start()
    finally:
        started.kill()


def test_unary_calls_of_any_size_answer_alike_in_process_and_through_a_worker(
    wide: ConvoyServer,
) -> None:
    """A worker passes a unary call on to the core as the bytes its client sent (small ones in
    its message, large ones through the arenas); the answers, errors and statistics are the
    core's, whichever way the call came."""
    with contextlib.closing(grpcclient.InferenceServerClient(wide.url)) as client:
        for rows in (1, 2048, 16384):  # 16 bytes, 32 KiB, 256 KiB each way
            array = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
            tensor = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            result = client.infer("wide", [tensor], request_id=f"w{rows}")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)
            assert result.get_response().id == f"w{rows}"
        wrong = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
        wrong.set_data_from_numpy(np.zeros((1, 4), np.int32))
        with pytest.raises(InferenceServerException) as refused:
            client.infer("wide", [wrong])
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "INT32" in str(refused.value) and "FP32" in str(refused.value)
        stats = client.get_inference_statistics("wide").model_stats[0]
        # A request refused before it reaches the model is no failure of the model's, in Triton.
        assert (stats.inference_stats.success.count, stats.inference_stats.fail.count) == (3, 0)
    with grpc.insecure_channel(wide.url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as garbage:
            call(b"\xff\xff not a request", timeout=10)
    assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a serialized inference.ModelInferRequest" in str(garbage.value.details())


def test_stream_requests_of_any_size_answer_alike_in_process_and_through_a_worker(
    wide: ConvoyServer,
) -> None:
    """Each request of a stream passes through a worker as its bytes too, its answers come back
    serialized; a message that is no request fails in-band and the stream goes on."""
    arrays = {rows: np.arange(4 * rows, dtype=np.float32).reshape(rows, 4) for rows in (1, 16384)}
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    with contextlib.closing(grpcclient.InferenceServerClient(wide.url)) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for rows, array in arrays.items():
            tensor = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            client.async_stream_infer("wide", [tensor], request_id=f"s{rows}")
        got = {}
        for _ in arrays:
            result, error = answers.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUTPUT0")  # type: ignore[attr-defined]
        client.stop_stream()
    for rows, array in arrays.items():
        np.testing.assert_array_equal(got[f"s{rows}"], array)
    valid = pb.ModelInferRequest(model_name="wide", id="after")
    valid.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    valid.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())
    with grpc.insecure_channel(wide.url) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        replies = list(
            stream(iter([b"\xff\xff not a request", valid.SerializeToString()]), timeout=30)
        )
    answered, failed = sorted(
        (pb.ModelStreamInferResponse.FromString(reply) for reply in replies),
        key=lambda reply: bool(reply.error_message),
    )
    assert "not a serialized inference.ModelInferRequest" in failed.error_message
    assert not answered.error_message and answered.infer_response.id == "after"


def test_http_requests_of_any_size_answer_alike_in_process_and_through_a_worker(
    wide: ConvoyServer,
) -> None:
    """An HTTP infer request passes through a worker as its body: binary data and JSON both
    ways, and a body that is no request refused with 400 as in process."""
    url = f"127.0.0.1:{wide.http_port}"
    with contextlib.closing(httpclient.InferenceServerClient(url)) as client:
        for rows, binary in ((1, False), (16384, True)):
            array = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
            tensor = httpclient.InferInput("INPUT0", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array, binary_data=binary)
            wanted = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
            result = client.infer("wide", [tensor], outputs=[wanted], request_id=f"h{rows}")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)
            assert result.get_response()["id"] == f"h{rows}"
    request = urllib.request.Request(
        f"http://{url}/v2/models/wide/infer", data=b"{not json", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
