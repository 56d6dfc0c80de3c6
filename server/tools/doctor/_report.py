"""The findings as a table for people (grouped by model, wrapped to the terminal) or as JSON for
CI."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Sequence

from server.tools.doctor._findings import Finding, Severity

_LEFT = 24  # width of the severity and check columns together


def as_json(models: Sequence[str], findings: Sequence[Finding]) -> str:
    counts = {severity.value: 0 for severity in Severity}
    for finding in findings:
        counts[finding.severity.value] += 1
    return json.dumps(
        {
            "models": list(models),
            "counts": counts,
            "findings": [finding.as_json() for finding in findings],
        },
        indent=2,
    )


def as_table(models: Sequence[str], findings: Sequence[Finding], width: int = 0) -> str:
    width = width or max(shutil.get_terminal_size().columns, 60)
    counts = {severity: 0 for severity in Severity}
    for finding in findings:
        counts[finding.severity] += 1
    lines = [
        f"convoy doctor: {len(models)} model(s), {counts[Severity.ERROR]} error(s), "
        f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s)"
    ]
    by_model: dict[str, list[Finding]] = {}
    for finding in findings:
        by_model.setdefault(finding.model, []).append(finding)
    for model in [*models, ""]:
        found = by_model.get(model, [])
        if model and not found:
            lines.append(f"\n{model}: ok")
            continue
        if not found:
            continue
        lines.append(f"\n{model or '(all models together)'}")
        for finding in found:
            lines.extend(_rows(finding, width))
    return "\n".join(lines)


def _rows(finding: Finding, width: int) -> list[str]:
    head = f"  {finding.severity.value:<8}{finding.check.value:<14}"
    body = textwrap.wrap(finding.message, max(width - _LEFT, 30))
    if finding.fix:
        body += textwrap.wrap(f"fix: {finding.fix}", max(width - _LEFT, 30))
    if finding.path:
        body.append(f"file: {finding.path}")
    pad = " " * len(head)
    return [(head if index == 0 else pad) + line for index, line in enumerate(body)]
