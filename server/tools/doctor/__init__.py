"""`convoy doctor`: a pre-flight check of model repositories through the loader's own checks,
plus the seed's pitfalls the server cannot see at load (memory across models, queue delay and
bound, version directories, links poll mode cannot see through)."""

from server.tools.doctor._cli import main
from server.tools.doctor._examined import DoctorSettings
from server.tools.doctor._findings import Check, Finding, Severity, has_errors
from server.tools.doctor._report import as_json, as_table
from server.tools.doctor._run import examine

__all__ = [
    "Check",
    "DoctorSettings",
    "Finding",
    "Severity",
    "as_json",
    "as_table",
    "examine",
    "has_errors",
    "main",
]
