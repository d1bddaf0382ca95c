"""The pure parts of domain retrieval: catalog name resolution, name variants, generic-word links, question intents
and the keyword index, each on inputs the test writes."""

from __future__ import annotations

import pytest

from graphrag_pipeline.lib.algorithms.merge import resolve_catalog_names
from graphrag_pipeline.lib.core.config import Ontology, load_settings
from graphrag_pipeline.lib.core.ids import is_plain_word, name_variants
from graphrag_pipeline.lib.core.models import Entity
from graphrag_pipeline.query.intent import IntentReader
from graphrag_pipeline.query.keyword import KeywordIndex, identifiers, terms
from graphrag_pipeline.query.linking import GENERIC_NAME_CONFIDENCE, CorpusCase, NameIndex, NameLink, is_generic_word

# --- catalog name resolution ----------------------------------------------------------------------------------------


def test_a_declared_name_resolves_to_its_entity_and_a_variant_only_when_no_declared_name_claims_it():
    resolution = resolve_catalog_names({
        "ledger": ["Ledger Service", "ldgr"],
        "shop/ledgerservice": ["ledgerservice", "Ledger Service"],
        "vault-store": ["Vault Store"],
    })
    assert resolution.keys["ldgr"] == "ledger"
    assert "ledger service" not in resolution.keys  # two entities declare that title: it names neither alone
    assert resolution.keys["ledgerservice"] == "shop/ledgerservice"  # declared beats ledger's variant of its title
    assert resolution.keys["vault store"] == "vault-store" and resolution.keys["vaultstore"] == "vault-store"
    assert "ledger" not in resolution.keys  # an entity's own name is never remapped
    assert resolution.names["ledger"] == ("Ledger Service", "ldgr")  # ambiguous or not, every name stays listed


def test_name_variants_join_words_by_space_hyphen_or_nothing():
    assert name_variants("Payments API") == {"payments api", "payments-api", "paymentsapi"}
    assert name_variants("PaymentsApi") == {"payments api", "payments-api", "paymentsapi"}
    assert name_variants("ledger") == {"ledger"}
    assert name_variants("  ") == set()


@pytest.mark.parametrize("name, plain", [("cart", True), ("Checkout", True), ("API", True), ("Cart Service", False),
                                         ("product-catalog", False), ("LedgerService", False), ("s3", False)])
def test_a_plain_word_is_one_word_of_letters_written_like_a_word(name, plain):
    assert is_plain_word(name) is plain


# --- link confidence ------------------------------------------------------------------------------------------------


def test_an_ordinary_word_is_generic_unless_the_corpus_writes_it_as_a_name():
    corpus = CorpusCase(["The job finished. A job failed. Paris is far. Paris again. Kafka queues.", "the job"])
    assert is_generic_word("Job", corpus)  # common English, lower case in the corpus
    assert not is_generic_word("Paris", corpus)  # common English, but the corpus capitalizes it: a name
    assert not is_generic_word("Kafka", corpus)  # rare in English
    assert not is_generic_word("KubeJobFailed", corpus) and not is_generic_word("job-runner", corpus)
    assert is_generic_word("package", corpus)  # common English the corpus never writes: nothing says it is a name
    assert 0 < GENERIC_NAME_CONFIDENCE < 0.5


@pytest.mark.parametrize("phrase, ordinary", [
    ("config.", True),  # edge punctuation and case do not make a name
    ("complete.", True),
    ("AUTHENTICATION", True),
    ("Load Balancer", True),  # a span made only of ordinary words is ordinary, however capitalized
    ("the load balancer", True),  # function words do not count either way
    ("Kafka", False),  # the corpus writes it capitalized
    ("Kafka config", False),  # one name in the span makes it a name
    ("etcd", False),  # not an English word, whatever case the corpus writes it in
    ("payments-api", False),  # a name's shape
])
def test_ordinary_words_are_ordinary_whatever_their_case_punctuation_or_number(phrase, ordinary):
    corpus = CorpusCase(["Set the config and restart; the load balancer keeps the complete authentication "
                         "config. Kafka reads etcd. The balancer and the load are fine; etcd again."])
    assert is_generic_word(phrase, corpus) is ordinary


def test_a_phrase_names_the_entity_it_leaves_without_head_words_and_the_one_spelled_joined():
    names = NameIndex(
        [Entity("e-vault", "vault", "vault", "Service", "", 1, (), ()),
         Entity("e-writer", "ledgerwriter", "ledgerwriter", "Service", "", 1, (), ())],
        head_words=("service", "readme"),
    )
    assert [(link.phrase, link.entity_ids) for link in names.link("Is the Vault Service healthy?")] == [
        ("Vault Service", {"e-vault"})]
    assert [(link.phrase, link.entity_ids) for link in names.link("Ledger Writer is down")] == [
        ("Ledger Writer", {"e-writer"})]
    assert names.link("Service is down") == []  # a head word alone names nothing


# --- intents --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def intents() -> IntentReader:
    return IntentReader(load_settings().ontology)


def link(phrase: str, start: int, *ids: str, confidence: float = 1.0) -> NameLink:
    return NameLink(phrase, frozenset(ids or (phrase.lower(),)), start, confidence)


@pytest.mark.parametrize("question, expected", [
    ("Ledger Service is degraded. Which services does it depend on?", ("DEPENDS_ON", "outgoing")),
    ("Which services depend on Ledger Service?", ("DEPENDS_ON", "incoming")),
    ("Ledger Service is down. Which services that depend on it are affected?", ("DEPENDS_ON", "incoming")),
    ("Who owns Ledger Service?", ("OWNED_BY", "outgoing")),
    ("What are the dependencies of Ledger Service?", ("DEPENDS_ON", "outgoing")),
    ("Ledger Service is slow. Which of its direct dependencies should we check?", ("DEPENDS_ON", "outgoing")),
    ("Which services must be up for Ledger Service to work?", ("DEPENDS_ON", "outgoing")),
    ("Is there a runbook for Ledger Service?", ("HAS_RUNBOOK", "outgoing")),
])
def test_the_ontology_phrases_decide_the_relationship_and_its_direction(intents, question, expected):
    found = intents.read(question, [link("Ledger Service", question.index("Ledger Service"), "ent-ledger")])
    assert [(i.relationship_type, i.direction) for i in found] == [expected]
    assert found[0].subjects == {"ent-ledger"}


def test_no_phrase_no_intent_and_a_weak_referent_is_not_a_subject(intents):
    assert intents.read("Ledger Service records coin transfers.", [link("Ledger Service", 0, "e")]) == []
    weak = [link("package", 10, "e", confidence=GENERIC_NAME_CONFIDENCE)]
    assert intents.read("The alert package is down. What depends on it?", weak) == []
    # Named in the phrase itself, even a generic word is the subject: the phrase says more than the word.
    named = intents.read("What depends on package?", [link("package", 16, "e", confidence=GENERIC_NAME_CONFIDENCE)])
    assert [(i.relationship_type, i.direction, i.subjects) for i in named] == [("DEPENDS_ON", "incoming", {"e"})]


def test_an_intent_phrase_in_quoted_alert_text_does_not_fire(intents):
    vault = [link("vault", 0, "ent-vault")]
    quoted = "An alert is firing: payments calls vault for every request. Check vault first."
    assert intents.read(quoted, [link("vault", quoted.index("vault"), "ent-vault")]) == []
    asked = "An alert is firing: payments calls vault. Which services call vault?"
    found = intents.read(asked, [link("vault", asked.rindex("vault"), "ent-vault")])
    assert [(i.relationship_type, i.direction, i.phrase) for i in found] == [("DEPENDS_ON", "incoming", "call vault")]
    # A question without a question mark asks in its first clause only.
    assert intents.read("List the callers of vault", vault)[0].relationship_type == "DEPENDS_ON"
    assert intents.read("Vault alert: payments calls vault", vault) == []


def test_a_reference_points_at_the_named_entity_that_has_the_asked_relationships(intents):
    question = "Currency is degraded: which consumers of it will see errors?"
    weak = [link("Currency", 0, "ent-money", confidence=GENERIC_NAME_CONFIDENCE)]
    assert intents.read(question, weak) == []  # without the graph, a weak word is no referent
    with_edges = intents.read(question, weak, lambda ids, relationship_type: relationship_type == "DEPENDS_ON")
    assert [(i.relationship_type, i.direction, i.subjects) for i in with_edges] == [
        ("DEPENDS_ON", "incoming", {"ent-money"})]
    assert intents.read(question, weak, lambda ids, relationship_type: False) == []  # nothing to follow: no referent


@pytest.mark.parametrize("question", [
    "What are the dependencies of the checkout service?",  # a determiner before the name
    "Checkout is slow: which of its dependencies should we check?",  # a possessive reference
])
def test_determiners_and_possessive_references_come_from_the_ontology(intents, question):
    start = question.lower().index("checkout")
    words = "checkout service" if "service" in question else "checkout"
    named = link(question[start:start + len(words)], start, "ent-checkout")
    found = intents.read(question, [named], lambda ids, relationship_type: True)
    assert [(i.relationship_type, i.direction, i.subjects) for i in found] == [
        ("DEPENDS_ON", "outgoing", {"ent-checkout"})]


def test_a_chain_reference_asks_from_what_the_step_before_reached_in_the_order_asked(intents):
    question = "Alert on payment: which services depend on it, and who owns them?"
    named = link("payment", question.index("payment"), "ent-payment")
    found = intents.read(question, [named], lambda ids, relationship_type: True)
    assert [(i.relationship_type, i.direction, i.chained) for i in found] == [
        ("DEPENDS_ON", "incoming", False), ("OWNED_BY", "outgoing", True)]
    # A plain reference is no chain: "who owns it" asks for the named service's owner.
    question = "Which services depend on payment, and who owns it?"
    plain = intents.read(question, [link("payment", question.index("payment"), "ent-payment")],
                         lambda ids, relationship_type: True)
    assert [(i.relationship_type, i.chained, i.subjects) for i in plain][-1] == ("OWNED_BY", False, {"ent-payment"})


@pytest.mark.parametrize("question", [
    "Alert on payment: which services depend on it, and who owns them?",
    "Which services depend on payment, and who owns it?",
    "Checkout is slow: which of its dependencies should we check? Who owns payment?",
    "payment is degraded. Who owns the services that depend on it?",
])
def test_what_a_question_may_ask_holds_whatever_its_intents_follow(intents, question):
    links = [link("payment", question.index("payment"), "ent-payment"),
             link("Checkout", 0, "ent-checkout", confidence=GENERIC_NAME_CONFIDENCE)]
    asked = intents.asked(question, links)
    assert asked is not None and asked.entity_ids == ("ent-checkout", "ent-payment")
    for has_relationships in (None, lambda ids, relationship_type: True, lambda ids, relationship_type: False,
                              lambda ids, relationship_type: "ent-checkout" in ids):
        found = intents.read(question, links, has_relationships)
        assert {(i.relationship_type, i.direction) for i in found} <= set(asked.steps)
        assert all(i.subjects <= set(asked.entity_ids) for i in found)
        assert asked.depth >= 1 + sum(i.chained for i in found)
    assert intents.asked("payment records coin transfers.", links) is None
    assert intents.asked(question, []) is None


def test_phrases_come_from_the_ontology_not_the_engine():
    ontology = Ontology(
        entity_types=({"name": "Thing"},), default_entity_type="Thing",
        relationship_types=({"name": "FEEDS", "query_phrases": {"outgoing": ["what does {x} feed"]}},
                            {"name": "RELATED_TO"}),
        fallback_relationship_type="RELATED_TO",
    )
    reader = IntentReader(ontology)
    found = reader.read("What does Mill feed?", [link("Mill", 10, "mill")])
    assert [(i.relationship_type, i.direction) for i in found] == [("FEEDS", "outgoing")]
    assert reader.read("What does Mill depend on?", [link("Mill", 10, "mill")]) == []
    with pytest.raises(ValueError, match="must hold"):
        Ontology(entity_types=({"name": "Thing"},), default_entity_type="Thing",
                 relationship_types=({"name": "FEEDS", "query_phrases": {"outgoing": ["what feeds"]}},
                                     {"name": "RELATED_TO"}))


# --- keyword index --------------------------------------------------------------------------------------------------


def test_bm25_scores_are_a_share_of_a_perfect_match_and_identifiers_weigh_more():
    index = KeywordIndex([
        ("a", "quota tokens expire during settlement"),
        ("b", "the error ERR_QUOTA_7 means the quota expired " + "filler words here " * 20),
        ("c", "nothing relevant"),
    ])
    scores = index.scores("quota ERR_QUOTA_7", limit=10)
    assert set(scores) == {"a", "b"} and all(0 < s < 1 for s in scores.values())
    assert scores["b"] > scores["a"]  # the identifier outweighs the short page's shared word
    assert index.best_match_shares("quota ERR_QUOTA_7", limit=10) == {"b": 1.0, "a": scores["a"] / scores["b"]}
    assert index.scores("unknown vocabulary", limit=10) == {}
    assert index.identifier_matches("what is ERR_QUOTA_7?") == {"b": pytest.approx(1.0)}
    assert index.identifier_matches("quota tokens") == {}


def test_a_sub_identifier_many_documents_share_scores_near_zero():
    """Each identifier counts 1 / the documents that hold it; a document's chunks count once."""
    texts = [(f"page-{n}", f"see http_requests_total on page {n}") for n in range(20)]
    texts += [("runbook#1", "PgBouncerPoolExhausted fires when http_requests_total stalls"),
              ("runbook#2", "PgBouncerPoolExhausted: raise the pool size")]
    index = KeywordIndex(texts, groups={"runbook#1": "runbook", "runbook#2": "runbook"})
    shared = index.identifier_matches("http_requests_total is flat")
    assert len(shared) == 21 and max(shared.values()) == pytest.approx(1 / 21)
    both = index.identifier_matches("PgBouncerPoolExhausted and http_requests_total")
    assert both["runbook#1"] == pytest.approx(0.5 + 0.5 / 21) and both["runbook#2"] == pytest.approx(0.5)
    assert both["page-3"] == pytest.approx(0.5 / 21)


def test_camel_case_names_count_their_words_too():
    """A runbook titled "AlertmanagerFailedToSendAlerts" matches a question that says "failed to send" in words."""
    assert terms("AlertmanagerFailedToSendAlerts KubeAPIDown") == [
        "alertmanagerfailedtosendalerts", "kubeapidown",
        "alertmanager", "failed", "to", "send", "alerts", "kube", "api", "down",
    ]
    index = KeywordIndex([("runbook", "AlertmanagerFailedToSendAlerts\nCheck the receiver."),
                          ("other", "Alertmanager config reload\nThe reload failed.")])
    assert max(index.scores("An instance failed to send notifications", limit=2).items(),
               key=lambda kv: kv[1])[0] == "runbook"


def test_identifier_shapes():
    found = identifiers("KubePodCrashLooping node_cpu_total api.v1 http2 payments-api 1990s Paris well-known")
    assert found == {"kubepodcrashlooping", "node_cpu_total", "api.v1", "http2"}


def test_terms_keep_compound_identifiers_whole_beside_their_words():
    text = "Page payments-api (see _ledger-db.v2 and ERR_QUOTA_7); x-y-z, a-, -b, café-crème ok."
    assert terms(text) == [
        "page", "payments", "api", "see", "ledger", "db", "v2", "and", "err", "quota", "7", "x", "y", "z", "a", "b",
        "café", "crème", "ok",
        "payments-api", "ledger-db.v2", "err_quota_7", "x-y-z", "café-crème",
    ]


def test_corpus_case_counts_every_occurrence_by_its_folded_spelling():
    corpus = CorpusCase(["Kafka kafka KAFKA Straße", "strasse STRASSE kafka"])
    assert corpus.lowercase_share("kafka") == pytest.approx(2 / 4)
    assert corpus.lowercase_share("Strasse") == pytest.approx(1 / 3)  # "Straße" folds to "strasse"
    assert corpus.lowercase_share("absent") is None


def test_an_entity_is_named_by_its_names_canonical_name_and_aliases_each_in_every_spelling():
    # A canonical name that is not the name's key (an alias rule mapped "K8s" onto the cluster's node) is indexed
    # in its own right, as are the aliases; the name's key is worked out once.
    index = NameIndex([Entity("e1", "K8s", "kubernetes cluster", "TECHNOLOGY", "", 1, (), (), ("KubeCluster",)),
                       Entity("e2", "Ledger Service", "ledger service", "Service", "", 1, (), (), ())])
    named = index.names(["e1", "e2"])
    expected_e1 = {*name_variants("K8s"), *name_variants("kubernetes cluster"), *name_variants("KubeCluster")}
    assert {key for key, ids in named.items() if ids == {"e1"}} == expected_e1
    assert {key for key, ids in named.items() if ids == {"e2"}} == name_variants("Ledger Service")
    assert "kubernetes-cluster" in expected_e1 and "kubecluster" in expected_e1


def test_names_of_entities_are_every_key_naming_them_with_only_the_entities_asked_for():
    def entity(entity_id: str, name: str, aliases: tuple[str, ...] = ()) -> Entity:
        return Entity(entity_id, name, name.lower(), "Service", "", 1, (), (), aliases)

    index = NameIndex([entity("e1", "Ledger Service", ("ledger",)), entity("e2", "Ledger"), entity("e3", "Kafka")])
    assert index.names(["e1", "e3", "unknown"]) == {
        key: {"e1"} for key in {*name_variants("Ledger Service"), *name_variants("ledger")}
    } | {key: {"e3"} for key in name_variants("Kafka")}
    assert index.names(["e2"]) == {key: {"e2"} for key in name_variants("Ledger")}
    assert index.names([]) == {}
