"""The documentation's option tables, generated from the one option table the parser is built
from (`server.options.OPTIONS`), so that the documentation cannot drift from the command line.

    python scripts/options_table.py          # rewrite the tables in the pages
    python scripts/options_table.py --check  # exit 1 if a page is out of date

The command-line reference (docs/reference/command-line.md) has two tables: Convoy's own options,
and Triton's options (Triton's default, what the option does and what Convoy does with it). The
migration page (docs/triton/migration.md) has the lists a Triton user checks a command line
against: the options with no effect, those refused, and the defaults `convoy serve` changes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/options_table.py`: Python puts scripts/ on sys.path, not the root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.options import OPTIONS, Option, Profile, Support

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = DOCS / "reference" / "command-line.md"
MIGRATION_PAGE = DOCS / "triton" / "migration.md"
TRITON_TABLE = ("<!-- triton-options:begin -->", "<!-- triton-options:end -->")
CONVOY_TABLE = ("<!-- convoy-options:begin -->", "<!-- convoy-options:end -->")
CHECKLIST = ("<!-- triton-checklist:begin -->", "<!-- triton-checklist:end -->")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _flags(option: Option) -> str:
    metavar = f" {option.value.metavar}" if option.value.metavar else ""
    return ", ".join(f"`{flag}{metavar}`" for flag in option.flags)


def _convoy_column(option: Option) -> str:
    if option.support is Support.NO_EFFECT:
        return f"accepted, no effect: {option.behaviour}"
    if option.support is Support.REFUSED:
        return f"only `{_value(option.default)}`; other values stop the start: {option.behaviour}"
    parts = ["yes"]
    if option.behaviour:
        parts.append(option.behaviour)
    if option.differs:
        parts.append(f"`convoy serve` default: `{_value(option.convoy_default)}`")
    return "; ".join(parts)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def triton_table() -> str:
    rows = ["| Option | Triton's default | What it does | In Convoy |", "| --- | --- | --- | --- |"]
    for option in OPTIONS:
        if option.support is Support.CONVOY:
            continue
        cells = (_flags(option), option.triton_default, option.meaning, _convoy_column(option))
        rows.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    return "\n".join(rows)


def convoy_table() -> str:
    rows = ["| Option | Default | Meaning |", "| --- | --- | --- |"]
    for option in OPTIONS:
        if option.support is not Support.CONVOY:
            continue
        default = option.default_for(Profile.CONVOY)
        shown = "" if default is None or default is False else _code(_value(default))
        rows.append(
            "| " + " | ".join(_escape(c) for c in (_flags(option), shown, option.meaning)) + " |"
        )
    return "\n".join(rows)


def checklist() -> str:
    """Three lists: the Triton options Convoy accepts and ignores, those it refuses, and the
    defaults `convoy serve` changes (`tritonserver` keeps Triton's)."""
    ignored = [o for o in OPTIONS if o.support is Support.NO_EFFECT]
    refused = [o for o in OPTIONS if o.support is Support.REFUSED]
    changed = [o for o in OPTIONS if o.support is not Support.CONVOY and o.differs]
    lines = [f"- **Accepted, no effect** ({len(ignored)} options; each is logged once at start):"]
    lines += [f"    - {_flags(o)}: {o.behaviour}" for o in ignored]
    lines.append(f"- **Refused** unless given Triton's default ({len(refused)} options):")
    lines += [f"    - {_flags(o)} other than `{_value(o.default)}`: {o.behaviour}" for o in refused]
    lines.append(
        f"- **Defaults `convoy serve` changes** ({len(changed)} options; `tritonserver` keeps "
        "Triton's):"
    )
    lines += [
        f"    - {_flags(o)}: Triton `{_value(o.default)}`, `convoy serve` "
        f"`{_value(o.convoy_default)}`"
        for o in changed
    ]
    return "\n".join(lines)


def _replace(page: str, name: str, blocks: tuple[tuple[tuple[str, str], str], ...]) -> str:
    for (begin, end), table in blocks:
        head, found, rest = page.partition(begin)
        if not found or end not in rest:
            raise SystemExit(f"{name} has no {begin} ... {end} block")
        page = f"{head}{begin}\n{table}\n{end}{rest.partition(end)[2]}"
    return page


def rendered(page: str) -> str:
    """The command-line reference with both tables replaced by the generated ones."""
    return _replace(
        page, PAGE.name, ((TRITON_TABLE, triton_table()), (CONVOY_TABLE, convoy_table()))
    )


def rendered_migration(page: str) -> str:
    """The migration page with its checklist replaced by the generated one."""
    return _replace(page, MIGRATION_PAGE.name, ((CHECKLIST, checklist()),))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args()
    stale = 0
    for path, render in ((PAGE, rendered), (MIGRATION_PAGE, rendered_migration)):
        current = path.read_text(encoding="utf-8")
        wanted = render(current)
        if wanted == current:
            continue
        if args.check:
            print(f"{path}'s option tables are stale: run scripts/options_table.py")
            stale = 1
        else:
            path.write_text(wanted, encoding="utf-8")
    return stale


if __name__ == "__main__":
    sys.exit(main())
