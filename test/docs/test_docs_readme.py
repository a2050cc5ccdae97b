"""The front door stays a front door: README.md is short, its tables' cells are short, every
`wamdiff2 ...` command it (or the model card, or docs/benchmarks.md) names exists with the
options it gives, its links resolve, and CI's test command is the one it shows. The user docs
and the comments of the files under config/ hold no lab notebook (commit hashes, issue
numbers, load averages, records, dates), and those comments name docs and sections that
exist."""
from __future__ import annotations

import argparse
import re
import shlex

import pytest

from markdown_doc import REPO, tables_cells

README = REPO / "README.md"
MODEL_CARD = REPO / "wamdiff2_core" / "assets" / "default_model" / "README.md"
BENCHMARKS = REPO / "docs" / "benchmarks.md"
MAX_LINES = 200
MAX_CELL_CHARS = 300
MAX_IMAGE_BYTES = 200_000
TEST_COMMAND = "bash scripts/setup.sh && .venv/bin/python -m pytest"
# Shell text that ends a command: a comment, a pipe or the next command.
_COMMAND_END = re.compile(r"\s(#|\||&&|;|>)")


def code_texts(text: str) -> list[str]:
    """Every fenced code block's lines (continuation lines joined) and inline code span."""
    texts, fenced = [], False
    for block in re.split(r"^```.*$", text, flags=re.M):
        if fenced:
            texts += block.replace("\\\n", " ").splitlines()
        else:
            texts += re.findall(r"`([^`\n]+)`", block)
        fenced = not fenced
    return texts


def wamdiff2_commands(text: str) -> list[list[str]]:
    """The words of every `wamdiff2 ...` command in the code of ``text`` (without the
    leading `wamdiff2`), up to the end of that command."""
    commands = []
    for code in code_texts(text):
        for match in re.finditer(r"(?:^|[\s(\"']|bin/)wamdiff2 (\S.*)", code):
            rest = _COMMAND_END.split(" " + match.group(1), maxsplit=1)[0]
            try:
                commands.append(shlex.split(rest))
            except ValueError:                     # an unclosed quote in prose-like code
                commands.append(rest.split())
    return commands


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def unknown_parts(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What in ``words`` (a command line after `wamdiff2`) the CLI's parser does not know:
    a subcommand that does not exist, or an option its subcommand does not take."""
    for depth in range(2):
        subs = _subcommands(parser)
        if not subs:
            break
        if not words or words[0] not in subs:
            return [" ".join(words[:1]) or "(no subcommand)"]
        parser, words = subs[words[0]], words[1:]
    options = {o for a in parser._actions for o in a.option_strings}
    return [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in options]


def _documents() -> list:
    return [p for p in (README, MODEL_CARD, BENCHMARKS) if p.exists()]


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_LINES}): put the detail in docs/")
    long_cells = [c[:60] + "..." for c in tables_cells(README.read_text())
                  if len(c) > MAX_CELL_CHARS]
    assert not long_cells, f"README table cells over {MAX_CELL_CHARS} characters: {long_cells}"


def test_readme_shows_the_command_ci_runs():
    assert TEST_COMMAND in README.read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh" in ci and ".venv/bin/python -m pytest" in ci


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_wamdiff2_command_named_exists(doc):
    pytest.importorskip("rclpy", reason="the bag, demo and node commands need the ROS wheels")
    from wamdiff2_core.apps.cli import build_parser

    parser = build_parser()
    commands = wamdiff2_commands(doc.read_text())
    assert commands, f"{doc.name} names no wamdiff2 command"
    wrong = {" ".join(words): unknown for words in commands
             if (unknown := unknown_parts(parser, words))}
    assert not wrong, f"{doc.name}: commands or options the CLI does not have: {wrong}"


def test_readme_links_resolve_and_its_picture_is_small():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)\)", text)
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) == 1
    assert (REPO / images[0]).stat().st_size <= MAX_IMAGE_BYTES


def test_the_command_parser_catches_what_it_should():
    """The check above can fail: unknown subcommands and options are reported."""
    from wamdiff2_core.apps.cli import build_parser

    parser = build_parser()
    assert unknown_parts(parser, ["eval", "open-loop", "--checkpoint", "X"]) == []
    assert unknown_parts(parser, ["eval", "sideways"]) == ["sideways"]
    assert unknown_parts(parser, ["train", "--no-such-option"]) == ["--no-such-option"]
    assert wamdiff2_commands("```bash\nwamdiff2 bench decode \\\n    --threads 1  # x\n```") \
        == [["bench", "decode", "--threads", "1"]]


# The reference docs: every doc under docs/ but the notebook (history.md) and the dated
# figures (benchmarks.md). They say what is, not what happened, and carry no dated figures.
REFERENCE_DOCS = tuple(sorted(p for p in (REPO / "docs").glob("*.md")
                              if p.name not in ("history.md", "benchmarks.md")))
# The documents a user reads.
USER_DOCS = (README, MODEL_CARD, BENCHMARKS, *REFERENCE_DOCS)
NOTEBOOK_MARKS = {
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b"),
    "a commit named": re.compile(r"\bcommits? [0-9a-f]{7,12}\b"),   # all digits, too
    "an issue number": re.compile(r"\bissues? \d+", re.I),
    "a load average": re.compile(r"\bload average", re.I),
    "a record under docs/runs": re.compile(r"docs/runs/"),
}
REFERENCE_MARKS = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "an experiment's verdict": re.compile(r"\bnot shipped\b|\btried, not\b", re.I),
}


def _notebook_marks(doc, marks: dict) -> dict:
    text = doc.read_text()
    return {what: pattern.findall(text)[:3] for what, pattern in marks.items()
            if pattern.search(text)}


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_user_docs_carry_no_lab_notebook(doc):
    marks = NOTEBOOK_MARKS | (REFERENCE_MARKS if doc in REFERENCE_DOCS else {})
    found = _notebook_marks(doc, marks)
    assert not found, f"{doc.relative_to(REPO)} has history in it (docs/history.md is the " \
                      f"place, docs/benchmarks.md for dated figures): {found}"


def test_the_notebook_check_catches_what_it_should(tmp_path):
    """The check above can fail: each mark is found in a line of a lab notebook."""
    page = tmp_path / "page.md"
    page.write_text("## Recovery data (issue 19, 2026-12-02: tried, not shipped)\n"
                    "At commit 4248363, load average 9: `git show 7f0d49c:docs/runs/x/`.\n")
    assert set(_notebook_marks(page, NOTEBOOK_MARKS | REFERENCE_MARKS)) \
        == set(NOTEBOOK_MARKS) | set(REFERENCE_MARKS)


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_user_docs_links_resolve(doc):
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", doc.read_text())
    missing = [t for t in targets
               if not t.startswith(("http://", "https://")) and not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(REPO)} links to files that do not exist: {missing}"


# The configuration files a user copies and edits: their comments say why, not what happened.
CONFIG_FILES = sorted([*(REPO / "config").rglob("*.yaml"), *(REPO / "config").rglob("*.xml")])
# A docs file named in a comment, with the section it names after it: docs/x.md, "Section".
_DOC_SECTION = re.compile(r"(docs/[\w/.-]+\.md)(?:,? \"([^\"]+)\")?")


def comments(path) -> str:
    """The comments of a YAML (``#`` to the end of a line) or XML (``<!-- -->``) file, joined
    into one line of text so that a comment wrapped over several lines reads as one."""
    text = path.read_text()
    parts = re.findall(r"<!--(.*?)-->", text, flags=re.S) if path.suffix == ".xml" else \
        [m.group(1) for line in text.splitlines() if (m := re.search(r"(?:^|\s)#(.*)$", line))]
    return " ".join(" ".join(parts).split())


def section_exists(doc_text: str, name: str) -> bool:
    """Whether the doc has a heading, or a paragraph's bold lead-in, that starts with ``name``."""
    return any(re.match(rf"(#+ |\*\*){re.escape(name)}", line)
               for line in doc_text.splitlines())


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_config_comments_carry_no_lab_notebook(path):
    text = comments(path)
    found = {what: pattern.findall(text)[:3]
             for what, pattern in (NOTEBOOK_MARKS | REFERENCE_MARKS).items()
             if pattern.search(text)}
    assert not found, f"{path.relative_to(REPO)}'s comments have history in them (say why in " \
                      f"a sentence; the record goes to docs/history.md): {found}"


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_config_comments_name_docs_and_sections_that_exist(path):
    wrong = []
    for doc, name in _DOC_SECTION.findall(comments(path)):
        target = REPO / doc
        if not target.exists():
            wrong.append(doc)
        elif name and not section_exists(target.read_text(), name):
            wrong.append(f'{doc}, "{name}"')
    assert not wrong, f"{path.relative_to(REPO)}'s comments point at what is not there: {wrong}"


def test_the_config_checks_catch_what_they_should(tmp_path):
    """The checks above can fail: a wrapped comment is read whole, history and a missing
    section are found."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text('# Issue 19: made at commit 2387498 (docs/training.md, "Recovery\n'
                      '# data"; docs/decoding.md, "No such part").\nsteps: 5   # why\n')
    text = comments(recipe)
    assert 'docs/training.md, "Recovery data"' in text and text.endswith("why")
    assert NOTEBOOK_MARKS["an issue number"].search(text)
    assert NOTEBOOK_MARKS["a commit named"].search(text)
    decoding = (REPO / "docs" / "decoding.md").read_text()
    assert section_exists(decoding, "Commit rules")
    assert not section_exists(decoding, "No such part")
