"""`convoy doctor REPOSITORY...`: its command line and exit status (1 when an error-level
finding exists)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from server.core.repository import DEFAULT_BACKEND_DIRECTORY, AutoComplete
from server.tools._units import budget_bytes
from server.tools.doctor._examined import DoctorSettings
from server.tools.doctor._findings import has_errors
from server.tools.doctor._report import as_json, as_table
from server.tools.doctor._run import examine


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convoy doctor",
        description="Check model repositories for what would stop or slow their models, "
        "before serving them. Loads nothing into a server and changes nothing.",
    )
    parser.add_argument("repository", nargs="+", type=Path, help="a model repository directory")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument(
        "--memory-budget",
        type=budget_bytes,
        default="auto",
        metavar="BYTES|auto",
        help="the memory the models may take, as convoy serve's flag (default auto: half the "
        "GPUs' memory where there are GPUs, else half the RAM)",
    )
    parser.add_argument(
        "--no-measure",
        action="store_true",
        help="do not time a batch of each model for the queue delay check (a delay recorded "
        "in config.pbtxt by convoy profile is still read)",
    )
    parser.add_argument(
        "--backend-directory",
        type=Path,
        default=Path(DEFAULT_BACKEND_DIRECTORY),
        help="where Python-based backends are, as convoy serve's flag (default "
        f"{DEFAULT_BACKEND_DIRECTORY})",
    )
    parser.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="check configs as a server with this flag reads them",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    # The loader's own logs (skipped directories, sessions opened) would repeat the findings.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    settings = DoctorSettings(
        measure=not args.no_measure,
        completion=AutoComplete(enabled=not args.disable_auto_complete_config),
        backend_directory=args.backend_directory,
    )
    models, findings = asyncio.run(examine(args.repository, args.memory_budget, settings))
    print(as_json(models, findings) if args.format == "json" else as_table(models, findings))
    return 1 if has_errors(findings) else 0
