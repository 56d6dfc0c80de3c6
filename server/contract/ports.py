"""Whether a port is free, asked before a server binds it: a port another process holds is
refused with one clear line, before any library logs its own failure on the way there."""

from __future__ import annotations

import socket


def probe_port(host: str, port: int) -> int:
    """Bind host:port (0: a free one) and let it go; the port, or OSError naming the cause. A
    port some other process listens on is refused even if that process allows port sharing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise OSError(f"cannot bind {host}:{port}: {exc.strerror}") from None
        return int(probe.getsockname()[1])
