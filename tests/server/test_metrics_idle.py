"""The metrics endpoint closes a connection that sends no whole request in time (each open one
holds a thread), and serves scrapes meanwhile; a real server on 127.0.0.1."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from server.core.metrics import MetricsServer


class _OneGauge(Collector):
    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("convoy_test_gauge", "a gauge", value=1.0)


def test_an_idle_connection_is_closed_and_scrapes_go_on() -> None:
    server = MetricsServer(_OneGauge(), "127.0.0.1", 0, idle_timeout_s=0.3)
    server.start()
    try:
        idle = socket.create_connection(("127.0.0.1", server.port))
        half = socket.create_connection(("127.0.0.1", server.port))
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert b"convoy_test_gauge 1\n" in answer.read()
        time.sleep(0.8)
        assert _closed_by_the_server(idle)
        assert _closed_by_the_server(half)
    finally:
        server.stop()


def _closed_by_the_server(connection: socket.socket) -> bool:
    """Whether reads reach the end within 2 s (after whatever the server sent before closing);
    False when the connection is still open."""
    connection.settimeout(2.0)
    try:
        while connection.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionError:  # reset: closed all the same
        return True
    finally:
        connection.close()
    return True
