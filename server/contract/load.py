"""A model's load as one response reports it to a load balancer: what the core measured when the
response left it, asked for by the request (`endpoint-load-metrics-format`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoadReport:
    """The answering version's queue and requests in flight, and the server's load ratio."""

    queue_length: int  # requests waiting, not yet executing (nv_inference_pending_request_count)
    in_flight: int  # accepted and not yet answered (convoy_inference_inflight_requests)
    load_ratio: float  # the server's convoy_load_ratio: the most loaded version's share, >= 0
