"""The model repository: scanning, config parsing, auto-complete, versions and loaded models."""

from server.core.repository._agents import run_agents
from server.core.repository._autocomplete import (
    DEFAULT_MAX_BATCH_SIZE,
    AutoComplete,
    autocomplete,
    fill_identity,
)
from server.core.repository._backends import DEFAULT_BACKEND_DIRECTORY, python_backend_file
from server.core.repository._budget import (
    MemoryBudget,
    Resident,
    auto_limit_bytes,
    choose_evictions,
    footprint_bytes,
    plan_room,
)
from server.core.repository._config import parse_config, read_config
from server.core.repository._directories import check_name, directory_stamp
from server.core.repository._keep_alive import KeepAlive, due, keep_alive_of
from server.core.repository._labels import read_labels
from server.core.repository._models import ModelEntry, ModelState, ModelVersion, VersionStatus
from server.core.repository._repository import Repository
from server.core.repository._validate import check_backend, check_ensemble, check_signature
from server.core.repository._versions import (
    is_version_name,
    list_versions,
    parse_version,
    select_versions,
)

__all__ = [
    "DEFAULT_BACKEND_DIRECTORY",
    "DEFAULT_MAX_BATCH_SIZE",
    "AutoComplete",
    "KeepAlive",
    "MemoryBudget",
    "ModelEntry",
    "ModelState",
    "ModelVersion",
    "Repository",
    "Resident",
    "VersionStatus",
    "auto_limit_bytes",
    "autocomplete",
    "check_backend",
    "check_ensemble",
    "check_name",
    "check_signature",
    "choose_evictions",
    "directory_stamp",
    "due",
    "fill_identity",
    "footprint_bytes",
    "is_version_name",
    "keep_alive_of",
    "list_versions",
    "parse_config",
    "parse_version",
    "plan_room",
    "python_backend_file",
    "read_config",
    "read_labels",
    "run_agents",
    "select_versions",
]
