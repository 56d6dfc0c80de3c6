"""Storage libraries are an optional extra: a missing one is a clear error naming the extra."""

from __future__ import annotations

import importlib.util

from server.core.storage.errors import MissingLibraryError

_SCHEMES = {"s3": "s3://", "gcs": "gs://", "azure": "as://"}


def require(module: str, extra: str) -> None:
    """Raise MissingLibraryError unless `module` can be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    if not found:
        raise MissingLibraryError(
            f"{_SCHEMES[extra]} model repositories need the '{module}' package, which is not "
            f"installed: pip install 'convoy[{extra}]' (or 'convoy[cloud]' for every cloud)"
        )
