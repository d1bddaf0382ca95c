"""LLMExtractor against the fake server: parsing, ontology mapping, repair, quarantine, gleaning."""

from __future__ import annotations

import json

import pytest

from graphrag_pipeline.lib.core.config import PipelineSettings, default_config_data
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction, Quarantined
from graphrag_pipeline.lib.extract.llm import LLMExtractor
from graphrag_pipeline.lib.llm.clients import chat_client
from graphrag_pipeline.lib.llm.runner import LLMRunner
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline_tests.fake_llm_server import OLLAMA_CHAT, OPENAI_CHAT, Reply, llm_config, prompt_of

ONTOLOGY = PipelineSettings.model_validate(default_config_data()).ontology
CHAT_PATHS = {"openai": OPENAI_CHAT, "ollama": OLLAMA_CHAT}
PAYMENTS = json.dumps({
    "entities": [
        {"name": "payments-api", "type": "Service", "description": "Takes card payments."},
        {"name": "Redis", "type": "technology", "description": "Session cache."},
        {"name": "Team Payments", "type": "Team", "description": "Owns payments-api."},
    ],
    "relationships": [
        {"source": "payments-api", "target": "Redis", "type": "DEPENDS_ON", "description": "Caches sessions.",
         "strength": 8},
        {"source": "payments-api", "target": "Team Payments", "type": "owned by", "description": "Ownership.",
         "strength": 20},
    ],
})
BROKEN = '{"entities": [{"name": "payments-api", "type": "Service"'  # cut off mid-object


def chunk(text: str, chunk_id: str, doc_id: str = "doc-1") -> Chunk:
    return Chunk(chunk_id=chunk_id, doc_id=doc_id, position=0, text=text, token_count=len(text) // 4,
                 start_char=0, end_char=len(text))


def extractor(server, provider: str = "ollama", max_gleanings: int = 0, **config) -> LLMExtractor:
    llm = llm_config(server, provider, **config)
    return LLMExtractor(LLMRunner(chat_client(llm), concurrency=llm.concurrency), ONTOLOGY, max_gleanings=max_gleanings)


def is_repair(request) -> bool:
    return "could not be used" in prompt_of(request)


def is_glean(request) -> bool:
    return "Already extracted" in prompt_of(request)


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_valid_output_becomes_typed_mentions(llm_server, provider):
    llm_server.chat_responder = lambda request: PAYMENTS
    extractions, quarantined = extractor(llm_server, provider).extract(
        [chunk("payments-api uses Redis; Team Payments owns it.", "c1")], {"doc-1": "Payments overview"}
    )

    assert quarantined == []
    [extraction] = extractions
    assert extraction.chunk_id == "c1"
    entities = {e.name: e for e in extraction.entities}
    assert entities["payments-api"].type == "Service" and entities["payments-api"].spotter == "llm"
    assert entities["Redis"].type == "TECHNOLOGY"  # the ontology's spelling
    assert entities["Redis"].description == "Session cache." and entities["Redis"].chunk_id == "c1"
    relations = {(r.source, r.target): r for r in extraction.relations}
    depends = relations[("payments-api", "Redis")]
    assert (depends.type, depends.predicate, depends.weight) == ("DEPENDS_ON", "", 0.8)
    owned = relations[("payments-api", "Team Payments")]
    assert (owned.type, owned.predicate, owned.weight) == ("OWNED_BY", "", 1.0)  # strength capped at 10
    [body] = llm_server.bodies(CHAT_PATHS[provider])
    prompt = prompt_of(body)
    assert "- Service: A deployable service or component of a system" in prompt
    assert "- DEPENDS_ON: Source calls or needs target to work" in prompt
    assert "Document title: Payments overview" in prompt and "payments-api uses Redis" in prompt
    schema = body["format"] if provider == "ollama" else body["response_format"]["json_schema"]["schema"]
    assert "Service" in schema["properties"]["entities"]["items"]["properties"]["type"]["enum"]


def test_types_outside_the_ontology_fall_back(llm_server):
    llm_server.chat_responder = lambda request: json.dumps({
        "entities": [{"name": "Ada Lovelace", "type": "MATHEMATICIAN", "description": "Wrote the first program."},
                     {"name": "Analytical Engine", "type": "MACHINE", "description": ""}],
        "relationships": [{"source": "Ada Lovelace", "target": "Analytical Engine", "type": "wrote programs for",
                           "description": "", "strength": 9},
                          {"source": "Charles Babbage", "target": "Analytical Engine", "type": "designed"},
                          {"source": "Ada Lovelace", "target": "ada lovelace", "type": "is"}],
    })
    [extraction], _ = extractor(llm_server).extract([chunk("Ada and the engine.", "c1")])

    types = {e.name: e.type for e in extraction.entities}
    assert types == {"Ada Lovelace": "CONCEPT", "Analytical Engine": "CONCEPT", "Charles Babbage": "CONCEPT"}
    relations = {(r.source, r.target): (r.type, r.predicate) for r in extraction.relations}
    assert relations == {
        ("Ada Lovelace", "Analytical Engine"): ("RELATED_TO", "wrote programs for"),
        ("Charles Babbage", "Analytical Engine"): ("RELATED_TO", "designed"),  # endpoint added as an entity
    }  # the self-relation is dropped


def test_a_lone_surrogate_escape_in_an_answer_becomes_a_question_mark_and_is_stored(llm_server, tmp_path):
    """JSON can escape half a surrogate pair ("\\udce2"), which decodes to text that is not UTF-8: stored as it is,
    it would stop the stage that writes it."""
    llm_server.chat_responder = lambda request: (
        '{"entities": [{"name": "payments-api", "type": "Service", "description": "Takes card\\udce2 payments."}],'
        ' "relationships": []}')
    [extraction], quarantined = extractor(llm_server).extract([chunk("payments-api takes cards.", "c1")])

    assert quarantined == []
    assert extraction.entities[0].description == "Takes card? payments."
    state = SQLiteStateStore(tmp_path / "state.sqlite")
    state.store_extractions("llm-test", [extraction])
    assert state.extractions(["c1"], "llm-test")["c1"].entities[0].description == "Takes card? payments."
    state.close()


def test_fenced_json_with_prose_needs_no_repair(llm_server):
    llm_server.chat_responder = lambda request: f"Here is the graph you asked for:\n```json\n{PAYMENTS}\n```\nDone."
    [extraction], quarantined = extractor(llm_server).extract([chunk("payments", "c1")])
    assert len(extraction.entities) == 3 and quarantined == []
    assert llm_server.count(OLLAMA_CHAT) == 1


@pytest.mark.parametrize("malformed", [BROKEN, '{"nodes": []}', "I could not find any entities."])
def test_malformed_output_is_repaired_with_one_call(llm_server, malformed):
    llm_server.chat_responder = lambda request: PAYMENTS if is_repair(request) else malformed
    [extraction], quarantined = extractor(llm_server).extract([chunk("payments", "c1")])

    assert quarantined == [] and len(extraction.relations) == 2
    first, repair = llm_server.bodies(OLLAMA_CHAT)
    assert malformed in prompt_of(repair)  # the model sees what it wrote
    assert '"entities"' in prompt_of(repair)  # and the schema
    assert repair["format"] == first["format"]


def test_output_still_malformed_after_repair_is_quarantined_and_the_run_goes_on(llm_server):
    def respond(request):
        return BROKEN if "BAD CHUNK" in prompt_of(request) or BROKEN in prompt_of(request) else PAYMENTS

    llm_server.chat_responder = respond
    ex = extractor(llm_server, concurrency=2)
    chunks = [chunk("good one", "c1"), chunk("BAD CHUNK", "c2"), chunk("good two", "c3")]

    extractions, quarantined = ex.extract(chunks)

    assert [e.chunk_id for e in extractions] == ["c1", "c3"]
    [record] = quarantined
    assert isinstance(record, Quarantined)
    assert (record.stage, record.item_id) == ("extraction", "c2")
    assert "invalid JSON" in record.reason and "after one repair attempt" in record.reason
    assert record.raw.startswith(BROKEN) and "--- repair attempt ---" in record.raw
    assert llm_server.count(OLLAMA_CHAT) == 4  # two good chunks, the bad one and its repair
    assert ex.runner.usage.failures == 1


def test_persistent_server_errors_quarantine_the_chunk_not_the_run(llm_server):
    llm_server.chat_responder = lambda request: PAYMENTS
    llm_server.script(OLLAMA_CHAT, *[Reply(status=500, body={"error": "model crashed"})] * 3)  # 1 try + 2 retries
    extractions, quarantined = extractor(llm_server, max_retries=2).extract(
        [chunk("first", "c1"), chunk("second", "c2")]
    )

    [record] = quarantined
    assert record.item_id == "c1" and "HTTP 500" in record.reason and "model crashed" in record.reason
    assert [e.chunk_id for e in extractions] == ["c2"]


def test_gleaning_adds_missed_entities(llm_server):
    def respond(request):
        if is_glean(request):
            return json.dumps({
                "entities": [{"name": "REDIS", "type": "TECHNOLOGY", "description": "again"},
                             {"name": "PostgreSQL", "type": "TECHNOLOGY", "description": "Ledger store."}],
                "relationships": [{"source": "payments-api", "target": "PostgreSQL", "type": "depends on",
                                   "description": "Writes the ledger.", "strength": 6}],
            })
        return PAYMENTS

    llm_server.chat_responder = respond
    [extraction], _ = extractor(llm_server, max_gleanings=1).extract([chunk("payments", "c1")])

    names = [e.name for e in extraction.entities]
    assert names == ["payments-api", "Redis", "Team Payments", "PostgreSQL"]  # REDIS merged into Redis
    assert {(r.target, r.type) for r in extraction.relations} >= {("PostgreSQL", "DEPENDS_ON")}
    first, glean = llm_server.bodies(OLLAMA_CHAT)
    assert '"name": "Redis"' in prompt_of(glean)  # the gleaning prompt shows what was already found


def test_gleaning_stops_when_a_pass_adds_nothing(llm_server):
    llm_server.chat_responder = lambda request: PAYMENTS  # gleaning repeats the first answer: nothing new
    [extraction], _ = extractor(llm_server, max_gleanings=3).extract([chunk("payments", "c1")])
    assert len(extraction.entities) == 3
    assert llm_server.count(OLLAMA_CHAT) == 2


def test_unusable_gleaning_keeps_the_first_pass(llm_server):
    llm_server.chat_responder = lambda request: "no" if is_glean(request) or is_repair(request) else PAYMENTS
    ex = extractor(llm_server, max_gleanings=2)
    [extraction], quarantined = ex.extract([chunk("payments", "c1")])
    assert quarantined == [] and len(extraction.entities) == 3
    assert llm_server.count(OLLAMA_CHAT) == 3  # extraction, gleaning, its repair; no second gleaning
    assert ex.runner.usage.failures == 1


def test_version_follows_what_changes_the_output(llm_server):
    versions = {
        extractor(llm_server).version,
        extractor(llm_server, max_gleanings=1).version,
        extractor(llm_server, model="other-model").version,
        extractor(llm_server, "openai").version,
    }
    assert len(versions) == 4
    assert extractor(llm_server).version == extractor(llm_server).version
    assert isinstance(extractor(llm_server).extract([])[0], list)


def test_empty_answer_is_a_valid_empty_extraction(llm_server):
    [extraction], quarantined = extractor(llm_server).extract([chunk("nothing here", "c1")])
    assert extraction == ChunkExtraction(chunk_id="c1", entities=(), relations=())
    assert quarantined == []
