import hashlib

import pytest

from graphrag_pipeline.lib.core.ids import content_hash, short_hash


def _part_by_part(*parts: str) -> str:
    """The digest every stored id and hash was made with: each part's UTF-8 bytes, then a unit separator."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\x1f")
    return digest.hexdigest()


@pytest.mark.parametrize("parts", [(), ("",), ("", ""), ("ab", "c"), ("a", "bc"), ("payments-api", "Zürich ☃ 東京"),
                                   tuple(f"ent-{i:032x}" for i in range(5000))])
def test_content_hash_is_the_digest_ids_were_stored_under(parts):
    assert content_hash(*parts) == _part_by_part(*parts)
    assert short_hash(*parts) == _part_by_part(*parts)[:32]


def test_content_hash_separates_parts():
    assert content_hash("ab", "c") != content_hash("a", "bc") != content_hash("abc")
