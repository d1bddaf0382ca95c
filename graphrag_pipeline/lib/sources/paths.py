"""The files under a source's configured folder, and never anything outside it.

Every reader of the local file system (folders, catalogs, eval sets) lists and opens files through this module, and
its sensor's cheap scan does too, so a scan and a read always agree on what a source holds.

* A symbolic link whose target lies outside the folder (``notes.md -> /etc/passwd``, ``shared -> /srv``) is never
  read: it is a ``RefusedEntry`` naming the link and its target, which the reader quarantines.
* A link inside the folder is read only when the source sets ``follow_symlinks``; otherwise it is refused too, with
  the flag named in the reason. A followed directory link that leads back into a folder it was reached from (a loop)
  is refused.
* Only regular files are read (a FIFO or a device named ``x.md`` would block or never end), opened without following
  a link that replaced the file after it was listed, and hashed while being read, in bounded pieces: a file larger
  than the source's ``max_document_bytes`` is hashed but never held in memory.

Hidden files and folders (a leading ``.``) are skipped, as before. The configured path itself may be a link: it is
what the user named, and "inside" means inside its resolved target.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection

from graphrag_pipeline.lib.core.ids import content_hash

READ_PIECE = 1 << 20  # bytes hashed at a time when a file is too large to keep


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: Path  # where the file appears under the folder: what names its document
    target: Path  # what is read: ``path`` itself, or the resolved target of a followed link


@dataclass(frozen=True, slots=True)
class RefusedEntry:
    path: Path  # the link or special file, as it appears under the folder
    reason: str

    @property
    def marker(self) -> str:
        """Stands in for a content hash in change scans, so that re-pointing the link is seen as a change."""
        return "refused:" + content_hash(self.reason)


@dataclass(frozen=True, slots=True)
class FolderListing:
    files: tuple[SourceFile, ...]
    refused: tuple[RefusedEntry, ...]


@dataclass(frozen=True, slots=True)
class FileContent:
    digest: str  # sha256 of the bytes and a trailing 0x1f (as ``ids.content_hash`` of the decoded text)
    size: int
    data: bytes | None  # None when the file is larger than the limit it was read with
    modified: float  # seconds since the epoch, of the file read


def relative_posix(path: Path, root: Path) -> str:
    """``path.relative_to(root).as_posix()`` for a path ``list_folder`` found under ``root``, cut from its text where
    it starts with the root's: every scan and re-sync names every file of a folder, and pathlib's parsing took 0.1 s
    of a 3k-file folder's 0.2 s."""
    text, prefix = str(path), f"{root}{os.sep}"
    if os.sep == "/" and text.startswith(prefix):
        return text[len(prefix):]
    return path.relative_to(root).as_posix()


def has_suffix(name: str, suffixes: Collection[str]) -> bool:
    """Whether a file name's extension, lower-cased, is one of ``suffixes`` (each with its dot): ``Path.suffix``'s
    rule (from the last dot, which neither starts nor ends the name), without building a path for each name listed."""
    dot = name.rfind(".")
    return (name[dot:] if 0 < dot < len(name) - 1 else "").lower() in suffixes


def list_folder(root: Path, wanted: Callable[[str], bool], *, follow_symlinks: bool) -> FolderListing:
    """Files under ``root`` whose name ``wanted`` accepts, in a deterministic order (by path relative to the root),
    and the links and special files among them that are not read, each with the reason."""
    real_root = root.resolve()
    files: list[SourceFile] = []
    refused: list[RefusedEntry] = []
    # (directory as it appears under the root, real directories on the way to it: a followed link back into one of
    # them would loop)
    pending: list[tuple[Path, tuple[Path, ...]]] = [(root, (real_root,))]
    while pending:
        directory, lineage = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError:
            continue  # as os.walk: an unlistable sub-folder holds nothing that can be read
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            if entry.is_symlink():
                shown = relative_posix(path, root)
                target = Path(os.path.realpath(path))
                is_dir = target.is_dir()
                if not is_dir and not wanted(entry.name):
                    continue
                if not target.is_relative_to(real_root):
                    refused.append(_outside(path, shown, target, real_root))
                elif not follow_symlinks:
                    refused.append(_not_followed(path, shown, target))
                elif is_dir and target in lineage:
                    refused.append(RefusedEntry(path, f"symbolic link loop: {shown} points to {target}, a folder "
                                                      "it is inside of; not followed"))
                elif is_dir:
                    pending.append((path, (*lineage, target)))
                elif target.is_file():
                    files.append(SourceFile(path, target))
                else:
                    refused.append(RefusedEntry(path, f"not a regular file: symbolic link {shown} points to "
                                                      f"{target}, which is missing or not a file; not read"))
            elif entry.is_dir(follow_symlinks=False):
                pending.append((path, (*lineage, Path(os.path.realpath(path)))))
            elif wanted(entry.name):
                if entry.is_file(follow_symlinks=False):
                    files.append(SourceFile(path, path))
                else:
                    refused.append(RefusedEntry(path, f"not a regular file: {relative_posix(path, root)} is a pipe, "
                                                      "socket or device; not read"))
    def relative(item: SourceFile | RefusedEntry) -> str:
        return relative_posix(item.path, root)

    return FolderListing(tuple(sorted(files, key=relative)), tuple(sorted(refused, key=relative)))


def check_inside(root: Path, path: Path, *, follow_symlinks: bool) -> RefusedEntry | None:
    """Why the one file ``path`` (a fixed name under ``root``, such as an eval set's ``corpus.jsonl``) may not be
    read, or None when it may: the same rule as ``list_folder``."""
    if not path.is_symlink():
        return None
    target = Path(os.path.realpath(path))
    real_root = root.resolve()
    shown = path.relative_to(root).as_posix()
    if not target.is_relative_to(real_root):
        return _outside(path, shown, target, real_root)
    if not follow_symlinks:
        return _not_followed(path, shown, target)
    return None


def _outside(path: Path, shown: str, target: Path, real_root: Path) -> RefusedEntry:
    return RefusedEntry(path, f"symbolic link out of the source folder: {shown} points to {target}, outside "
                              f"{real_root}; not read")


def _not_followed(path: Path, shown: str, target: Path) -> RefusedEntry:
    return RefusedEntry(path, f"symbolic link not followed: {shown} points to {target}; set follow_symlinks: true "
                              "on the source to read links inside its folder")


def read_file(file: SourceFile, max_bytes: int) -> FileContent:
    """The file's digest and size, and its bytes when there are at most ``max_bytes`` of them.

    Opened without following a link (``file.target`` is already resolved) and checked to be a regular file after
    opening, so a file swapped for a link or a pipe between listing and reading raises ``OSError`` instead of being
    read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    descriptor = os.open(file.target, flags)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{file.path} is not a regular file")
        digest = hashlib.sha256()
        if info.st_size <= max_bytes:
            data = handle.read()
            if len(data) <= max_bytes:  # it may have grown since fstat
                digest.update(data + b"\x1f")
                return FileContent(digest.hexdigest(), len(data), data, info.st_mtime)
            digest.update(data)
            size = len(data)
        else:
            size = 0
        while piece := handle.read(READ_PIECE):
            digest.update(piece)
            size += len(piece)
        digest.update(b"\x1f")
        return FileContent(digest.hexdigest(), size, None, info.st_mtime)
