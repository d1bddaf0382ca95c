"""How the local model's texts are cut into batches (``length_batches``)."""

from __future__ import annotations

import random

from graphrag_pipeline.lib.embed.numpy_encoder import length_batches


def test_every_text_goes_in_one_batch_shortest_first_within_both_caps():
    lengths = [random.Random(seed).randint(1, 256) for seed in range(300)]
    batches = length_batches(lengths, batch_size=64, batch_tokens=512)

    assert sorted(i for batch in batches for i in batch) == list(range(300))
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(flat)
    for batch in batches:
        assert len(batch) <= 64
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 512


def test_names_fill_a_batch_and_long_texts_go_a_few_at_a_time():
    names, chunks = [6] * 200, [200] * 10
    assert [len(b) for b in length_batches(names, batch_size=64, batch_tokens=512)] == [64, 64, 64, 8]
    assert [len(b) for b in length_batches(chunks, batch_size=64, batch_tokens=512)] == [2, 2, 2, 2, 2]


def test_a_text_longer_than_the_budget_is_a_batch_of_its_own():
    assert length_batches([700, 3, 900], batch_size=64, batch_tokens=512) == [[1], [0], [2]]
    assert length_batches([], batch_size=64, batch_tokens=512) == []
