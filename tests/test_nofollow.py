"""``carbonlite/nofollow.py``, the rule ``carbonlite serve`` and the file ingester share: below
a root, no symbolic link is followed, whether it stands for a file, a directory on the way,
or the root's own subdirectory swapped after a walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from carbonlite.nofollow import Entry, NotFollowedError, entry_kind, open_file_below, walk_below


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``root/`` with a file, a directory with a file, a link to a file outside, a link to a
    directory outside, a pipe; ``outside/`` beside it."""
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "secret").write_bytes(b"secret")
    (outside / "d" / "x").write_bytes(b"x outside")
    base = tmp_path / "root"
    (base / "sub").mkdir(parents=True)
    (base / "file").write_bytes(b"file")
    (base / "sub" / "inner").write_bytes(b"inner")
    (base / "file-link").symlink_to(outside / "secret")
    (base / "dir-link").symlink_to(outside / "d")
    os.mkfifo(base / "pipe")
    return base


def test_entry_kind_does_not_follow(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        kinds = {n: entry_kind(n, fd) for n in ("file", "sub", "file-link", "dir-link", "pipe")}
        kinds["gone"] = entry_kind("gone", fd)
    finally:
        os.close(fd)
    assert kinds == {
        "file": "file",
        "sub": "dir",
        "file-link": "link",
        "dir-link": "link",
        "pipe": "other",
        "gone": "missing",
    }


def test_walk_names_links_and_never_enters_them(root: Path) -> None:
    found = sorted(walk_below(str(root), descend=lambda _: True), key=lambda e: e.relative)
    kinds = [(e.relative, e.kind) for e in found]
    assert kinds == [
        ("dir-link", "link"),
        ("file", "file"),
        ("file-link", "link"),
        ("pipe", "other"),
        ("sub/inner", "file"),
    ]
    file = next(e for e in found if e.relative == "file")
    assert file == Entry("file", "file", 4, os.stat(root / "file").st_mtime)


def test_walk_enters_only_what_descend_allows(root: Path) -> None:
    found = [e.relative for e in walk_below(str(root), descend=lambda d: d != "sub")]
    assert "sub/inner" not in found and "file" in found


def test_open_file_below_reads_regular_files(root: Path) -> None:
    for parts, data in ((["file"], b"file"), (["sub", "inner"], b"inner")):
        fd = open_file_below(str(root), parts)
        try:
            assert os.read(fd, 100) == data
        finally:
            os.close(fd)


@pytest.mark.parametrize(
    ("parts", "error", "words"),
    [
        (["file-link"], NotFollowedError, "'file-link' is a symbolic link"),
        (["dir-link", "x"], NotFollowedError, "'dir-link' is a symbolic link"),
        (["pipe"], NotFollowedError, "'pipe' is not a regular file"),
        (["sub"], NotFollowedError, "'sub' is a directory"),
        (["file", "x"], NotFollowedError, "'file' is a file, not a directory"),
        (["gone"], FileNotFoundError, "'gone' is not there"),
        (["sub", "gone"], FileNotFoundError, "'sub/gone' is not there"),
    ],
    ids=[
        "file-link",
        "dir-link-on-the-way",
        "pipe",
        "directory",
        "file-on-the-way",
        "gone",
        "gone-below",
    ],
)
def test_open_file_below_refuses_what_is_no_regular_file_reached_without_links(
    root: Path, parts: list[str], error: type[OSError], words: str
) -> None:
    with pytest.raises(error) as raised:
        os.close(open_file_below(str(root), parts))
    assert words in str(raised.value)
    assert type(raised.value) is error


def test_a_directory_swapped_for_a_link_is_refused(root: Path, tmp_path: Path) -> None:
    """Checked once, then swapped: the next open still refuses the link."""
    os.close(open_file_below(str(root), ["sub", "inner"]))
    (root / "sub").rename(tmp_path / "moved")
    (root / "sub").symlink_to(tmp_path / "moved")
    with pytest.raises(NotFollowedError, match="'sub' is a symbolic link"):
        open_file_below(str(root), ["sub", "inner"])
