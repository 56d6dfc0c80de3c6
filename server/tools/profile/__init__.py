"""`convoy profile`: a capacity sweep through the server's own repository, batcher and
instances in process (and a running server over gRPC), its latency-throughput curves, and the
recommended configuration under a latency objective."""

from server.tools.profile._choose import Choice, choose
from server.tools.profile._cli import main
from server.tools.profile._points import Point, percentile_ms
from server.tools.profile._report import latency_target_ms, recommended_config
from server.tools.profile._space import KEEP, Variant, apply, variants

__all__ = [
    "KEEP",
    "Choice",
    "Point",
    "Variant",
    "apply",
    "choose",
    "latency_target_ms",
    "main",
    "percentile_ms",
    "recommended_config",
    "variants",
]
