"""README's option tables, generated from the one option table the parser is built from
(`server.options.OPTIONS`), so that the README cannot drift from the command line.

    python scripts/options_table.py          # rewrite the tables in README.md
    python scripts/options_table.py --check  # exit 1 if README.md is out of date

Two tables: Triton's options ("Coming from Triton": Triton's default, what the option does and
what Convoy does with it), and Convoy's own options ("Command line")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/options_table.py`: Python puts scripts/ on sys.path, not the root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.options import OPTIONS, Option, Profile, Support

README = Path(__file__).resolve().parents[1] / "README.md"
TRITON_TABLE = ("<!-- triton-options:begin -->", "<!-- triton-options:end -->")
CONVOY_TABLE = ("<!-- convoy-options:begin -->", "<!-- convoy-options:end -->")


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


def rendered(readme: str) -> str:
    """The README with both tables replaced by the generated ones."""
    for (begin, end), table in ((TRITON_TABLE, triton_table()), (CONVOY_TABLE, convoy_table())):
        head, found, rest = readme.partition(begin)
        if not found or end not in rest:
            raise SystemExit(f"README.md has no {begin} ... {end} block")
        readme = f"{head}{begin}\n{table}\n{end}{rest.partition(end)[2]}"
    return readme


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is stale")
    args = parser.parse_args()
    current = README.read_text(encoding="utf-8")
    wanted = rendered(current)
    if args.check:
        if wanted != current:
            print("README.md's option tables are stale: run scripts/options_table.py")
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
