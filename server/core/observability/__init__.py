"""What the request path records: per-version statistics and OpenTelemetry traces."""

from server.core.observability.stats import ModelStats
from server.core.observability.tracing import RequestTracer, TracedRequest

__all__ = ["ModelStats", "RequestTracer", "TracedRequest"]
