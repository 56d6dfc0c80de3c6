"""Convoy's server: the composition root and the gRPC edge; the only package importing grpc."""

from server.app import App
from server.cli import main
from server.settings import ServerSettings

__all__ = ["App", "ServerSettings", "main"]
