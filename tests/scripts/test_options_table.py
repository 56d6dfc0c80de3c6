"""The command-line reference's option tables are the ones scripts/options_table.py generates
from the parser's option table: an option added, renamed or changed without regenerating them
fails here."""

from scripts import options_table
from server.options import OPTIONS, Support


def test_the_pages_option_tables_are_up_to_date() -> None:
    page = options_table.PAGE.read_text(encoding="utf-8")
    assert options_table.rendered(page) == page, "run: python scripts/options_table.py"


def test_the_triton_table_has_a_row_per_triton_option() -> None:
    rows = options_table.triton_table().splitlines()[2:]
    assert len(rows) == sum(1 for o in OPTIONS if o.support is not Support.CONVOY)
    assert rows[0].startswith("| `--help`")
    assert any(row.startswith("| `--model-store PATH\\|URL`, `--model-repository") for row in rows)


def test_the_migration_checklist_is_up_to_date() -> None:
    page = options_table.MIGRATION_PAGE.read_text(encoding="utf-8")
    assert options_table.rendered_migration(page) == page, "run: python scripts/options_table.py"


def test_the_checklist_names_every_ignored_and_refused_option() -> None:
    checklist = options_table.checklist()
    for option in OPTIONS:
        if option.support in (Support.NO_EFFECT, Support.REFUSED):
            assert f"`{option.flags[-1]}" in checklist
