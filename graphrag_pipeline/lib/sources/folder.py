"""Folder sources: files under a directory, by content hash.

Markdown (``.md``, ``.markdown``) and every other text format but HTML have their YAML front matter moved into
``metadata`` (the reader's own keys ``path``, ``extension`` and ``modified`` take precedence); HTML (``.html``,
``.htm``) is reduced to text with headings kept as ``#`` lines (``lib.sources.html_text``). Files must be UTF-8
(a BOM is fine). A file that is not UTF-8 becomes a ``Quarantined`` record with the reason, and the read goes on.

What is read: only files inside the folder (``lib.sources.paths``: a symbolic link out of it is refused and
quarantined, one inside it is followed only with ``follow_symlinks``), and only files of at most the source's
``max_document_bytes``.

Access fails closed: a file's front matter may narrow its folder's ``access_groups``, never widen them
(``file_access_groups``). A front matter block that is not a valid YAML mapping (aliases and duplicate keys refused),
that is never closed, that spells ``access_groups`` another way, or an ``access_groups`` value that is not a list of
group names, quarantines the document: it is not indexed, and an earlier version of it is withdrawn,
because who may read it is unknown.

Identity and change detection: a document's id is the source name plus the file's path, so an edited file keeps its
id. Its ``content_hash`` is ``content_hash(raw file text)`` (with the folder's access groups, when it has any), which
equals the cheap byte hash of ``scan_folder_hashes``, so a sensor cursor and the indexed documents can be compared
directly. The modification time is metadata only: touching a file does not make it "changed".
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import yaml

from graphrag_pipeline.lib.core.config import FolderSource
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document, Quarantined
from graphrag_pipeline.lib.sources.html_text import html_to_text
from graphrag_pipeline.lib.sources.paths import FolderListing, has_suffix, list_folder, read_file, relative_posix
from graphrag_pipeline.lib.sources.reader import (
    RAW_EXCERPT,
    STAGE,
    ReadContext,
    SourceScan,
    json_safe,
    load_untrusted_yaml,
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
        return read_folder(source, context)


def scan_folder_hashes(source: FolderSource) -> dict[str, str]:
    """Cheap change scan for sensors: doc_id -> hash of the raw bytes, without decoding or parsing anything."""
    root = _folder_root(source)
    listing = _source_files(source, root)
    hashes = {_doc_id(source, root, refused.path): refused.marker for refused in listing.refused}
    for file in listing.files:
        try:
            hashes[_doc_id(source, root, file.path)] = _with_access(source, read_file(file, 0).digest)
        except OSError as error:
            hashes[_doc_id(source, root, file.path)] = unreadable_marker(error)
    return hashes


def read_folder(source: FolderSource, context: ReadContext | None = None) -> SourceScan:
    """Every file's change hash, and the documents of those files the context wants (all of them without one): a
    re-sync of a few shards decodes and parses only their new and changed files."""
    root = _folder_root(source)
    listing = _source_files(source, root)
    documents: list[Document] = []
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    withdrawn: set[str] = set()
    for refused in listing.refused:
        doc_id = _doc_id(source, root, refused.path)
        hashes[doc_id] = refused.marker
        quarantined.append(Quarantined(STAGE, doc_id, refused.reason))
        withdrawn.add(doc_id)
    for file in listing.files:
        doc_id = _doc_id(source, root, file.path)
        try:
            content = read_file(file, source.max_document_bytes)
        except OSError as error:
            hashes[doc_id] = unreadable_marker(error)
            quarantined.append(Quarantined(STAGE, doc_id, f"cannot read {file.path}: {error}"))
            continue
        hashes[doc_id] = _with_access(source, content.digest)
        if content.data is None:
            reason = (f"over max_document_bytes: {content.size} bytes, more than the source's limit "
                      f"({source.max_document_bytes}); not read: split the file or raise the limit")
            quarantined.append(Quarantined(STAGE, doc_id, reason))
            withdrawn.add(doc_id)
            continue
        if context is not None and not context.wants(doc_id, hashes[doc_id]):
            continue
        try:
            raw_text = content.data.decode("utf-8")
        except UnicodeDecodeError as error:
            # Guessing another encoding would index mojibake without anyone noticing; the user should convert it.
            reason = f"not valid UTF-8 ({error.reason} at byte {error.start}); convert the file to UTF-8"
            quarantined.append(Quarantined(STAGE, doc_id, reason))
            continue
        parsed = _parse_file(source, root, file.path, doc_id, raw_text, content.modified)
        if isinstance(parsed, Quarantined):
            quarantined.append(parsed)
            withdrawn.add(doc_id)
        else:
            documents.append(parsed)
    return SourceScan(documents=tuple(documents), quarantined=tuple(quarantined), hashes=hashes,
                      revision=git_revision(root), withdrawn=frozenset(withdrawn))


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


def _source_files(source: FolderSource, root: Path) -> FolderListing:
    """Files with a configured extension, hidden files and folders skipped, links checked, in a deterministic order."""
    suffixes = {ext.lower() if ext.startswith(".") else f".{ext.lower()}" for ext in source.extensions}
    return list_folder(root, lambda name: has_suffix(name, suffixes),
                       follow_symlinks=source.follow_symlinks)


def _doc_id(source: FolderSource, root: Path, path: Path) -> str:
    return f"{source.name}:{relative_posix(path, root)}"


def _with_access(source: FolderSource, digest: str) -> str:
    """A folder's configured access groups are part of each file's identity: granting or revoking them re-ingests
    the files (and the cheap sensor scan sees the same change)."""
    return content_hash(digest, *sorted(source.access_groups)) if source.access_groups else digest


def _parse_file(
    source: FolderSource, root: Path, path: Path, doc_id: str, raw_text: str, modified: float
) -> Document | Quarantined:
    """The file's document, or why it may not be indexed."""
    text = raw_text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    suffix = path.suffix.lower()
    front_matter: dict[str, Any] = {}
    if suffix in HTML_SUFFIXES:
        html_title, text = html_to_text(text)
        title = html_title or _file_title(path)
    else:  # front matter is read from any text format: a .txt file may say who can read it as well
        split = _split_front_matter(text, doc_id)
        if isinstance(split, Quarantined):
            return split
        text, front_matter = split
        title = _text_title(front_matter.get("title")) or (
            _first_markdown_h1(text) if suffix in MARKDOWN_SUFFIXES else None) or _file_title(path)
    try:
        groups = file_access_groups(source.access_groups, front_matter)
    except ValueError as error:
        return Quarantined(STAGE, doc_id, f"invalid access_groups: {error}; not indexed until it is fixed",
                           raw=repr(front_matter.get(ACCESS_GROUPS))[:RAW_EXCERPT])
    metadata = {
        **json_safe({key: value for key, value in front_matter.items() if key != ACCESS_GROUPS}),
        **({ACCESS_GROUPS: groups} if groups else {}),
        "path": relative_posix(path, root),
        "extension": suffix,
        "modified": dt.datetime.fromtimestamp(modified, tz=dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return Document(
        doc_id=doc_id,
        source=source.name,
        uri=path.resolve().as_uri(),
        title=title,
        text=text,
        content_hash=_with_access(source, content_hash(raw_text)),
        metadata=metadata,
    )


ACCESS_GROUPS = "access_groups"


def file_access_groups(configured: tuple[str, ...], front_matter: dict[str, Any]) -> list[str]:
    """Who may read one file (sorted; empty: everyone): its folder's configured groups, narrowed by the file.

    A file may only narrow: with no groups configured, the file's ``access_groups`` apply; with groups configured,
    the file keeps those of its groups that the folder also has (an empty list changes nothing, and a list sharing
    no group with the folder's is an error: its author meant a restriction this folder cannot express). Raises
    ``ValueError`` with the reason when ``access_groups`` is present but not a list of non-empty strings.
    """
    if ACCESS_GROUPS not in front_matter:
        return sorted(set(configured))
    declared = front_matter[ACCESS_GROUPS]
    if not isinstance(declared, list):
        raise ValueError(f"front matter access_groups is a {type(declared).__name__} ({declared!r:.80}), not a list "
                         "of group names such as [sre]")
    bad = [group for group in declared if not isinstance(group, str) or not group.strip()]
    if bad:
        raise ValueError(f"front matter access_groups holds {bad!r:.80}: every group must be a non-empty name")
    wanted = {group.strip() for group in declared}
    if not configured:
        return sorted(wanted)
    if not wanted:
        return sorted(set(configured))
    kept = wanted & set(configured)
    if not kept:
        raise ValueError(f"front matter access_groups {sorted(wanted)} share no group with the folder's "
                         f"{sorted(configured)}; a file may only narrow its folder's groups")
    return sorted(kept)


_OPENING = re.compile(r"---[ \t]*(?:\n|\Z)")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)


def _split_front_matter(text: str, doc_id: str) -> tuple[str, dict[str, Any]] | Quarantined:
    """(body, front matter), or the quarantine record of a front matter block that cannot be read strictly: it may
    hold the file's access groups, so the file is not indexed without it. Strictly: blank lines before the opening
    ``---`` do not hide it; an opening ``---`` without a closing one, a duplicate key, a YAML alias, or a key that is
    ``access_groups`` in another spelling (``Access_Groups``) quarantines the file."""
    stripped = text.lstrip("\n \t")
    if _OPENING.match(stripped) is None:
        return text, {}
    match = _FRONT_MATTER.match(stripped)
    if match is None:
        reason = ("front matter opened with --- is never closed (a --- or ... line); not indexed until it is fixed "
                  "(it may say who can read the file)")
        return Quarantined(STAGE, doc_id, reason, raw=stripped[:RAW_EXCERPT])
    text = stripped
    block = match.group(1)
    try:
        data = load_untrusted_yaml(block)
    except yaml.YAMLError as error:
        reason = f"invalid YAML front matter, not indexed until it is fixed (it may say who can read the file): {error}"
        return Quarantined(STAGE, doc_id, reason, raw=block[:RAW_EXCERPT])
    if data is None:
        data = {}
    if not isinstance(data, dict):
        reason = (f"front matter is a {type(data).__name__}, not a mapping; not indexed until it is fixed (it may say "
                  "who can read the file)")
        return Quarantined(STAGE, doc_id, reason, raw=block[:RAW_EXCERPT])
    misspelled = [str(key) for key in data if str(key) != ACCESS_GROUPS
                  and re.sub(r"[\s_-]+", "_", str(key).strip().casefold()) == ACCESS_GROUPS]
    if misspelled:
        reason = (f"front matter key {misspelled[0]!r} is not spelled access_groups; not indexed until it is fixed "
                  "(it says who can read the file)")
        return Quarantined(STAGE, doc_id, reason, raw=block[:RAW_EXCERPT])
    return text[match.end() :].lstrip("\n"), {str(key): value for key, value in data.items()}


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
        if fence is None and (heading := _H1.match(line)) and (title := plain_heading(heading.group(1))):
            return title
    return None


_HTML_TAG = re.compile(r"<[^>]*>")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(?<!\w)[*_]{1,3}|[*_]{1,3}(?!\w)")


def plain_heading(heading: str) -> str:
    """A Markdown heading as a title reads: HTML tags and images dropped, links as their text, code and emphasis
    marks gone (``# <img src="logo.png"> OpenTelemetry Demo`` is "OpenTelemetry Demo")."""
    text = _IMAGE.sub("", heading)
    text = _LINK.sub(r"\1", text)
    text = _HTML_TAG.sub(" ", text).replace("`", "")
    text = _EMPHASIS.sub("", text)
    return " ".join(text.split())


_GENERIC_STEMS = frozenset({"readme", "index", "_index", "overview", "main"})


def _file_title(path: Path) -> str:
    """Title from the file name; "README" or "index" says nothing, so those take their folder's name too."""
    if path.stem.casefold() in _GENERIC_STEMS:
        return f"{path.parent.name} {path.stem}"
    return path.stem


def _text_title(value: Any) -> str:
    return str(value).strip() if value is not None else ""
