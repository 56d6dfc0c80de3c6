"""The README is the front door: short, with the two set-up commands, and every link it makes
into the documentation reaching a page that exists (GitHub shows the links as they are)."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_readme_has_both_set_up_commands() -> None:
    assert "```bash\nscripts/serve.sh\n```" in README
    assert "```bash\nscripts/test.sh\n```" in README
    assert "```bash\nmkdocs serve\n```" in README


def test_every_readme_link_reaches_a_page_of_the_site() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links into docs/"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w./-]+\.md)\s*$", nav, re.MULTILINE))
    for link in local:
        assert (ROOT / link).is_file(), link
        if link.startswith("docs/"):
            assert link.removeprefix("docs/") in listed, f"{link} is not in mkdocs.yml's nav"


def test_mkdocs_yml_parses() -> None:
    # The !!python/name tag of the Mermaid fence is resolved by mkdocs; here it only must parse.
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda *_: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=loader)
    assert config["theme"]["name"] == "material"
    assert config["docs_dir"] == "docs"
