"""The gRPC server's own TCP sockets, found among this process's file descriptors (Linux), so that
a drain can close them in its own order.

Python's grpc stops listening, sends GOAWAY and turns away new calls only all at once, in
`Server.stop`: a call that reaches it after that began and before the client read the GOAWAY is
cancelled (the client sees CANCELLED, which it must not retry; nginx answers 502). So a draining
front end shuts grpc's listening socket first (new connections are refused, which a client or a
balancer retries elsewhere), answers what comes on the connections it already has, and once no
call is left closes those connections (a call on its way then fails as UNAVAILABLE), before
`Server.stop` finds nothing to turn away."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator

_FDS = "/proc/self/fd"


def _sockets_on(port: int) -> Iterator[tuple[socket.socket, bool]]:
    """(a duplicate of each TCP socket of this process whose local port is `port`, whether it
    listens); the caller closes the duplicates, which leaves grpc's descriptors open."""
    try:
        names = os.listdir(_FDS)
    except OSError:  # not Linux: nothing found, and Server.stop does it all
        return
    for name in names:
        try:
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            duplicate = socket.socket(fileno=os.dup(fd))
        except (ValueError, OSError):  # listdir's own descriptor, or one closed meanwhile
            continue
        try:
            if (
                duplicate.family in (socket.AF_INET, socket.AF_INET6)
                and duplicate.type == socket.SOCK_STREAM
                and duplicate.getsockname()[1] == port
            ):
                listening = duplicate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                yield duplicate, bool(listening)
        except OSError:
            pass
        finally:
            duplicate.close()


def stop_listening(port: int) -> int:
    """Shut this process's listening sockets on `port`: connections are refused from now on
    (grpc logs that its acceptor closed); the ones already accepted go on. Returns how many."""
    count = 0
    for listener, listening in _sockets_on(port):
        if listening:
            # On Linux a listening socket shut for reading stops listening at once.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RD)
                count += 1
    return count


def close_connections(port: int) -> int:
    """Close (both ways) this process's accepted connections on `port`; grpc then sees them
    end. Returns how many."""
    count = 0
    for connection, listening in _sockets_on(port):
        if not listening:
            with contextlib.suppress(OSError):  # not connected: a bound or reserved socket
                connection.shutdown(socket.SHUT_RDWR)
                count += 1
    return count
