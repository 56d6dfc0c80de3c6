"""The Prometheus page: Triton's metric families from the repository's statistics, with the
machine's CPU and GPU samplers."""

from server.core.metrics.prometheus import MetricsOptions, MetricsServer, StatsCollector

__all__ = ["MetricsOptions", "MetricsServer", "StatsCollector"]
