"""Folder sources: files under a directory, by content hash.

Markdown (``.md``, ``.markdown``) has its YAML front matter moved into ``metadata`` (the reader's own keys ``path``,
``extension`` and ``modified`` take precedence); HTML (``.html``, ``.htm``) is reduced to text with headings kept as
``#`` lines (``lib.sources.html_text``); every other configured extension is read as plain text. Files must be UTF-8
(a BOM is fine). A file that is not UTF-8 or a front matter block that is not valid YAML becomes a ``Quarantined``
record with the reason, and the read goes on.

Identity and change detection: a document's id is the source name plus the file's path, so an edited file keeps its
id. Its ``content_hash`` is ``content_hash(raw file text)`` (with the folder's access groups, when it has any), which
equals the cheap byte hash of ``scan_folder_hashes``, so a sensor cursor and the indexed documents can be compared
directly. The modification time is metadata only: touching a file does not make it "changed".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import yaml

from graphrag_pipeline.lib.config import FolderSource
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.models import Document, Quarantined
from graphrag_pipeline.lib.sources.html_text import html_to_text
from graphrag_pipeline.lib.sources.reader import (
    RAW_EXCERPT,
    STAGE,
    ReadContext,
    SourceScan,
    json_safe,
    unreadable_marker,
)

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
HTML_SUFFIXES = frozenset({".html", ".htm"})


class FolderReader:
    """Markdown, text and HTML files of a folder (a git checkout works the same)."""

    default_poll_seconds = 60  # a scan is a directory walk hashing bytes

    def scan(self, source: FolderSource) -> dict[str, str]:
        return scan_folder_hashes(source)

    def read(self, source: FolderSource, context: ReadContext | None) -> SourceScan:
        return read_folder(source)


def scan_folder_hashes(source: FolderSource) -> dict[str, str]:
    """Cheap change scan for sensors: doc_id -> hash of the raw bytes, without decoding or parsing anything."""
    root = _folder_root(source)
    hashes: dict[str, str] = {}
    for path in _source_files(source, root):
        try:
            hashes[_doc_id(source, root, path)] = _with_access(source, _bytes_hash(path.read_bytes()))
        except OSError as error:
            hashes[_doc_id(source, root, path)] = unreadable_marker(error)
    return hashes


def read_folder(source: FolderSource) -> SourceScan:
    root = _folder_root(source)
    documents: list[Document] = []
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    for path in _source_files(source, root):
        doc_id = _doc_id(source, root, path)
        try:
            data = path.read_bytes()
            modified = path.stat().st_mtime
        except OSError as error:
            hashes[doc_id] = unreadable_marker(error)
            quarantined.append(Quarantined(STAGE, doc_id, f"cannot read {path}: {error}"))
            continue
        hashes[doc_id] = _with_access(source, _bytes_hash(data))
        try:
            raw_text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            # Guessing another encoding would index mojibake without anyone noticing; the user should convert it.
            reason = f"not valid UTF-8 ({error.reason} at byte {error.start}); convert the file to UTF-8"
            quarantined.append(Quarantined(STAGE, doc_id, reason))
            continue
        document, problems = _parse_file(source, root, path, doc_id, raw_text, modified)
        documents.append(document)
        quarantined.extend(problems)
    return SourceScan(documents=tuple(documents), quarantined=tuple(quarantined), hashes=hashes,
                      revision=git_revision(root))


def git_revision(folder: Path) -> str | None:
    """The commit checked out in the git work tree holding ``folder`` (read from .git, no git binary needed), or None.
    Changes are still found by content hash; the revision says which commit a run's documents came from."""
    for directory in (folder, *folder.parents):
        git = directory / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            git = (directory / git.read_text().split(":", 1)[1].strip()).resolve()
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref: "):
                return head  # detached HEAD
            ref = head[5:]
            if (git / ref).is_file():
                return (git / ref).read_text().strip()
            packed = git / "packed-refs"
            for line in packed.read_text().splitlines() if packed.is_file() else ():
                if line.endswith(f" {ref}"):
                    return line.split(" ", 1)[0]
        except OSError:
            return None
        return None
    return None


def _folder_root(source: FolderSource) -> Path:
    root = Path(source.path)
    if not root.is_dir():
        raise FileNotFoundError(f"source {source.name!r}: folder {root} does not exist")
    return root


def _source_files(source: FolderSource, root: Path) -> list[Path]:
    """Files with a configured extension, hidden files and folders skipped, in a deterministic order."""
    suffixes = {ext.lower() if ext.startswith(".") else f".{ext.lower()}" for ext in source.extensions}
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if not name.startswith(".")]
        for name in filenames:
            path = Path(directory, name)
            if not name.startswith(".") and path.suffix.lower() in suffixes:
                found.append(path)
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _doc_id(source: FolderSource, root: Path, path: Path) -> str:
    return f"{source.name}:{path.relative_to(root).as_posix()}"


def _bytes_hash(data: bytes) -> str:
    # Same construction as ids.content_hash over the decoded text, so both hashes agree for every UTF-8 file.
    return hashlib.sha256(data + b"\x1f").hexdigest()


def _with_access(source: FolderSource, digest: str) -> str:
    """A folder's configured access groups are part of each file's identity: granting or revoking them re-ingests
    the files (and the cheap sensor scan sees the same change)."""
    return content_hash(digest, *sorted(source.access_groups)) if source.access_groups else digest


def _parse_file(
    source: FolderSource, root: Path, path: Path, doc_id: str, raw_text: str, modified: float
) -> tuple[Document, list[Quarantined]]:
    text = raw_text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    suffix = path.suffix.lower()
    problems: list[Quarantined] = []
    front_matter: dict[str, Any] = {}
    if suffix in MARKDOWN_SUFFIXES:
        text, front_matter, problem = _split_front_matter(text, doc_id)
        if problem is not None:
            problems.append(problem)
        title = _text_title(front_matter.get("title")) or _first_markdown_h1(text) or _file_title(path)
    elif suffix in HTML_SUFFIXES:
        html_title, text = html_to_text(text)
        title = html_title or _file_title(path)
    else:
        title = _file_title(path)
    metadata = {
        # Front matter may restrict one file further; otherwise the folder's configured groups apply.
        **({"access_groups": list(source.access_groups)} if source.access_groups else {}),
        **json_safe(front_matter),
        "path": path.relative_to(root).as_posix(),
        "extension": suffix,
        "modified": dt.datetime.fromtimestamp(modified, tz=dt.timezone.utc).isoformat(timespec="seconds"),
    }
    document = Document(
        doc_id=doc_id,
        source=source.name,
        uri=path.resolve().as_uri(),
        title=title,
        text=text,
        content_hash=_with_access(source, content_hash(raw_text)),
        metadata=metadata,
    )
    return document, problems


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)


def _split_front_matter(text: str, doc_id: str) -> tuple[str, dict[str, Any], Quarantined | None]:
    """(body, front matter, problem). Invalid front matter stays in the body so the document is still indexed."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, {}, None
    block = match.group(1)
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as error:
        reason = f"invalid YAML front matter, indexed with the front matter left in the text: {error}"
        return text, {}, Quarantined(STAGE, doc_id, reason, raw=block[:RAW_EXCERPT])
    if data is None:
        data = {}
    if not isinstance(data, dict):
        reason = f"front matter is a {type(data).__name__}, not a mapping; indexed with it left in the text"
        return text, {}, Quarantined(STAGE, doc_id, reason, raw=block[:RAW_EXCERPT])
    return text[match.end() :].lstrip("\n"), {str(key): value for key, value in data.items()}, None


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_H1 = re.compile(r"^ {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def _first_markdown_h1(text: str) -> str | None:
    fence: str | None = None
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if opening is not None:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is None and (heading := _H1.match(line)):
            return heading.group(1).strip()
    return None


_GENERIC_STEMS = frozenset({"readme", "index", "_index", "overview", "main"})


def _file_title(path: Path) -> str:
    """Title from the file name; "README" or "index" says nothing, so those take their folder's name too."""
    if path.stem.casefold() in _GENERIC_STEMS:
        return f"{path.parent.name} {path.stem}"
    return path.stem


def _text_title(value: Any) -> str:
    return str(value).strip() if value is not None else ""
