"""README's option tables are the ones scripts/options_table.py generates from the parser's
option table: an option added, renamed or changed without regenerating them fails here."""

from scripts import options_table
from server.options import OPTIONS, Support


def test_readme_option_tables_are_up_to_date() -> None:
    readme = options_table.README.read_text(encoding="utf-8")
    assert options_table.rendered(readme) == readme, "run: python scripts/options_table.py"


def test_the_triton_table_has_a_row_per_triton_option() -> None:
    rows = options_table.triton_table().splitlines()[2:]
    assert len(rows) == sum(1 for o in OPTIONS if o.support is not Support.CONVOY)
    assert rows[0].startswith("| `--help`")
    assert any(row.startswith("| `--model-store PATH\\|URL`, `--model-repository") for row in rows)
