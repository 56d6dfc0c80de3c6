"""The HTTP/REST edge: Triton's v2 routes on an HTTP/1.1 server over httptools' parser, their
JSON / binary tensor codec and the error-to-HTTP-status table."""

from server.frontend.http.app import HTTP_EXTENSIONS, HttpFrontEnd
from server.frontend.http.forward import serve_http
from server.frontend.http.status import HTTP_CODES, http_status_for

__all__ = ["HTTP_CODES", "HTTP_EXTENSIONS", "HttpFrontEnd", "http_status_for", "serve_http"]
