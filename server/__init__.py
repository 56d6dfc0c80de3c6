"""Convoy's server: the composition root and the gRPC and HTTP edges; the only package importing
grpc or aiohttp."""

from server.app import App
from server.cli import main
from server.settings import ServerSettings

__all__ = ["App", "ServerSettings", "main"]
