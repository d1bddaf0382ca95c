"""The retrieval mechanisms of graphrag_pipeline/query/retrievers.py, pinned one by one on a tiny purpose-built index.

The index is built by the real pipeline stages (reader, chunker, offline extractor, merge, graph and vector sync),
but with a deterministic bag-of-words embedder instead of MiniLM (`HashedEmbedder`: one bucket per word of the
test vocabulary, so no collisions), so every similarity below is a plain word-overlap cosine, and with entity spotting reduced to a dictionary of invented names (spaCy's NER labels all
mapped to null, document titles not turned into entities), so each passage mentions exactly the entities written in
`MENTIONS`. Every scenario uses its own vocabulary: a question shares words only with the passages of its scenario.

What is pinned (see the retrievers' module docstring):
* seeding: question-linked entities (name n-gram, or entity embedding >= 0.6) plus the entities of the top-5 entry
  chunks, weighted (first-hop similarity / best) ** 3, where a chunk's first-hop similarity is its cosine + 0.5 × its
  BM25 as a share of the question's best match;
* chunk graph score: max over reached entities of activation x specificity (1 / (1 + log10(mention count)))
  x 1.5 when the entity is the chunk's document title, clipped to 1; a chunk-seeded entity scores its own entry
  chunk only with the weight another entry chunk gave it;
* fusion: 0.7 * vector + 0.35 * graph, or reciprocal-rank fusion of the two rankings, a passage reached from an entry
  passage ranking no higher than it;
* fallback to plain vector search when nothing is linked and the entry chunks mention no entity.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from graphrag_pipeline.lib.algorithms.chunking import WordTokenizer
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.ids import entity_id, normalize_name
from graphrag_pipeline.lib.core.models import Entity
from graphrag_pipeline.lib.stages import build_everything
from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.lib.stores.protocols import SCORE_TOLERANCE, Embedder, TraversalHit
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline.query.engine import QueryEngine
from graphrag_pipeline.query.fusion import cap_at_origin, rank, reciprocal_rank_fusion, weighted_fusion
from graphrag_pipeline.query.retrievers import (
    ENTRY_KEYWORD_SHARE,
    MAX_CHUNKS_PER_ENTITY,
    GraphRetriever,
    IndexReader,
    Retrieval,
    strongest_contributions,
)
from graphrag_pipeline_tests.conftest import folder_settings

pytestmark = pytest.mark.slow  # the offline extractor loads spaCy (a few seconds)


# --- a deterministic embedder ------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from has have how in is it its of on or s the their this to was were "
    "what when where which who why with".split()
)


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


class HashedEmbedder:
    """Binary bag of content words, L2-normalized: the cosine of two texts is |shared words| / sqrt(|words of one|
    x |words of the other|). Words of ``vocabulary`` get a bucket each, so those cosines are exact; any other word is
    hashed into the remaining buckets."""

    dimension = 4096
    max_tokens = 512
    _tokenizer = WordTokenizer()

    def __init__(self, vocabulary: set[str] = frozenset()):
        self._buckets = {word: 1 + i for i, word in enumerate(sorted(vocabulary))}  # bucket 0: no content word
        assert len(self._buckets) < self.dimension // 2
        self.name = f"test/bag-of-words-{hashlib.blake2b(' '.join(sorted(vocabulary)).encode()).hexdigest()[:12]}"

    def bucket(self, word: str) -> int:
        if word in self._buckets:
            return self._buckets[word]
        free = self.dimension - 1 - len(self._buckets)
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        return 1 + len(self._buckets) + int.from_bytes(digest, "big") % free

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        return self._tokenizer.encode_offsets(text)

    def count_tokens(self, text: str) -> int:
        return len(self.encode_offsets(text))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            buckets = {self.bucket(w) for w in content_words(text)} or {0}
            vectors[row, sorted(buckets)] = 1.0
            vectors[row] /= np.linalg.norm(vectors[row])
        return vectors


# --- the corpus ----------------------------------------------------------------------------------------------------

DICTIONARY = {
    "ORGANIZATION": ["Quorvex Dynamics", "Graystone Union"],
    "PERSON": ["Talia Brennholt", "Dervla Munrow", "Ansgar Tolvey", "Corwen Haldane"],
    "LOCATION": ["Omberlin Pass", "Pellinore Reach"],
}
NO_NER = {label: None for label in (
    "CARDINAL DATE EVENT FAC GPE LANGUAGE LAW LOC MONEY NORP ORDINAL ORG PERCENT PERSON PRODUCT QUANTITY TIME "
    "WORK_OF_ART"
).split()}

UNION_TOPICS = ["wages", "holidays", "ballots", "pensions", "meetings", "uniforms", "lanterns", "rations", "boots",
                "ropes"]

# file name -> (title, body). Each file is one short markdown document, so one chunk.
DOCS: dict[str, tuple[str, str]] = {
    # 1. bridge: the question names Quorvex Dynamics; its passage names Talia Brennholt, whose own document shares
    #    no word with the question.
    "quorvex-dynamics.md": ("Quorvex Dynamics", "Quorvex Dynamics builds tidal turbines at a coastal factory. "
                                                "Quorvex Dynamics was founded by Talia Brennholt."),
    "talia-brennholt.md": ("Talia Brennholt", "Talia Brennholt trained as a marine engineer at vellmark college."),
    "evening-classes.md": ("Evening classes", "Night students study pottery and weaving."),
    "garden-founder.md": ("Garden founder", "The founder planted apple trees beside the mill."),
    "fluid-lecture.md": ("Fluid lecture", "A lecture on fluid dynamics and pipe flow."),
    # 2. hub suppression: the entry passage names a rare place and a union that many passages name.
    "glacier-survey.md": ("Glacier survey", "The glacier survey crossed the ridge at Omberlin Pass with porters "
                                            "hired through Graystone Union."),
    "cabin-log.md": ("Cabin log", "A stone cabin stands below Omberlin Pass."),
    "dues-ledger.md": ("Dues ledger", "Graystone Union collected dues every winter."),
    **{
        f"union-notice-{topic}.md": (f"Union notice {topic}", f"Graystone Union posted a notice about {topic}.")
        for topic in UNION_TOPICS
    },
    # 3. subject bonus: one document about Dervla Munrow, three that merely mention her.
    "dervla-munrow.md": ("Dervla Munrow", "Dervla Munrow played the cello in a small orchestra."),
    "harbour-concert.md": ("Harbour concert", "The harbour concert featured Dervla Munrow among many guests."),
    "festival-programme.md": ("Festival programme", "The festival programme lists Dervla Munrow on the second night."),
    "radio-interview.md": ("Radio interview", "A radio host once interviewed Dervla Munrow about touring."),
    # 4. entry passages sharing a rare entity, and seed weights.
    "lagoon-depth.md": ("Lagoon depth", "The saltwater lagoon near the lighthouse is deep, and Pellinore Reach "
                                        "feeds it."),
    "lighthouse-keeper.md": ("Lighthouse keeper", "The lighthouse keeper rows across Pellinore Reach to the "
                                                  "saltwater lagoon."),
    "lagoon-birds.md": ("Lagoon birds", "Herons nest beside the deep saltwater lagoon, counted each spring by "
                                        "Ansgar Tolvey."),
    "tide-tables.md": ("Tide tables", "Tide tables for the saltwater lagoon list each deep channel."),
    "lighthouse-lamp.md": ("Lighthouse lamp", "The lighthouse lamp burns near midnight."),
    "ferry-notes.md": ("Ferry notes", "Corwen Haldane runs a ferry out to the lighthouse."),
}

# file name -> the entities its passage mentions (all other files mention none).
MENTIONS: dict[str, set[str]] = {
    "quorvex-dynamics.md": {"Quorvex Dynamics", "Talia Brennholt"},
    "talia-brennholt.md": {"Talia Brennholt"},
    "glacier-survey.md": {"Omberlin Pass", "Graystone Union"},
    "cabin-log.md": {"Omberlin Pass"},
    "dues-ledger.md": {"Graystone Union"},
    **{f"union-notice-{topic}.md": {"Graystone Union"} for topic in UNION_TOPICS},
    "dervla-munrow.md": {"Dervla Munrow"},
    "harbour-concert.md": {"Dervla Munrow"},
    "festival-programme.md": {"Dervla Munrow"},
    "radio-interview.md": {"Dervla Munrow"},
    "lagoon-depth.md": {"Pellinore Reach"},
    "lighthouse-keeper.md": {"Pellinore Reach"},
    "lagoon-birds.md": {"Ansgar Tolvey"},
    "ferry-notes.md": {"Corwen Haldane"},
}

BRIDGE_QUESTION = "What did the founder of Quorvex Dynamics study?"
HUB_QUESTION = "Which glacier survey crossed the ridge?"
SUBJECT_QUESTION = "What instrument did Dervla Munrow play?"
LAGOON_QUESTION = "How deep is the saltwater lagoon near the lighthouse?"
QUESTIONS = {
    BRIDGE_QUESTION: {"quorvex-dynamics.md", "evening-classes.md", "garden-founder.md", "fluid-lecture.md"},
    HUB_QUESTION: {"glacier-survey.md"},
    SUBJECT_QUESTION: {"dervla-munrow.md", "harbour-concert.md", "festival-programme.md", "radio-interview.md"},
    LAGOON_QUESTION: {"lagoon-depth.md", "lighthouse-keeper.md", "lagoon-birds.md", "tide-tables.md",
                      "lighthouse-lamp.md", "ferry-notes.md"},
}

PLAIN_DOCS = {
    "fox.txt": "the quick brown fox jumps over the lazy dog near the river bank.",
    "turtle.txt": "a slow green turtle walks under the tall tree in the quiet garden.",
    "bread.txt": "fresh bread cools on the wooden table beside an open window.",
    "rain.txt": "cold rain falls on the grey roofs while the old dog sleeps inside.",
}
PLAIN_QUESTION = "which animal jumps over the dog?"
LINK_QUESTIONS = ["Quorvex Dynamics turbines?", "dynamics quorvex", "dynamics quorvex tidal turbines",
                  "dynamics quorvex tidal turbines coastal factory"]

VOCABULARY = set().union(
    *(content_words(f"{title} {body}") for title, body in DOCS.values()),
    *map(content_words, [*PLAIN_DOCS.values(), *QUESTIONS, PLAIN_QUESTION, *LINK_QUESTIONS]),
)


def specificity(mention_count: int) -> float:
    return 1.0 / (1.0 + math.log10(mention_count))


def eid(name: str) -> str:
    return entity_id(normalize_name(name))


def doc_id(file_name: str) -> str:
    return f"t:{file_name}"


# --- building and opening ------------------------------------------------------------------------------------------


def build_and_open(root: Path, files: dict[str, str], **settings_overrides) -> QueryEngine:
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")
    return build_and_open_index(folder_settings(root / "index", corpus, **settings_overrides), VOCABULARY)


def build_and_open_index(settings: PipelineSettings, vocabulary: set[str]) -> QueryEngine:
    """Build the configured sources with the bag-of-words embedder over ``vocabulary`` and open the index."""
    with Workspace(settings, embedder=HashedEmbedder(vocabulary)) as workspace:
        build_everything(workspace)
    return open_engine(settings, vocabulary)


def open_engine(settings: PipelineSettings, vocabulary: set[str]) -> QueryEngine:
    """A query engine of its own (its own lookups) over a built index."""
    index = Path(settings.index_dir)
    return QueryEngine(
        settings,
        state=SQLiteStateStore(index / "state.sqlite", read_only=True),
        graph_store=EmbeddedGraphStore(index / "graph.sqlite", read_only=True),
        vector_store=EdgeVectorReader(index / "vectors"),
        embedder=HashedEmbedder(vocabulary),
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    files = {name: f"# {title}\n\n{body}\n" for name, (title, body) in DOCS.items()}
    extraction = {"dictionary": DICTIONARY, "ner_labels": NO_NER, "title_entity_type": None}
    # BM25 at a weight of its own here, so its place in the fusion is pinned apart from the default's.
    with build_and_open(tmp_path_factory.mktemp("mechanisms"), files, extraction=extraction,
                        retrieval={"keyword_weight": 0.3}) as index:
        yield index


@pytest.fixture(scope="module")
def plain_engine(tmp_path_factory):
    """Lowercase sentences without a name: the packaged spotters (NER, dictionary, patterns) all stay on, only
    document titles are not entities (a title would otherwise be an entity of every chunk)."""
    with build_and_open(
        tmp_path_factory.mktemp("plain"), PLAIN_DOCS, extraction={"title_entity_type": None}
    ) as index:
        yield index


@pytest.fixture(scope="module")
def chunk_of(engine) -> dict[str, str]:
    """File name -> its only chunk."""
    rows = engine.state.query("SELECT doc_id, chunk_id FROM chunks")
    by_doc: dict[str, list[str]] = {}
    for doc, chunk in rows:
        by_doc.setdefault(doc, []).append(chunk)
    assert all(len(chunks) == 1 for chunks in by_doc.values()), "every test document is one chunk"
    return {name: by_doc[doc_id(name)][0] for name in DOCS}


def positive_vector_docs(retrieval: Retrieval, chunk_of: dict[str, str]) -> set[str]:
    return {name for name, chunk in chunk_of.items() if retrieval.vector_scores.get(chunk, 0.0) > 1e-6}


# --- the fixture is what the tests assume ------------------------------------------------------------------------


def test_the_index_holds_exactly_the_designed_mentions_and_similarities(engine, chunk_of):
    embedder = engine.embedder
    assert isinstance(embedder, Embedder)
    # Cosines are word overlaps: 2 shared words of 3 and 4 (stopwords dropped) -> 2 / sqrt(12).
    one, other = embedder.embed(["The cello and the harbour lamp", "a cello, a harbour, a ferry and a mill"])
    assert float(one @ other) == pytest.approx(2 / math.sqrt(12), abs=1e-6)
    assert float(one @ one) == pytest.approx(1.0, abs=1e-6)

    mentions = engine.graph.entities_of_chunks(chunk_of.values())
    entities = engine.graph.get_entities({e for ids in mentions.values() for e in ids})
    names = {key: entity.name for key, entity in entities.items()}
    found = {name: {names[e] for e in mentions.get(chunk, [])} for name, chunk in chunk_of.items()}
    assert found == {name: MENTIONS.get(name, set()) for name in DOCS}
    assert engine.graph.stats().entity_count == len({n for ns in MENTIONS.values() for n in ns})

    # Each question shares words with its own scenario's passages only.
    for question, expected in QUESTIONS.items():
        assert positive_vector_docs(engine.retrieve(question, mode="vector"), chunk_of) == expected, question


# --- 1. a bridge passage reached through an entry passage ---------------------------------------------------------


def test_bridge_passage_is_reached_through_the_entry_passage_that_names_it(engine, chunk_of):
    bridge, a, b = doc_id("talia-brennholt.md"), "Quorvex Dynamics", "Talia Brennholt"
    assert content_words(BRIDGE_QUESTION).isdisjoint(content_words(" ".join(DOCS["talia-brennholt.md"])))

    vector = engine.query(BRIDGE_QUESTION, mode="vector", top_k=3)
    hybrid = engine.query(BRIDGE_QUESTION, mode="hybrid", top_k=3)
    assert bridge not in vector.doc_ids
    assert bridge in hybrid.doc_ids and not hybrid.fell_back_to_vector

    result = next(r for r in hybrid.results if r.doc_id == bridge)
    assert result.scores["vector"] == 0 and result.scores["graph"] == 1.0  # 1 x specificity(2) x subject bonus, clipped
    assert result.entity_path == [a, b] and result.hops_from_query == 1

    # B is not in the question: it is a seed taken from A's passage (the top entry chunk), not a traversal hop.
    retrieval = engine.retrieve(BRIDGE_QUESTION)
    assert set(retrieval.linked) == {eid(a)} and retrieval.linked[eid(a)] == (f"name:{a}", 1.0)
    hit = retrieval.reached[eid(b)]
    assert hit.hops == 0 and hit.score == pytest.approx(1.0) and hit.path == (eid(b),)
    assert retrieval.seed_via == {eid(b): eid(a)}
    assert retrieval.best_entity[chunk_of["talia-brennholt.md"]] == eid(b)

    # So no hop is needed at all: with max_hops=0 the bridge passage still ranks in the top 3.
    assert bridge in engine.query(BRIDGE_QUESTION, top_k=3, max_hops=0).doc_ids


# --- 2. hub suppression ---------------------------------------------------------------------------------------------


def test_a_rare_shared_entity_scores_its_passage_above_a_hub_shared_entity(engine, chunk_of):
    rare, hub = eid("Omberlin Pass"), eid("Graystone Union")
    retrieval = engine.retrieve(HUB_QUESTION)
    entities = engine.graph.get_entities([rare, hub])
    assert entities[rare].mention_count == 2 and entities[hub].mention_count == 2 + len(UNION_TOPICS)

    # Both are seeded by the entry passage with the same activation: only their specificity differs.
    assert retrieval.reached[rare].hops == retrieval.reached[hub].hops == 0
    assert retrieval.reached[rare].score == retrieval.reached[hub].score == pytest.approx(1.0)

    rare_score = retrieval.graph_scores[chunk_of["cabin-log.md"]]
    hub_score = retrieval.graph_scores[chunk_of["dues-ledger.md"]]
    assert rare_score > hub_score
    assert rare_score == pytest.approx(specificity(2))
    assert hub_score == pytest.approx(specificity(2 + len(UNION_TOPICS)))
    assert retrieval.best_entity[chunk_of["cabin-log.md"]] == rare
    assert retrieval.best_entity[chunk_of["dues-ledger.md"]] == hub
    # Neither passage shares a word with the question: the ranking between them is the graph's alone.
    assert retrieval.vector_scores[chunk_of["cabin-log.md"]] == retrieval.vector_scores[chunk_of["dues-ledger.md"]] == 0
    ranking = rank(retrieval.combined)
    assert ranking.index(chunk_of["cabin-log.md"]) < ranking.index(chunk_of["dues-ledger.md"])


# --- 3. subject bonus -----------------------------------------------------------------------------------------------


def test_a_passage_about_the_entity_scores_above_one_that_merely_mentions_it(engine, chunk_of):
    dervla = eid("Dervla Munrow")
    retrieval = engine.retrieve(SUBJECT_QUESTION)
    assert retrieval.linked[dervla] == ("name:Dervla Munrow", 1.0)
    assert engine.graph.get_entities([dervla])[dervla].mention_count == 4

    about = retrieval.graph_scores[chunk_of["dervla-munrow.md"]]
    mentions = [retrieval.graph_scores[chunk_of[name]]
                for name in ("harbour-concert.md", "festival-programme.md", "radio-interview.md")]
    assert all(m == pytest.approx(specificity(4)) for m in mentions)  # activation 1 x specificity
    assert about > max(mentions)
    assert about == pytest.approx(1.5 * specificity(4))  # x SUBJECT_BONUS, below the clip at 1


# --- 4. entry passages sharing a rare entity support each other ---------------------------------------------------


def first_hop_similarity(retrieval: Retrieval) -> dict[str, float]:
    """What entry passages are chosen and weighed by: similarity + 0.5 × BM25 as a share of the best match."""
    share = retrieval.keyword_scores
    return {c: retrieval.vector_scores.get(c, 0.0) + ENTRY_KEYWORD_SHARE * share.get(c, 0.0)
            for c in retrieval.vector_scores.keys() | share.keys()}


def test_entry_passages_sharing_a_rare_entity_support_each_other(engine, chunk_of):
    shared, own = eid("Pellinore Reach"), eid("Ansgar Tolvey")
    retrieval = engine.retrieve(LAGOON_QUESTION)
    v = first_hop_similarity(retrieval)
    entry = rank(v)[:5]
    first, second, birds = chunk_of["lagoon-depth.md"], chunk_of["lighthouse-keeper.md"], chunk_of["lagoon-birds.md"]
    assert entry[0] == first and {second, birds} <= set(entry)
    second_weight = (v[second] / v[first]) ** 3
    assert 0.05 < second_weight < 1

    # Each of the two seeded the shared entity; the stronger one's weight is what the graph carries.
    assert retrieval.reached[shared].hops == 0 and retrieval.reached[shared].score == pytest.approx(1.0)
    # The top passage is scored only with the weight the other entry passage gave the entity, the other passage
    # with the full activation: both > 0 although each seeded the entity itself.
    assert retrieval.graph_scores[first] == pytest.approx(second_weight * specificity(2))
    assert retrieval.graph_scores[second] == pytest.approx(1.0 * specificity(2))
    assert retrieval.graph_scores[first] > 0 and retrieval.graph_scores[second] > 0

    # An entity only one entry passage mentions gives that passage nothing: it already has its similarity.
    assert retrieval.reached[own].hops == 0 and retrieval.reached[own].score >= 0.05
    assert retrieval.graph_scores.get(birds, 0.0) == 0.0


# --- seeding weights, the top-5 limit and entity linking ------------------------------------------------------------


def test_entry_chunk_seeds_weigh_relative_similarity_cubed_and_only_the_top_five_seed(engine, chunk_of):
    retrieval = engine.retrieve(LAGOON_QUESTION, max_hops=0)
    assert ENTRY_KEYWORD_SHARE == 0.5 and retrieval.keyword_scores
    v = first_hop_similarity(retrieval)
    ranking = rank(v)
    best = v[chunk_of["lagoon-depth.md"]]
    assert ranking.index(chunk_of["lagoon-birds.md"]) < 5 <= ranking.index(chunk_of["ferry-notes.md"])
    assert v[chunk_of["ferry-notes.md"]] > 0  # similar, but the sixth entry chunk

    seeds = {e: hit.score for e, hit in retrieval.reached.items()}
    assert seeds == pytest.approx({
        eid("Pellinore Reach"): 1.0,
        eid("Ansgar Tolvey"): (v[chunk_of["lagoon-birds.md"]] / best) ** 3,
    })
    assert eid("Corwen Haldane") not in seeds
    assert retrieval.linked == {} and not retrieval.fell_back_to_vector


def test_question_entities_link_by_name_or_by_an_entity_embedding_of_at_least_0_6(engine):
    quorvex = eid("Quorvex Dynamics")
    by_name = engine.retrieve("Quorvex Dynamics turbines?").linked
    assert by_name[quorvex] == ("name:Quorvex Dynamics", 1.0)

    # "dynamics quorvex" is no n-gram of the name, but its embedding is the name's: cosine 1 (to the store's precision).
    how, confidence = engine.retrieve("dynamics quorvex").linked[quorvex]
    assert how == "embedding" and confidence == pytest.approx(1.0, abs=SCORE_TOLERANCE)
    # Both name words among two other words: cosine 2 / sqrt(2 x 4) = 0.71, linked; among four: 0.58, not linked.
    how, confidence = engine.retrieve("dynamics quorvex tidal turbines").linked[quorvex]
    assert how == "embedding" and confidence == pytest.approx(2 / math.sqrt(8), abs=SCORE_TOLERANCE)
    assert quorvex not in engine.retrieve("dynamics quorvex tidal turbines coastal factory").linked


def test_entities_in_more_than_200_chunks_are_ignored_when_chunks_are_scored(tmp_path, engine):
    """On a hand-built graph: one entity in 200 chunks, one in 201, both reached with full activation."""
    assert MAX_CHUNKS_PER_ENTITY == 200
    counts = {"Bounded Guild": 200, "Sprawling Guild": 201}
    entities = [
        Entity(eid(name), name, normalize_name(name), "ORGANIZATION", "", count,
               tuple(f"chunk-{name[0]}{i:03d}" for i in range(count)), ())
        for name, count in counts.items()
    ]
    with EmbeddedGraphStore(tmp_path / "graph.sqlite") as graph, SQLiteStateStore(tmp_path / "state.sqlite") as state:
        graph.upsert_entities(entities)
        graph.set_chunk_mentions({c: [e.entity_id] for e in entities for c in e.chunk_ids})
        index = IndexReader(engine.settings.retrieval, engine.settings.ontology, state=state, graph=graph,
                            vectors=engine.vectors)
        scorer = GraphRetriever(index)
        reached = {e.entity_id: TraversalHit(e.entity_id, 0, 1.0, (e.entity_id,)) for e in entities}
        scores, best = scorer.chunk_graph_scores(reached, {}, {})
    assert set(scores) == set(entities[0].chunk_ids)  # none of the 201-chunk entity's chunks
    assert all(score == pytest.approx(specificity(200)) for score in scores.values())
    assert set(best.values()) == {eid("Bounded Guild")}


def test_mention_counts_come_from_the_first_read_and_from_the_graph_for_entities_written_since(tmp_path, engine):
    def guild(name: str, count: int) -> Entity:
        return Entity(eid(name), name, normalize_name(name), "ORGANIZATION", "", count,
                      tuple(f"chunk-{name[0]}{i:03d}" for i in range(count)), ())

    with EmbeddedGraphStore(tmp_path / "graph.sqlite") as graph, SQLiteStateStore(tmp_path / "state.sqlite") as state:
        graph.upsert_entities([guild("Early Guild", 3)])
        index = IndexReader(engine.settings.retrieval, engine.settings.ontology, state=state, graph=graph,
                            vectors=engine.vectors)
        assert index.mention_counts([eid("Early Guild"), eid("Late Guild")]) == {eid("Early Guild"): 3}
        graph.upsert_entities([guild("Late Guild", 7)])  # a build writing while questions are asked
        assert index.mention_counts(iter([eid("Early Guild"), eid("Late Guild"), eid("No Guild")])) == {
            eid("Early Guild"): 3, eid("Late Guild"): 7}


def test_a_question_without_an_identifier_leaves_the_keyword_index_unbuilt_when_bm25_is_off(plain_engine):
    """With BM25 weighed at 0, identifier matching is the only use hybrid makes of the keyword index, and a question
    that writes no identifier has nothing to match: its process need not build the index (a third of a first
    question's time)."""
    settings = plain_engine.settings.with_overrides(retrieval={"keyword_weight": 0.0})
    with open_engine(settings, VOCABULARY) as engine:
        lookups = vars(engine._retrievers["hybrid"].index)
        assert engine.retrieve(PLAIN_QUESTION).identifier_scores == {}
        assert "_keyword_index" not in lookups and "_corpus_case" in lookups
        engine.retrieve("which dog sleeps while ERR_QUOTA_7 is raised?")
        assert "_keyword_index" in lookups


# --- 5. fusion arithmetic -----------------------------------------------------------------------------------------


def test_each_chunk_keeps_its_largest_contribution_and_the_smallest_entity_giving_it():
    """The bulk assignment equals the pair-by-pair maximum, ties (clipped contributions are often equal) included,
    and its score is clipped to 1 only after the largest contribution is chosen."""
    random = np.random.default_rng(7)
    chunks = [f"c{i}" for i in range(40)]
    for _ in range(200):
        values = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]  # few values, so that ties are common; above 1: clipped
        plain = [(float(random.choice(values)), f"e{i:02d}", list(random.choice(chunks, 6, replace=False)))
                 for i in random.permutation(12)]
        singular = [(float(random.choice(values)), f"e{random.integers(12):02d}", str(random.choice(chunks)))
                    for _ in range(5)]
        pairs = [(v, eid, c) for v, eid, chunk_ids in plain for c in chunk_ids] + singular
        expected: dict[str, tuple[float, str]] = {}
        for value, eid, chunk in sorted(pairs, key=lambda pair: pair[1]):  # the first of equals wins
            if value > expected.get(chunk, (0.0, ""))[0]:
                expected[chunk] = (value, eid)
        assert strongest_contributions(plain, singular) == (
            {chunk: min(1.0, value) for chunk, (value, _) in expected.items()},
            {chunk: eid for chunk, (_, eid) in expected.items()})


@pytest.mark.parametrize("question", [BRIDGE_QUESTION, HUB_QUESTION, LAGOON_QUESTION])
def test_weighted_fusion_is_0_7_vector_plus_0_35_graph_plus_0_3_keyword_for_every_candidate(engine, question):
    retrieval = engine.retrieve(question, fusion="weighted")
    entry = set(engine.retrieve(question, mode="vector").combined)
    keyword = engine.retrieve(question, mode="keyword").keyword_scores
    assert keyword == retrieval.keyword_scores and not retrieval.relation_scores  # no relationship asked for
    assert max(keyword.values()) == 1.0  # BM25 as a share of the question's best match
    candidates = entry | set(rank(retrieval.graph_scores)[:100]) | set(keyword)
    assert set(retrieval.combined) == candidates
    assert any(retrieval.graph_scores.get(c, 0) > 0 for c in candidates)
    without_graph = {c: 0.7 * retrieval.vector_scores.get(c, retrieval.vector_floor) + 0.3 * keyword.get(c, 0.0)
                     for c in candidates}
    fused = {c: without_graph[c] + 0.35 * retrieval.graph_scores.get(c, 0.0) for c in candidates}
    assert retrieval.combined == pytest.approx(cap_at_origin(fused, without_graph, retrieval.reached_from), abs=1e-9)

    response = engine.query(question, fusion="weighted", top_k=10)
    assert response.results
    for result in response.results:
        expected = 0.7 * result.scores["vector"] + 0.35 * result.scores["graph"] + 0.3 * result.scores["keyword"]
        if result.chunk_id in retrieval.reached_from:
            assert result.combined_score <= expected + 2e-6
        else:
            assert result.combined_score == pytest.approx(expected, abs=2e-6)


@pytest.mark.parametrize("question", [BRIDGE_QUESTION, HUB_QUESTION, LAGOON_QUESTION])
def test_rrf_fusion_is_reciprocal_rank_fusion_of_the_vector_graph_and_keyword_rankings(engine, question):
    retrieval = engine.retrieve(question, fusion="rrf")
    entry = set(engine.retrieve(question, mode="vector").combined)
    candidates = entry | set(rank(retrieval.graph_scores)[:100]) | set(retrieval.keyword_scores)
    vector_ranking = rank({c: retrieval.vector_scores.get(c, retrieval.vector_floor) for c in candidates})
    graph_ranking = rank({c: s for c, s in retrieval.graph_scores.items() if c in candidates and s > 0})
    keyword_ranking = rank(retrieval.keyword_scores)
    assert graph_ranking and keyword_ranking
    weights = {"vector": 0.7, "graph": 0.35, "keyword": 0.3, "relation": 1.5, "identifier": 0.7}
    rankings = {"vector": vector_ranking, "keyword": keyword_ranking, "relation": [], "identifier": []}
    expected = cap_at_origin(
        reciprocal_rank_fusion({**rankings, "graph": graph_ranking}, k=60, weights=weights),
        reciprocal_rank_fusion(rankings, k=60, weights=weights),
        retrieval.reached_from,
    )
    assert retrieval.combined == pytest.approx(expected, abs=1e-12)
    assert engine.settings.retrieval.rrf_k == 60

    response = engine.query(question, fusion="rrf", top_k=5, results="chunks")
    assert [r.chunk_id for r in response.results] == rank(expected)[:5]


def test_a_passage_reached_from_an_entry_passage_ranks_right_after_it_not_above_it(tmp_path):
    """The walk from the best entry passage's entity lifts that entity's own page (graph 1.0) above the entry passage
    itself under plain weighted fusion; the next hop must follow the hop that led to it, still above a passage its
    similarity alone would rank below."""
    question = "Which harbour crane lifts the heaviest cargo?"
    files = {
        "crane-register.md":
            "# Crane register\n\nThe harbour crane lifts the heaviest cargo; Brisk Tamsin repairs it.\n",
        "brisk-tamsin.md": "# Brisk Tamsin\n\nBrisk Tamsin lifts cargo at the harbour.\n",
        "cargo-manifest.md": "# Cargo manifest\n\nThe heaviest harbour crane cargo.\n",
    }
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")
    extraction = {"dictionary": {"PERSON": ["Brisk Tamsin"]}, "ner_labels": NO_NER, "title_entity_type": None}
    # Similarity and the graph alone: the cap is what is pinned here.
    settings = folder_settings(tmp_path / "index", corpus, extraction=extraction, retrieval={"keyword_weight": 0.0})
    vocabulary = set().union(*map(content_words, [question, *files.values()]))
    with build_and_open_index(settings, vocabulary) as engine:
        chunk = {doc: c for doc, c in engine.state.query("SELECT doc_id, chunk_id FROM chunks")}
        origin, neighbour, filler = (chunk[doc_id(name)] for name in files)
        retrieval = engine.retrieve(question)
        assert not retrieval.linked and retrieval.reached_from == {neighbour: origin}
        uncapped = {c: 0.7 * retrieval.vector_scores[c] + 0.35 * retrieval.graph_scores.get(c, 0.0)
                    for c in chunk.values()}
        assert uncapped[neighbour] > uncapped[origin] > uncapped[filler]  # what the graph alone would do
        assert 0.7 * retrieval.vector_scores[neighbour] < uncapped[filler]  # its similarity alone ranks it last
        assert rank(retrieval.combined) == [origin, neighbour, filler]
        assert retrieval.combined[origin] == pytest.approx(uncapped[origin])
        assert retrieval.combined[neighbour] == pytest.approx(retrieval.combined[origin])


# --- 6. fallback to plain vector search ---------------------------------------------------------------------------


def test_no_linked_entity_and_no_entity_in_entry_chunks_falls_back_to_vector_search(plain_engine):
    assert plain_engine.graph.stats().entity_count == 0  # the spotters found no name in the plain corpus
    retrieval = plain_engine.retrieve(PLAIN_QUESTION)
    vector = plain_engine.retrieve(PLAIN_QUESTION, mode="vector")
    assert retrieval.fell_back_to_vector and not vector.fell_back_to_vector
    assert retrieval.linked == {} and retrieval.reached == {} and retrieval.graph_scores == {}
    # Similarity and keywords alone, fused as always (nothing of the graph's, not even a zero).
    weights = plain_engine.settings.retrieval
    assert retrieval.combined == pytest.approx(weighted_fusion(
        {"vector": vector.vector_scores, "keyword": retrieval.keyword_scores},
        {"vector": weights.vector_weight, "keyword": weights.keyword_weight},
    ))
    graph_mode = plain_engine.retrieve(PLAIN_QUESTION, mode="graph")
    assert graph_mode.fell_back_to_vector and graph_mode.combined == vector.combined  # nothing to walk: similarity

    response = plain_engine.query(PLAIN_QUESTION, top_k=4)
    assert response.fell_back_to_vector
    assert response.doc_ids[0] == "t:fox.txt"
    assert response.doc_ids == plain_engine.query(PLAIN_QUESTION, mode="vector", top_k=4).doc_ids
    assert all(r.scores["graph"] == 0 and r.entity_path == []
               and r.combined_score == pytest.approx(
                   weights.vector_weight * r.scores["vector"] + weights.keyword_weight * r.scores["keyword"], abs=2e-6)
               for r in response.results)
