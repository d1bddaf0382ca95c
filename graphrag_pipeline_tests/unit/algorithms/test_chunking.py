"""Chunking: exact substrings, exact fixed windows, heading-aware recursive splits, content-derived ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphrag_pipeline.lib.algorithms.chunking import (
    TOKENIZE_WINDOW,
    HuggingFaceTokenizer,
    Tokenizer,
    WordTokenizer,
    chunk_document,
    document_token_spans,
)
from graphrag_pipeline.lib.core.config import ChunkingConfig, EmbedderConfig, FolderSource
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Chunk, Document
from graphrag_pipeline.lib.embed.embedders import bundled_model_path
from graphrag_pipeline.lib.embed.numpy_encoder import NumpyEmbedder
from graphrag_pipeline.lib.sources.folder import read_folder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
WORDS = WordTokenizer()


def doc(text: str, doc_id: str = "test:doc.md") -> Document:
    return Document(doc_id=doc_id, source="test", uri="", title="doc", text=text, content_hash=content_hash(text))


def words(count: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{index}" for index in range(count))


def assert_exact_slices(document: Document, chunks: list[Chunk]) -> None:
    for position, chunk in enumerate(chunks):
        assert chunk.position == position
        assert chunk.doc_id == document.doc_id
        assert document.text[chunk.start_char : chunk.end_char] == chunk.text
        assert chunk.text == chunk.text.strip()


@pytest.fixture(scope="module")
def runbooks() -> dict[str, Document]:
    scan = read_folder(FolderSource(name="runbooks", path=str(FIXTURES / "runbooks")))
    return {document.doc_id: document for document in scan.documents}


@pytest.mark.parametrize("strategy", ["recursive", "fixed"])
@pytest.mark.parametrize("text", ["", "   \n\t\n "])
def test_blank_document_has_no_chunks(strategy: str, text: str) -> None:
    assert chunk_document(doc(text), strategy=strategy, size=16, overlap=2) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"size": 10, "overlap": 10}, "overlap"),
        ({"size": 10, "overlap": -1}, "overlap"),
        ({"size": 0, "overlap": 0}, "size"),
        ({"size": 10, "overlap": 2, "strategy": "semantic"}, "strategy"),
    ],
)
def test_invalid_settings_are_rejected(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chunk_document(doc("some text"), **options)


def test_word_tokenizer_spans_words_and_punctuation() -> None:
    text = "Pod crash-looping: restart x2."
    assert [text[start:end] for start, end in WORDS.encode_offsets(text)] == [
        "Pod", "crash", "-", "looping", ":", "restart", "x2", ".",
    ]  # fmt: skip
    assert isinstance(WORDS, Tokenizer)


def test_fixed_windows_have_exact_sizes_and_overlap() -> None:
    document = doc(words(25))

    chunks = chunk_document(document, strategy="fixed", size=10, overlap=3, tokenizer=WORDS)

    assert [chunk.text.split() for chunk in chunks] == [
        [f"w{index}" for index in range(start, min(start + 10, 25))] for start in (0, 7, 14, 21)
    ]
    assert [chunk.token_count for chunk in chunks] == [10, 10, 10, 4]
    assert_exact_slices(document, chunks)


def test_fixed_windows_without_overlap_tile_the_document() -> None:
    document = doc("alpha, beta; gamma. " * 7)

    chunks = chunk_document(document, strategy="fixed", size=5, overlap=0)

    assert sum(chunk.token_count for chunk in chunks) == len(WORDS.encode_offsets(document.text))
    assert all(chunk.token_count == 5 for chunk in chunks[:-1])
    assert all(left.end_char <= right.start_char for left, right in zip(chunks, chunks[1:]))
    assert_exact_slices(document, chunks)


def test_chunk_config_applies_directly() -> None:
    config = ChunkingConfig(strategy="fixed", size=16, overlap=4)
    chunks = chunk_document(doc(words(40)), **config.model_dump(), tokenizer=WORDS)
    assert [chunk.token_count for chunk in chunks] == [16, 16, 16]


def test_recursive_keeps_sections_apart_and_records_heading_paths() -> None:
    text = (
        f"# Service\n\nIntro {words(3)}.\n\n## Meaning\n\n{words(12, 'm')}.\n\n"
        f"## Impact\n\n{words(12, 'i')}.\n\n### Detail\n\n{words(4, 'd')}.\n"
    )
    document = doc(text)

    # Section sizes in tokens: intro 7, Meaning 16, Impact 16, Detail 9.
    chunks = chunk_document(document, size=25, overlap=4, tokenizer=WORDS)

    assert [chunk.headings for chunk in chunks] == [
        ("Service",),  # the intro merges with "Meaning": the path they share is the title
        ("Service", "Impact"),  # "Impact" and its subsection fit together exactly
    ]
    assert chunks[0].text.startswith("# Service") and chunks[0].text.endswith("m11.")
    assert chunks[1].text.startswith("## Impact") and chunks[1].text.endswith("d3.")
    assert [chunk.token_count for chunk in chunks] == [23, 25]

    smaller = chunk_document(document, size=20, overlap=4, tokenizer=WORDS)
    assert [chunk.headings[-1] for chunk in smaller] == ["Service", "Meaning", "Impact", "Detail"]
    assert_exact_slices(document, chunks)


def test_recursive_splits_a_long_section_at_paragraphs_with_overlap() -> None:
    paragraphs = [f"{words(8, f'p{index}_')}." for index in range(5)]
    text = "# Title\n\n## Long\n\n" + "\n\n".join(paragraphs) + "\n\n## Next\n\nshort."
    document = doc(text)

    chunks = chunk_document(document, size=24, overlap=6, tokenizer=WORDS)

    long_chunks = [chunk for chunk in chunks if chunk.headings[-1:] != ("Next",)]
    assert len(long_chunks) > 1
    for chunk in long_chunks[1:]:
        assert chunk.text.startswith("p")  # pieces start on a paragraph (the overlap) not mid-sentence
    for left, right in zip(long_chunks, long_chunks[1:]):
        assert left.text.endswith(".")  # ...and end on one
        assert right.start_char < left.end_char  # consecutive pieces of one section overlap
    assert chunks[-1].text == "## Next\n\nshort."
    assert chunks[-1].headings == ("Title", "Next")
    assert all(chunk.token_count <= 24 for chunk in chunks)
    assert_exact_slices(document, chunks)


def test_recursive_falls_back_to_sentences_then_fixed_windows() -> None:
    sentences = " ".join(f"{words(7, f's{index}_')}." for index in range(4))
    run_on = words(30, "r")
    document = doc(f"{sentences}\n\n{run_on}")

    chunks = chunk_document(document, size=16, overlap=0, tokenizer=WORDS)

    sentence_chunks = [chunk for chunk in chunks if chunk.text.startswith("s")]
    assert [chunk.text.count(".") for chunk in sentence_chunks] == [2, 2]  # two whole 8-token sentences each
    run_on_chunks = [chunk for chunk in chunks if chunk.text.startswith("r")]
    assert [chunk.token_count for chunk in run_on_chunks] == [16, 14]
    assert_exact_slices(document, chunks)


def test_hashes_in_code_blocks_are_not_headings() -> None:
    text = "# Runbook\n\n## Diagnosis\n\n```shell\n# list pods\nkubectl get pods\n```\n\nafter the block\n"
    chunks = chunk_document(doc(text), size=200, overlap=0, tokenizer=WORDS)
    assert [chunk.headings for chunk in chunks] == [("Runbook",)]
    chunks = chunk_document(doc(text), size=12, overlap=0, tokenizer=WORDS)
    assert len(chunks) > 1
    # The heading-only title joins the first piece of its subsection, which is why that piece shares the title path.
    assert [chunk.headings for chunk in chunks] == [("Runbook",)] + [("Runbook", "Diagnosis")] * (len(chunks) - 1)


def test_ids_are_stable_unique_and_follow_the_text() -> None:
    text = "# A\n\nsame words here\n\n# B\n\nsame words here\n\n# A\n\nsame words here\n"
    first = chunk_document(doc(text), size=5, overlap=0)  # one section per chunk
    again = chunk_document(doc(text), size=5, overlap=0)
    edited = chunk_document(doc(text.replace("B", "C")), size=5, overlap=0)
    other_doc = chunk_document(doc(text, doc_id="test:other.md"), size=5, overlap=0)

    assert [chunk.chunk_id for chunk in first] == [chunk.chunk_id for chunk in again]
    assert first[0].text == first[2].text  # identical passages…
    assert len({chunk.chunk_id for chunk in first}) == len(first)  # …still get distinct ids
    assert len(first) == 3
    assert edited[1].chunk_id != first[1].chunk_id
    assert (edited[0].chunk_id, edited[2].chunk_id) == (first[0].chunk_id, first[2].chunk_id)  # untouched text
    assert not {chunk.chunk_id for chunk in other_doc} & {chunk.chunk_id for chunk in first}
    assert all(chunk.chunk_id.startswith("chunk-") for chunk in first)


class _BrokenTokenizer:
    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(0, 4), (2, 6)]


def test_overlapping_token_spans_are_rejected() -> None:
    with pytest.raises(ValueError, match="out of order"):
        chunk_document(doc("overlapping spans"), size=8, overlap=0, tokenizer=_BrokenTokenizer())


@pytest.mark.parametrize("strategy", ["recursive", "fixed"])
def test_real_runbooks_chunk_into_exact_bounded_slices(runbooks: dict[str, Document], strategy: str) -> None:
    for document in runbooks.values():
        chunks = chunk_document(document, strategy=strategy, size=48, overlap=8, tokenizer=WORDS)
        assert len(chunks) > 1
        assert all(chunk.token_count <= 48 for chunk in chunks)
        assert_exact_slices(document, chunks)
        assert chunks[0].start_char == 0 and chunks[-1].end_char == len(document.text.rstrip())


def test_real_runbook_chunks_carry_their_section_headings(runbooks: dict[str, Document]) -> None:
    document = runbooks["runbooks:NodeRAIDDegraded.md"]

    chunks = chunk_document(document, size=48, overlap=8, tokenizer=WORDS)

    assert all(chunk.headings[0] == "NodeRAIDDegraded" for chunk in chunks)
    mitigation = [chunk for chunk in chunks if "Cordon and drain" in chunk.text]
    assert [chunk.headings for chunk in mitigation] == [("NodeRAIDDegraded", "Mitigation")]
    assert all("## Impact" not in chunk.text or "## Diagnosis" not in chunk.text for chunk in chunks)


@pytest.fixture(scope="module")
def minilm_tokenizer() -> NumpyEmbedder:
    """The offline model's tokenizer, as the build's embedder applies it."""
    return NumpyEmbedder(str(bundled_model_path()), EmbedderConfig())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["recursive", "fixed"])
def test_minilm_tokenizer_chunks_never_exceed_the_size(
    minilm_tokenizer: NumpyEmbedder, runbooks: dict[str, Document], strategy: str
) -> None:
    for document in runbooks.values():
        chunks = chunk_document(document, strategy=strategy, size=32, overlap=4, tokenizer=minilm_tokenizer)
        assert len(chunks) > 2
        assert_exact_slices(document, chunks)
        for chunk in chunks:
            # Cuts fall between words, so the embedder re-tokenizing a chunk sees exactly the measured tokens.
            assert len(minilm_tokenizer.encode_offsets(chunk.text)) == chunk.token_count <= 32


@pytest.mark.slow
def test_minilm_tokenizer_gives_a_batch_the_tokens_it_gives_each_text(
    minilm_tokenizer: NumpyEmbedder, runbooks: dict[str, Document]
) -> None:
    texts = [document.text for document in runbooks.values()] + ["", "naïve café ☕ 日本語"]
    batched = minilm_tokenizer.encode_offsets_batch(texts)
    assert batched == [minilm_tokenizer.encode_offsets(text) for text in texts]
    assert all(batched[:-2])


class BatchWordTokenizer(WordTokenizer):
    """Words, with a batch method that records the batches it is given."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def encode_offsets_batch(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        self.batches.append(list(texts))
        return [self.encode_offsets(text) for text in texts]


def test_a_batch_of_documents_is_tokenized_in_one_call_and_each_gets_its_own_tokens() -> None:
    long_text = words(3 * TOKENIZE_WINDOW // 5)  # several windows
    documents = [doc(words(40), "t:a"), doc("", "t:empty"), doc(long_text, "t:long"), doc("# Title\n\nbody.", "t:b")]
    tokenizer = BatchWordTokenizer()

    spans = document_token_spans([d.text for d in documents], tokenizer, [d.doc_id for d in documents])

    assert len(tokenizer.batches) == 1
    assert "".join(tokenizer.batches[0]) == "".join(d.text for d in documents)  # every window, once, in order
    assert len(tokenizer.batches[0]) > len(documents) - 1  # the long document in several windows
    # Windows end at whitespace, so word tokens are those of the whole text, at document offsets.
    assert spans == [WORDS.encode_offsets(d.text) for d in documents]
    for document, document_spans in zip(documents, spans):
        assert chunk_document(document, size=50, overlap=10, spans=document_spans) == chunk_document(
            document, size=50, overlap=10, tokenizer=WORDS)


def test_hugging_face_adapter_requires_offsets() -> None:
    class SlowTokenizer:
        is_fast = False

    with pytest.raises(ValueError, match="fast"):
        HuggingFaceTokenizer(SlowTokenizer())
