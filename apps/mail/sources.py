"""Read raw messages out of an mbox file, a Maildir, a folder of .eml files, a single .eml file, or a zip file of
mbox and .eml files (an upload from the console: each member read as a stream, an .eml one bounded).

mbox handling, chosen to match Python's mailbox.mbox for files it (or any mboxo/mboxrd writer) wrote:

* A message starts at a line beginning with b"From " at the start of the file or right after a blank line.
  Unlike mailbox.mbox, a "From " line in the middle of a paragraph does not split the message, unless it
  is a complete envelope line ("From sender Mon Feb  3 10:00:00 2025"), which writers that leave out the
  blank separator line produce.
* The "From " envelope line itself is not part of the message.
* ">From " lines are left as they are, exactly like mailbox.mbox: mboxo and mboxrd files cannot be told
  apart, and un-escaping an mboxo file would corrupt lines that really started with ">From ".
* The blank line that separates a message from the next envelope line (and a blank last line of the
  file) belongs to the mbox format, not to the message, and is dropped. A message written by
  mailbox.mbox therefore comes back byte for byte as mailbox.mbox.get_bytes() returns it: what was
  added (raw bytes, or a Message flattened without refolding headers) with "From " body lines escaped
  to ">From " and a final newline added when it lacked one.
* Content-Length headers (mboxcl) are ignored, as mailbox.mbox does.
"""

import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from apps.core.bounds import bounds

__all__ = ["RawItem", "SourceError", "SourceKind", "count_messages", "detect_kind", "iter_source"]

SourceKind = Literal["mbox", "maildir", "eml-folder", "eml", "zip"]

_ZIP_MAGIC = b"PK\x03\x04"

# "From sender Mon Feb  3 10:00:00 2025" as written by mailbox.mbox, Thunderbird, Gmail Takeout, mutt.
_ENVELOPE_LINE = re.compile(rb"From \S+ +[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{1,2}:\d{2}")
_BLANK_LINES = (b"\n", b"\r\n")


@dataclass(frozen=True, slots=True)
class RawItem:
    """One raw message and where it came from (a path or index, never message content). An entry of the source
    that was not read (a zip member that is hidden, climbs out with "..", or is no mail) is an item too, with no
    data and `refused` saying why, so that it is counted and named as failed rather than skipped without a word."""

    position: str
    data: bytes
    refused: str = field(default="", kw_only=True)


class SourceError(Exception):
    """The path is not a readable mbox file, Maildir, .eml file or folder of .eml files."""


def detect_kind(path: Path) -> SourceKind:
    """Tell what kind of mail source a path is, or raise SourceError."""
    try:
        if path.is_dir():
            if (path / "cur").is_dir() and (path / "new").is_dir():
                return "maildir"
            if next(_eml_files(path), None) is not None:
                return "eml-folder"
            raise SourceError("the folder holds no Maildir and no .eml files")
        if not path.exists():
            raise SourceError("the path does not exist")
        if not path.is_file():
            raise SourceError("the path is neither a regular file nor a folder")
        if path.suffix.lower() == ".eml":
            return "eml"
        with path.open("rb") as file:
            start = file.read(5)
    except OSError as exc:
        raise SourceError("the path cannot be read") from exc
    if start == b"From ":
        return "mbox"
    if start[:4] == _ZIP_MAGIC:
        return "zip"
    if not start:
        raise SourceError("the file is empty")
    raise SourceError("the file is neither an mbox file nor an .eml file")


def iter_source(path: Path) -> Iterator[RawItem]:
    """Yield every message in a mail source; the kind is checked before the first item is requested."""
    kind = detect_kind(path)
    if kind == "mbox":
        return _iter_mbox(path)
    if kind == "maildir":
        return _iter_maildir(path, path)
    if kind == "eml":
        return _iter_files([path], path.parent, "eml")
    if kind == "zip":
        return _iter_zip(path)
    return _iter_files(sorted(_eml_files(path), key=lambda file: file.relative_to(path).as_posix()), path, "eml")


def count_messages(path: Path) -> int:
    """How many messages iter_source will yield, read without parsing any (for a progress bar's 100%)."""
    kind = detect_kind(path)
    if kind == "mbox":
        with path.open("rb") as file:
            return _count_mbox(file)
    if kind == "zip":
        total = 0
        with _open_zip(path) as archive:
            for info, refused in _zip_members(archive):
                if refused or info.filename.lower().endswith(".eml"):
                    total += 1
                else:
                    with archive.open(info) as member:
                        total += max(1, _count_mbox(member))  # no mail: one failed entry
        return total
    return sum(1 for _ in iter_source(path))


def _count_mbox(file: IO[bytes]) -> int:
    if not file.read(5).startswith(b"From "):
        return 0
    file.readline()
    count, previous_blank = 1, False
    for line in file:
        if line.startswith(b"From ") and (previous_blank or _ENVELOPE_LINE.match(line)):
            count += 1
            previous_blank = False
        else:
            previous_blank = line in _BLANK_LINES
    return count


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError("the zip file cannot be read") from exc


# why a zip member is not read (fixed phrases: the member's name is the position, never in the reason)
ZIP_HIDDEN = "hidden file or folder (its name starts with a dot), not read"
ZIP_OUTSIDE = "a path with '..' or from the root, not read"
ZIP_NOT_MAIL = "neither an mbox file nor an .eml file"


def _zip_refusal(name: str) -> str:
    parts = name.replace("\\", "/").split("/")
    if name.startswith("/") or ".." in parts:
        return ZIP_OUTSIDE
    if any(part.startswith((".", "__MACOSX")) for part in parts if part):
        return ZIP_HIDDEN
    return ""


def _zip_members(archive: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, str]]:
    """Every file of the zip (folders left out) in name order, each with why it is not read ("" when it is):
    names that climb out ("..") or are hidden (.DS_Store, __MACOSX) are refused, counted and named as failed."""
    members = [(info, _zip_refusal(info.filename)) for info in archive.infolist() if not info.is_dir()]
    return sorted(members, key=lambda member: member[0].filename)


def _iter_zip(path: Path) -> Iterator[RawItem]:
    limit = int(bounds.IMPORT_MAX_MESSAGE_BYTES)
    try:
        with _open_zip(path) as archive:
            for info, refused in _zip_members(archive):
                name = info.filename[:200]
                if refused:
                    yield RawItem(f"zip:{name}", b"", refused=refused)
                    continue
                with archive.open(info) as member:
                    if info.filename.lower().endswith(".eml"):
                        data = member.read(limit + 1)
                        # a message over the bound fails on its own (the parser refuses it), as any other
                        yield RawItem(f"zip:{name}", data)
                        continue
                    if member.read(5) != b"From ":
                        yield RawItem(f"zip:{name}", b"", refused=ZIP_NOT_MAIL)
                        continue
                with archive.open(info) as member:
                    for item in _split_mbox(member):
                        yield RawItem(f"zip:{name}:{item.position}", item.data)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as exc:
        raise SourceError("the zip file cannot be read") from exc


def _iter_mbox(path: Path) -> Iterator[RawItem]:
    try:
        with path.open("rb") as file:
            yield from _split_mbox(file)
    except OSError as exc:
        raise SourceError("the mbox file cannot be read") from exc


def _split_mbox(file: IO[bytes]) -> Iterator[RawItem]:
    """Stream messages out of an mbox file, holding one message in memory at a time."""
    offset = len(file.readline())  # the first envelope line, checked by detect_kind
    number = 1
    start = 0
    lines: list[bytes] = []
    previous_blank = False
    for line in file:
        if line.startswith(b"From ") and (previous_blank or _ENVELOPE_LINE.match(line)):
            if previous_blank:
                lines.pop()
            yield RawItem(f"mbox:#{number} (byte {start})", b"".join(lines))
            number += 1
            start = offset
            lines = []
            previous_blank = False
        else:
            lines.append(line)
            previous_blank = line in _BLANK_LINES
        offset += len(line)
    if previous_blank:
        lines.pop()
    yield RawItem(f"mbox:#{number} (byte {start})", b"".join(lines))


def _iter_maildir(folder: Path, root: Path) -> Iterator[RawItem]:
    """Yield new/ then cur/ of a Maildir, then its Maildir++ subfolders (.Sub.Folder), in name order."""
    for subdir in ("new", "cur"):
        directory = folder / subdir
        try:
            names = sorted(entry.name for entry in os.scandir(directory) if not entry.name.startswith("."))
        except OSError as exc:
            raise SourceError("a Maildir folder cannot be read") from exc
        yield from _iter_files((directory / name for name in names), root, "maildir")
    try:
        children = sorted(
            entry.name
            for entry in os.scandir(folder)
            if entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
        )
    except OSError as exc:
        raise SourceError("a Maildir folder cannot be read") from exc
    for name in children:
        child = folder / name
        if (child / "cur").is_dir() and (child / "new").is_dir():
            yield from _iter_maildir(child, root)


def _iter_files(files: Iterable[Path], root: Path, label: str) -> Iterator[RawItem]:
    for file in files:
        try:
            if not file.is_file():
                continue
            data = file.read_bytes()
        except FileNotFoundError:
            # A mail client moved it (Maildir new/ -> cur/) while we were reading; cur/ is read later.
            continue
        except OSError as exc:
            raise SourceError("a message file cannot be read") from exc
        yield RawItem(f"{label}:{file.relative_to(root).as_posix()}", data)


def _eml_files(folder: Path) -> Iterator[Path]:
    """Yield every *.eml file under a folder (any letter case), not following symlinked folders."""
    for directory, subdirectories, files in os.walk(folder):
        subdirectories.sort()
        for name in sorted(files):
            if name.lower().endswith(".eml"):
                yield Path(directory, name)
