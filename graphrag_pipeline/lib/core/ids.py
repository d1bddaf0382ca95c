"""Content-derived identifiers.

Every id in the pipeline is a hash of what the thing *is*, so re-running a stage on unchanged input produces the
same ids and upserts converge instead of duplicating (the nano-graphrag `compute_mdhash_id` idea).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid

_WHITESPACE = re.compile(r"\s+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def content_hash(*parts: str) -> str:
    """Stable hex digest of the given strings, each followed by a unit separator (so that ("ab", "c") != ("a",
    "bc")): the SHA-256 of that text in UTF-8, hashed in one call (a community's hash has thousands of parts)."""
    text = "\x1f".join(parts) + "\x1f" if parts else ""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


SHORT_HASH_CHARS = 32  # 128 bits


def short_hash(*parts: str) -> str:
    """The first 128 bits of ``content_hash``: plenty to avoid collisions, in half the space of the bookkeeping rows
    that keep one per element, point or chunk."""
    return content_hash(*parts)[:SHORT_HASH_CHARS]


def hex_bytes(text: str) -> bytes | None:
    """The bytes whose lower-case hex digits are ``text``, or None when ``text`` is not exactly that: a store keeps a
    digest as its bytes, in half the space, where it can give the same text back."""
    try:
        packed = bytes.fromhex(text)
    except ValueError:
        return None
    return packed if packed.hex() == text else None


def hashed_id_bytes(identifier: str, prefix: str) -> bytes | None:
    """The 16 bytes of an id the pipeline made (``prefix``, such as "ent-", then ``short_hash``'s digits: ``short_id``),
    or None for any other id: the stores keep such an id as its bytes where the column or row gives the prefix back.
    No regular expression: SQLite calls it for each id of a read's list."""
    if len(identifier) == len(prefix) + SHORT_HASH_CHARS and identifier.startswith(prefix):
        return hex_bytes(identifier[len(prefix):])
    return None


def short_id(prefix: str, *parts: str) -> str:
    """A readable, content-derived id such as ``chunk-3f2a…``."""
    return f"{prefix}-{short_hash(*parts)}"


def point_uuid(item_id: str) -> str:
    """Deterministic UUID for vector stores that only accept UUIDs or integers as point ids (Qdrant)."""
    return str(uuid.UUID(hex=content_hash(item_id)[:32]))


def normalize_name(name: str) -> str:
    """Canonical key of an entity name: Unicode-normalized, case-folded, whitespace collapsed, edge punctuation gone.

    "Payments-API", " payments-api " and "payments-api." all map to "payments-api" (and "Zürich" to "zurich"), so
    one real-world entity is one node. Aliases from configuration are applied on top of this key.
    """
    # CamelCase is split so an alert rule and the runbook titled after it are one node:
    # "NodeRAIDDegraded" and "Node RAID Degraded" both become "node raid degraded".
    text = _CAMEL_BOUNDARY.sub(" ", name).casefold()
    # Accents are folded too: a question typed as "Aschenbrodel" must find the node "Aschenbrödel". ASCII text has
    # neither accents nor compatibility forms, and folding character by character was most of this function's time.
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = unicodedata.normalize("NFKC", "".join(ch for ch in text if not unicodedata.combining(ch)))
    text = text.replace("\u2019", "'").replace("`", "'")
    text = _WHITESPACE.sub(" ", text).strip(" \t\n\"'.,;:!?()[]{}")
    text = re.sub(r"\s*-\s*", "-", text) if " - " in text else text
    return text


def name_variants(name: str) -> set[str]:
    """The normalized spellings one name takes in text: as written, and with its words joined by spaces, by hyphens
    or not at all ("payments-api", "payments api", "paymentsapi"; CamelCase is split by ``normalize_name``)."""
    return key_variants(normalize_name(name))


def key_variants(key: str) -> set[str]:
    """``name_variants`` of a name whose ``normalize_name`` key is ``key``."""
    words = re.split(r"[\s_\-]+", key)
    if len(words) == 1:
        return {key} if key else set()
    return {key, " ".join(words), "-".join(words), "".join(words)}


def without_edge_words(key: str, words: frozenset[str]) -> str:
    """A normalized name without the given words at its start and end ("checkout service" → "checkout" when
    "service" is one of them); empty when nothing else is left."""
    parts = key.split()
    start, end = 0, len(parts)
    while start < end and parts[start] in words:
        start += 1
    while end > start and parts[end - 1] in words:
        end -= 1
    return " ".join(parts[start:end])


def is_plain_word(name: str) -> bool:
    """One word of letters written like an ordinary word ("cart", "Checkout"), not like a name of its own kind: no
    digit, joiner or space ("product-catalog", "Cart Service") and no inner capital ("LedgerService")."""
    word = name.strip()
    return bool(_LETTERS_ONLY.fullmatch(word)) and (word[1:].islower() or word.isupper() or len(word) == 1)


_LETTERS_ONLY = re.compile(r"[^\W\d_]+", re.UNICODE)


def entity_id(canonical_name: str) -> str:
    return short_id("ent", canonical_name)


def relationship_id(source_id: str, relation_type: str, target_id: str) -> str:
    return short_id("rel", source_id, relation_type, target_id)


def stable_shard(doc_id: str, shard_count: int) -> int:
    """Shard of a document: a hash of its id (not its content), so an edited document stays in its shard."""
    return int(content_hash(doc_id)[:8], 16) % shard_count


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def subject_key(title: str) -> str:
    """The entity a document is about, as a normalized name: its title without a trailing disambiguation
    ("Brand (play)" → "brand"), so an entity can be matched to the documents whose subject it is."""
    return normalize_name(_DISAMBIGUATION.sub("", title))
