"""Storage libraries are an optional extra: a missing one is a clear error naming the extra."""

from __future__ import annotations

import importlib

from server.core.storage.errors import MissingLibraryError

_SCHEMES = {"s3": "s3://", "gcs": "gs://", "azure": "as://"}


def require(module: str, extra: str) -> None:
    """Import `module` (at start, so that a missing library stops it rather than a sync), or
    raise MissingLibraryError."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise MissingLibraryError(
            f"{_SCHEMES[extra]} model repositories need the '{module}' package, which cannot be "
            f"imported ({exc}): pip install 'convoy[{extra}]' (or 'convoy[cloud]' for every "
            "cloud)"
        ) from exc
