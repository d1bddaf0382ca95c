import hashlib

import pytest

from graphrag_pipeline.lib.core.ids import content_hash, hashed_id_bytes, short_hash, short_id


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


def test_an_id_the_pipeline_made_packs_into_the_bytes_that_give_it_back():
    made = short_id("ent", "lake kivu")
    packed = hashed_id_bytes(made, "ent-")
    assert packed is not None and len(packed) == 16 and "ent-" + packed.hex() == made


@pytest.mark.parametrize("identifier", [
    "e1",                                   # a test's or an import's own id
    "rel-" + short_hash("r"),               # another kind's prefix
    "ent-" + short_hash("x").upper(),       # digits that would not give the same text back
    "ent-" + short_hash("x")[:30],          # too short for a hash
    "ent-" + short_hash("x") + "00",        # too long
    "ent-" + short_hash("x")[:30] + " a",   # fromhex would skip the space
])
def test_any_other_id_is_not_packed(identifier):
    assert hashed_id_bytes(identifier, "ent-") is None
