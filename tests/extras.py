"""Tests that need an optional extra (torch, openvino): skipped where it is not installed, except
in CI (CI=true), whose test command installs the extras: there a missing one fails the test."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require_extra(module: str, extra: str) -> ModuleType:
    """`module`, imported; a skip naming `pip install 'convoy[<extra>]'` where it is missing."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"needs pip install 'convoy[{extra}]'")
