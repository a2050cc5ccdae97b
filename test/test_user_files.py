"""wamdiff2_core.user_files: every hostile file is one sentence naming it, read within
bounded time and memory, and a good file reads as the standard parsers read it."""
from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from wamdiff2_core.user_files import (
    UserFileError, check_regular, json_depth, parse_yaml, read_bytes, read_json,
    read_json_lines, read_json_or_lines, read_text, read_yaml)

WHAT = "test file"


def refusal(call, *args, **kwargs) -> str:
    """The one-sentence refusal of ``call``; fails the test when it returns."""
    with pytest.raises(UserFileError) as info:
        call(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text and text.startswith(WHAT), text
    return text


def write(path: Path, text: str | bytes) -> Path:
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


@pytest.mark.parametrize("opener", ["[", "{\"a\": "])
def test_deep_json_is_refused_before_parsing(tmp_path, opener):
    path = write(tmp_path / "deep.json", opener * 200000)
    text = refusal(read_json, path, WHAT)
    assert "200000 levels deep" in text and str(path) in text
    assert "nests 200000" in refusal(read_json_or_lines, path, WHAT)
    assert "line 1 nests 200000" in refusal(read_json_lines, path, WHAT)


def test_depth_ignores_brackets_in_strings_and_allows_the_limit(tmp_path):
    doc = {"a": "[[[[{{{{" * 100, "b": "\\\"[[[", "c": [[[1]]]}
    path = write(tmp_path / "ok.json", json.dumps(doc))
    assert read_json(path, WHAT) == doc
    assert json_depth(json.dumps(doc).encode()) == 4
    at_limit = write(tmp_path / "limit.json", "[" * 64 + "]" * 64)
    assert json_depth(at_limit.read_bytes()) == 64
    read_json(at_limit, WHAT)
    over = write(tmp_path / "over.json", "[" * 65 + "]" * 65)
    assert "65 levels" in refusal(read_json, over, WHAT)


def test_fifo_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to(fifo)
    # Should a reader open the FIFO, this writer unblocks it after 5 s and the timing
    # assertion below fails instead of the test hanging.
    guard = threading.Timer(5.0, _unblock, (fifo,))
    guard.start()
    try:
        start = time.monotonic()
        for call in (read_json, read_yaml, read_text, read_json_or_lines, check_regular):
            assert "FIFO" in refusal(call, fifo, WHAT)
            assert "FIFO" in refusal(call, link, WHAT)
        assert time.monotonic() - start < 4.0
    finally:
        guard.cancel()


def _unblock(fifo: Path) -> None:
    try:
        os.close(os.open(fifo, os.O_RDWR))      # O_RDWR on a FIFO opens at once (Linux)
    except OSError:
        pass


def test_dev_zero_behind_a_symlink_is_refused_unread(tmp_path):
    link = tmp_path / "weights.json"
    link.symlink_to("/dev/zero")
    tracemalloc.start()
    try:
        text = refusal(read_json, link, WHAT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "character device" in text and "/dev/zero" in text
    assert peak < 1 << 20


def test_a_file_larger_than_it_claims_is_cut_at_the_cap():
    # /proc files are regular and claim size 0: only the read cap can catch them, as it
    # catches a file that grows while it is read.
    text = refusal(read_bytes, "/proc/self/maps", WHAT, max_bytes=64)
    assert "grew while it was read" in text
    assert read_bytes("/proc/self/maps", WHAT, max_bytes=1 << 24)


def test_huge_file_is_refused_by_its_size(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(3 << 30)                     # sparse: 3 GiB claimed, nothing on disk
    start = time.monotonic()
    text = refusal(read_json, path, WHAT)
    assert "3072.0 MiB" in text and "larger than the limit" in text
    assert time.monotonic() - start < 1.0
    assert "larger" in refusal(read_json_or_lines, path, WHAT, max_bytes=1 << 20)


def test_directory_missing_loop_and_empty_path(tmp_path):
    assert "is a directory" in refusal(read_json, tmp_path, WHAT)
    assert "does not exist" in refusal(read_yaml, tmp_path / "nope.yaml", WHAT)
    broken = tmp_path / "broken.json"
    broken.symlink_to(tmp_path / "gone.json")
    assert "does not exist" in refusal(read_json, broken, WHAT)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert "loop" in refusal(read_json, loop, WHAT) or "cannot be read" in refusal(
        read_json, loop, WHAT)
    assert "empty path" in refusal(read_json, "", WHAT)
    assert "not a valid path" in refusal(read_json, "a\0b.json", WHAT)


def test_check_regular_resolves_symlinks(tmp_path):
    target = write(tmp_path / "a.json", "{}")
    link = tmp_path / "b.json"
    link.symlink_to(target)
    assert check_regular(link, WHAT) == target.resolve()


@pytest.mark.parametrize("body,found", [
    ('{"a": NaN}', "NaN"), ('[Infinity]', "Infinity"), ('[-Infinity]', "-Infinity"),
    ('{"a": 1e400}', "overflows a float"), ('[' + "9" * 5000 + ']', "cannot be read")])
def test_non_finite_numbers_are_refused_unless_allowed(tmp_path, body, found):
    path = write(tmp_path / "n.json", body)
    assert found in refusal(read_json, path, WHAT)
    if "9999" not in body:
        read_json(path, WHAT, allow_nonfinite=True)


def test_invalid_json_and_text_name_the_place(tmp_path):
    bad = write(tmp_path / "bad.json", '{"a": 1,\n "b": }')
    assert "line 2 column" in refusal(read_json, bad, WHAT)
    latin = write(tmp_path / "latin.json", b'{"a": "\xe9"}')
    assert "not UTF-8" in refusal(read_json, latin, WHAT)
    bom = write(tmp_path / "bom.json", b'\xef\xbb\xbf{"a": 1}')
    assert read_json(bom, WHAT) == {"a": 1}


def test_json_lines_name_the_line_and_cap_each_line(tmp_path):
    path = write(tmp_path / "r.jsonl", '{"a": 1}\n\n{"a": 2}\n{"a": \n')
    assert "line 4 is not valid JSON" in refusal(read_json_lines, path, WHAT)
    good = write(tmp_path / "g.jsonl", '{"a": 1}\n\n{"a": 2}\n')
    assert read_json_lines(good, WHAT) == [{"a": 1}, {"a": 2}]
    long = write(tmp_path / "l.jsonl", '{"a": 1}\n"' + "x" * 5000 + '"\n')
    assert "line 2 is" in refusal(read_json_lines, long, WHAT, max_line_bytes=1000)
    deep = write(tmp_path / "d.jsonl", '{"a": 1}\n' + "[" * 1000 + "\n")
    assert "line 2 nests 1000" in refusal(read_json_lines, deep, WHAT)


def test_json_or_lines_reads_both_formats(tmp_path):
    items = [{"id": 1}, {"id": 2}]
    as_list = write(tmp_path / "a.json", json.dumps(items, indent=1))
    as_lines = write(tmp_path / "b.json", "\n".join(map(json.dumps, items)))
    named = write(tmp_path / "c.jsonl", "\n".join(map(json.dumps, items)))
    for path in (as_list, as_lines, named):
        assert read_json_or_lines(path, WHAT) == items
    one = write(tmp_path / "d.json", json.dumps(items[0]))
    assert read_json_or_lines(one, WHAT) == [items[0]]
    twice = write(tmp_path / "e.json", "[1] [2]")
    assert "not valid JSON" in refusal(read_json_or_lines, twice, WHAT)


def test_yaml_alias_bomb_is_refused_with_bounded_memory(tmp_path):
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        prev = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [" +
                     ", ".join([f"*{prev}"] * 9) + "]")
    path = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    tracemalloc.start()
    try:
        text = refusal(read_yaml, path, WHAT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "alias *a" in text and "line 2" in text
    assert peak < 8 << 20


def test_yaml_limits_and_errors(tmp_path):
    deep = write(tmp_path / "deep.yaml", "[" * 200000)
    assert "more than 64 levels" in refusal(read_yaml, deep, WHAT)
    block = write(tmp_path / "block.yaml", "".join("  " * i + "k:\n" for i in range(100)))
    assert "more than 64 levels" in refusal(read_yaml, block, WHAT)
    many = write(tmp_path / "many.yaml", "[" + ", ".join(["1"] * 2000) + "]")
    assert "more than 1000 values" in refusal(read_yaml, many, WHAT, max_nodes=1000)
    bad = write(tmp_path / "bad.yaml", "a: [1, 2\nb: 3\n")
    assert "not valid YAML (line" in refusal(read_yaml, bad, WHAT)
    two = write(tmp_path / "two.yaml", "a: 1\n---\nb: 2\n")
    assert "not valid YAML" in refusal(read_yaml, two, WHAT)
    good = write(tmp_path / "good.yaml", "a: &x 1\nb: [1, 2.5, null]\n")   # an anchor alone
    assert read_yaml(good, WHAT) == {"a": 1, "b": [1, 2.5, None]}
    assert parse_yaml("", "--set", WHAT) is None
    assert "alias" in refusal(parse_yaml, "[*x]", "--set x", WHAT)
