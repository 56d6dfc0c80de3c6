"""What doctor learned of one model, which every check adds its findings to, and what the
checks may do beyond reading files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from proto import model_config_pb2 as mc
from server.core.repository import DEFAULT_BACKEND_DIRECTORY, AutoComplete
from server.tools.doctor._findings import Check, Finding, Severity


@dataclass(frozen=True, slots=True)
class DoctorSettings:
    """What the checks may do beyond reading files."""

    measure: bool = True  # run a batch on one instance to time it (the queue delay check)
    completion: AutoComplete = field(default_factory=AutoComplete)  # as the server's flags
    # Where Python-based backends are found, as the server's --backend-directory.
    backend_directory: Path | None = Path(DEFAULT_BACKEND_DIRECTORY)


@dataclass(slots=True)
class Examined:
    """One model as doctor found it: its findings, and what the repository-wide checks need."""

    name: str
    path: Path
    findings: list[Finding] = field(default_factory=list)
    config: mc.ModelConfig | None = None  # completed config of its newest version, if any
    memory_bytes: int = 0  # footprint_bytes of every version it would serve, together
    gpu_copies: int = 0  # instances that would each hold the weights on a GPU

    def add(self, severity: Severity, check: Check, message: str, path: Path, fix: str) -> None:
        self.findings.append(Finding(severity, check, self.name, message, str(path), fix))
