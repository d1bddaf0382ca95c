"""The incident context of a service: the slice of the system an on-call engineer (or an agent) needs, as typed facts.

``index.context("payments-api")`` or ``index.context("alert on payments-api: which services depend on it?")``:
the service (named, or linked from the question); its dependencies and dependents within ``max_hops`` (the blast
radius) with the hop count and path of each; the owners of each, with the contacts their catalog entry gives; the
runbooks and documents about each (catalog links, then ``query.aboutness``); the incidents that affected each; and
every fact used, with the documents that state it. A question that asks for one direction only ("which services
depend on it") gets that direction; a bare name gets both.

It walks only relationships some document the caller may read states, and shows only entities, contacts and
documents the caller may read, so a fact only a restricted document supplies neither appears nor shapes what
does. Caps (``retrieval.context``) bound its size; what a cap cut is counted in ``truncated``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graphrag_pipeline.lib.core.config import ContextConfig
from graphrag_pipeline.lib.core.models import Document, Entity, Relationship
from graphrag_pipeline.lib.sources.catalog import CONTACTS_KEY, REFERENCED_ORIGIN
from graphrag_pipeline.lib.stores.protocols import AskedRelationships, GraphStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.query.aboutness import Aboutness
from graphrag_pipeline.query.access import ReaderAccess
from graphrag_pipeline.query.intent import IntentReader
from graphrag_pipeline.query.linking import NameIndex
from graphrag_pipeline.query.retrievers import Hidden

FACT_DOCUMENTS = 5  # documents cited per fact: enough to check it


@dataclass(frozen=True)
class ContextFact:
    """source -[type]-> target, with up to ``FACT_DOCUMENTS`` readable documents that state it."""

    source: str
    type: str
    target: str
    doc_ids: list[str]


@dataclass(frozen=True)
class ContextDocument:
    doc_id: str
    title: str
    uri: str
    via: str  # the relationship type of a catalog link ("HAS_RUNBOOK"), or "about" (its title, path or links)
    about: float  # how strongly it is about the service (1 for a catalog link)


@dataclass(frozen=True)
class ContextOwner:
    id: str
    name: str
    contacts: dict[str, str]  # from the owner's catalog entry (email, chat channel, on-call), when readable


@dataclass(frozen=True)
class ContextIncident:
    id: str
    name: str
    description: str
    doc_ids: list[str]


@dataclass(frozen=True)
class ContextService:
    id: str
    name: str
    type: str
    role: str  # "subject" | "dependency" | "dependent"
    hops: int  # from the subject (0 for the subject)
    path: list[str]  # names from the subject to this service, along the dependency edges
    system: str = ""  # the system its catalog entry names: which one a name two systems share means here
    owners: list[ContextOwner] = field(default_factory=list)
    runbooks: list[str] = field(default_factory=list)  # runbook links the catalog names (URLs or titles)
    documents: list[ContextDocument] = field(default_factory=list)
    incidents: list[ContextIncident] = field(default_factory=list)


@dataclass(frozen=True)
class IncidentContext:
    subject: str  # what the caller asked about
    subjects: list[ContextService]  # the services it names (a name two systems share names both)
    dependencies: list[ContextService]
    dependents: list[ContextService]
    facts: list[ContextFact]
    truncated: dict[str, int] = field(default_factory=dict)  # what the caps left out, by kind
    index_updating: bool = False  # as on ``QueryResponse``: source changes the index has not finished taking in

    def services(self) -> list[ContextService]:
        return [*self.subjects, *self.dependents, *self.dependencies]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        """A compact rendering to put into a prompt."""
        if not self.subjects:
            lines = [f"No service found for {self.subject!r}."]
        else:
            lines = [f"# Incident context: {', '.join(s.name for s in self.subjects)}"]
        for heading, services in (("Service", self.subjects), ("Dependents (blast radius)", self.dependents),
                                  ("Dependencies", self.dependencies)):
            if services:
                lines += ["", f"## {heading}"]
                lines += [_service_line(service) for service in services]
        if self.truncated:
            lines += ["", "Left out by the caps: " + ", ".join(f"{n} {kind}" for kind, n in self.truncated.items())]
        if self.index_updating:
            lines += ["", "The index is taking in source changes: this context may miss them."]
        return "\n".join(lines)


def _service_line(service: ContextService) -> str:
    where = f" ({service.hops} hop{'s' if service.hops != 1 else ''}: {' → '.join(service.path)})" if service.hops else ""
    parts = [f"- **{service.name}**{f' [{service.system}]' if service.system else ''}{where}"]
    if service.owners:
        parts.append("owner " + ", ".join(
            owner.name + (f" ({', '.join(owner.contacts.values())})" if owner.contacts else "") for owner in service.owners))
    linked = [d for d in service.documents if d.via != "about"]
    runbooks = [f"{d.title or d.doc_id} <{d.doc_id}>" for d in linked] or service.runbooks
    if runbooks:
        parts.append("runbooks: " + ", ".join(runbooks))
    about = [f"{d.title or d.doc_id} <{d.doc_id}>" for d in service.documents if d.via == "about"]
    if about:
        parts.append("docs: " + ", ".join(about))
    if service.incidents:
        parts.append("incidents: " + ", ".join(incident.name for incident in service.incidents))
    return "; ".join(parts)


class ContextBuilder:
    """Builds incident contexts over one open index's stores and lookups (thread-safe: it keeps no per-call state)."""

    def __init__(
        self,
        config: ContextConfig,
        *,
        state: StateStore,
        graph: GraphStore,
        names: Callable[[], NameIndex],
        intents: IntentReader,
        aboutness: Callable[[], Aboutness],
        catalog_pages: Callable[[], set[str]],
        hidden: Callable[[frozenset[str]], Hidden],
    ):
        self.config = config
        self.state = state
        self.graph = graph
        self._names = names
        self._intents = intents
        self.aboutness = aboutness
        self.catalog_pages = catalog_pages
        self._hidden = hidden

    def build(self, subject: str, access: ReaderAccess, *, max_hops: int | None = None) -> IncidentContext:
        if not isinstance(subject, str) or not subject.strip():
            raise ValueError("subject is empty: name a service or ask a question about one")
        hops = self.config.max_hops if max_hops is None else max_hops
        if not isinstance(hops, int) or not 0 <= hops <= 3:
            raise ValueError(f"max_hops must be between 0 and 3, not {hops!r}")
        subject_ids, directions = self._subjects(subject, self._hidden(access.unreadable()))
        graph = _ContextGraph.read(self.graph, self.config, subject_ids, directions, hops)
        entities = {eid: e for eid, e in graph.get_entities(subject_ids).items() if access.can_read_any(e.doc_ids)}
        truncated: dict[str, int] = {}
        facts: dict[str, Relationship] = {}
        roles: list[tuple[str, list[tuple[str, int, tuple[str, ...]]]]] = [
            ("subject", [(eid, 0, (eid,)) for eid in sorted(entities, key=lambda e: entities[e].name)])]
        for role, direction in (("dependent", "incoming"), ("dependency", "outgoing")):
            reached = self._walk(graph, list(entities), direction, hops, access, facts, truncated, role) \
                if direction in directions else []
            roles.append((role, reached))
        everyone = {eid for _, reached in roles for eid, _, _ in reached}
        entities.update(graph.get_entities(everyone - set(entities)))
        details = _ServiceDetails(self, access, facts, truncated)
        details.read(graph, everyone, entities)
        # Nearest first; within a hop, alphabetically (the walk already kept the heaviest edge into each).
        services = {role: [details.service(entities[eid], role, hop, [entities[e].name for e in path if e in entities])
                           for eid, hop, path in sorted(reached, key=lambda r: (r[1], entities[r[0]].name
                                                                                if r[0] in entities else r[0]))
                           if eid in entities]
                    for role, reached in roles}
        return IncidentContext(
            subject=subject,
            subjects=services["subject"],
            dependencies=services["dependency"],
            dependents=services["dependent"],
            facts=self._facts(graph, facts.values(), access),
            truncated=truncated,
        )

    def _subjects(self, subject: str, hidden: Hidden) -> tuple[set[str], set[str]]:
        """The services the caller means, and which dependency directions to follow: a name as given names its
        entities (every one of them: two systems may share it); a question names those its dependency intents are
        about, else the most confident link that has dependency edges, else the most confident link — chosen, as a
        query's links are, from what the caller may read (``Hidden``)."""
        names = self._names()
        both = {"incoming", "outgoing"}
        exact = names.ids(subject) - hidden.elements
        if exact:
            return set(exact), both
        links = hidden.visible_links(names.link(subject))
        dependency = self.config.dependency_type
        has_edges = hidden.has_relationships(self.graph)
        intents = [i for i in self._intents.read(subject, links, has_edges) if i.relationship_type == dependency]
        if intents:
            return {eid for intent in intents for eid in intent.subjects}, {intent.direction for intent in intents}
        ranked = sorted(links, key=lambda link: (-link.confidence, link.start))
        for link in ranked:
            if has_edges(link.entity_ids, dependency):
                return set(link.entity_ids), both
        return (set(ranked[0].entity_ids) if ranked else set()), both

    def _walk(
        self, graph: _ContextGraph, start: Sequence[str], direction: str, max_hops: int, access: ReaderAccess,
        facts: dict[str, Relationship], truncated: dict[str, int], role: str,
    ) -> list[tuple[str, int, tuple[str, ...]]]:
        """Breadth-first along readable dependency edges in ``direction``: (entity, hops, path), nearest first,
        heavier edges first within a hop, at most ``max_services``."""
        seen = set(start)
        paths = {eid: (eid,) for eid in start}
        frontier = list(start)
        reached: list[tuple[str, int, tuple[str, ...]]] = []
        cut = 0
        for hop in range(1, max_hops + 1):
            if not frontier:
                break
            relationships = graph.relationships_of(frontier, [self.config.dependency_type])
            steps: dict[str, tuple[float, str, Relationship]] = {}
            for relationship in relationships.values():
                if not access.can_read_any(relationship.doc_ids):
                    continue
                near, far = ((relationship.source_id, relationship.target_id) if direction == "outgoing"
                             else (relationship.target_id, relationship.source_id))
                if near not in paths:
                    continue
                facts[relationship.relationship_id] = relationship  # also between services already reached
                if far in seen:
                    continue
                best = steps.get(far)
                if best is None or (relationship.weight, near) > (best[0], best[1]):
                    steps[far] = (relationship.weight, near, relationship)
            ordered = sorted(steps, key=lambda eid: (-steps[eid][0], eid))
            frontier = []
            for eid in ordered:
                if len(reached) >= self.config.max_services:
                    cut += 1
                    continue
                seen.add(eid)
                paths[eid] = (*paths[steps[eid][1]], eid)
                reached.append((eid, hop, paths[eid]))
                frontier.append(eid)
        if cut:
            truncated[f"{role}s"] = cut
            kept = set(paths)
            for rid, relationship in list(facts.items()):  # a fact to a service the cap left out goes with it
                if relationship.type == self.config.dependency_type and not (
                        relationship.source_id in kept and relationship.target_id in kept):
                    del facts[rid]
        return reached

    def _facts(self, graph: _ContextGraph, relationships: Iterable[Relationship],
               access: ReaderAccess) -> list[ContextFact]:
        relationships = list(relationships)
        names = {eid: e.name for eid, e in graph.get_entities(
            {r.source_id for r in relationships} | {r.target_id for r in relationships}).items()}
        order = {t: i for i, t in enumerate((self.config.dependency_type, self.config.owner_type,
                                             *self.config.document_types, self.config.incident_type))}
        facts = [ContextFact(names[r.source_id], r.type, names[r.target_id],
                             sorted(d for d in r.doc_ids if access.can_read(d))[:FACT_DOCUMENTS])
                 for r in relationships if r.source_id in names and r.target_id in names]
        return sorted(facts, key=lambda f: (order.get(f.type, len(order)), f.source, f.target))


class _ContextGraph:
    """What a context reads of the graph, read before it starts: every relationship its walks and its services'
    details may take, and every entity at their ends, in two reads (on a server, two round trips, where a read per
    hop, direction and kind took nine). It answers ``relationships_of`` and ``get_entities`` as the store would for
    the entities a context reaches, since a walk reaches no further than its steps read, whatever the caller may
    read of them."""

    def __init__(self, relationships: dict[str, Relationship], entities: dict[str, Entity]):
        self._relationships = relationships
        self._entities = entities

    @classmethod
    def read(cls, graph: GraphStore, config: ContextConfig, subject_ids: set[str], directions: set[str],
             hops: int) -> _ContextGraph:
        details = sorted({config.owner_type, *config.document_types, config.incident_type} - {config.dependency_type})
        # A walk of ``hops`` hops reads the dependencies of the services up to ``hops - 1`` steps away, and the details
        # of those up to ``hops`` away: a read ``hops`` steps deep along the walk's direction holds both.
        asked = [AskedRelationships(tuple(sorted(subject_ids)), ((config.dependency_type, direction),), hops + 1,
                                    also=tuple(details)) for direction in sorted(directions)]
        relationships = graph.asked_relationships(asked)
        ends = {end for r in relationships.values() for end in (r.source_id, r.target_id)}
        return cls(relationships, graph.get_entities(subject_ids | ends))

    def relationships_of(self, entity_ids: Iterable[str], relationship_types: Sequence[str]) -> dict[str, Relationship]:
        ids, types = set(entity_ids), set(relationship_types)
        return {rid: r for rid, r in self._relationships.items()
                if r.type in types and (r.source_id in ids or r.target_id in ids) and r.source_id != r.target_id}

    def get_entities(self, entity_ids: Iterable[str]) -> dict[str, Entity]:
        return {eid: self._entities[eid] for eid in entity_ids if eid in self._entities}


class _ServiceDetails:
    """Owners, runbooks, documents and incidents of the context's services, read for all of them at once."""

    def __init__(self, builder: ContextBuilder, access: ReaderAccess, facts: dict[str, Relationship],
                 truncated: dict[str, int]):
        self.builder = builder
        self.config = builder.config
        self.access = access
        self.facts = facts
        self.truncated = truncated
        self.edges: dict[str, list[Relationship]] = {}  # service id -> its readable owner/document/incident edges
        self.entities: dict[str, Entity] = {}  # the other ends of those edges that the caller may see
        self.about: dict[str, list[tuple[float, str, str]]] = {}  # service id -> (strength, doc id, via), best first
        self.documents: dict[str, Document] = {}

    def read(self, graph: _ContextGraph, service_ids: Iterable[str], services: Mapping[str, Entity]) -> None:
        config = self.config
        service_ids = set(service_ids)
        types = [config.owner_type, *config.document_types, config.incident_type]
        relationships = graph.relationships_of(service_ids, types)
        for relationship in sorted(relationships.values(), key=lambda r: (-r.weight, r.relationship_id)):
            if not self.access.can_read_any(relationship.doc_ids):
                continue
            incident = relationship.type == config.incident_type
            service = relationship.target_id if incident else relationship.source_id
            if service in service_ids:
                self.edges.setdefault(service, []).append(relationship)
        others = {r.target_id if r.source_id == s else r.source_id for s, rs in self.edges.items() for r in rs}
        self.entities = {eid: e for eid, e in graph.get_entities(others).items()
                         if self.access.can_read_any(e.doc_ids)}
        aboutness = self.builder.aboutness()
        catalog_pages = self.builder.catalog_pages()
        wanted: set[str] = set()
        for service in service_ids:
            about = [(strength, doc_id, "about") for doc_id, strength in aboutness.documents_about(service).items()
                     if doc_id not in catalog_pages]
            for relationship in self.edges.get(service, ()):
                if relationship.type in config.document_types:
                    about += [(strength, doc_id, relationship.type) for doc_id, strength
                              in aboutness.documents_about(relationship.target_id).items()]
            best: dict[str, tuple[float, str, str]] = {}
            for strength, doc_id, via in about:
                # A document a catalog link names is shown as that link's (a runbook), however it is also about it.
                if self.access.can_read(doc_id) and (doc_id not in best or (strength, via != "about")
                                                     > (best[doc_id][0], best[doc_id][2] != "about")):
                    best[doc_id] = (strength, doc_id, via)
            self.about[service] = sorted(best.values(), key=lambda item: (-item[0], item[2] == "about", item[1]))
            wanted.update(doc_id for _, doc_id, _ in self.about[service][: config.documents_per_service])
        # The catalog entries of the services (their system) and of their owners (their contacts).
        own_pages = {d for e in [*self.entities.values(), *services.values()] for d in e.doc_ids
                     if d in catalog_pages and self.access.can_read(d)}
        self.documents = {d.doc_id: d
                          for d in self.builder.state.documents(doc_ids=wanted | own_pages, with_text=False)}

    def service(self, entity: Entity, role: str, hops: int, path: list[str]) -> ContextService:
        config = self.config
        edges = self.edges.get(entity.entity_id, [])
        owners, runbooks, incidents = [], [], []
        for relationship in edges:
            other_id = (relationship.source_id if relationship.type == config.incident_type
                        else relationship.target_id)
            other = self.entities.get(other_id)
            if other is None:
                continue
            if relationship.type == config.owner_type:
                kept = self._capped(owners, config.owners_per_service, "owners")
                if kept:
                    contacts = self._entry(other).get(CONTACTS_KEY)
                    owners.append(ContextOwner(other.entity_id, other.name, {
                        str(k): str(v) for k, v in contacts.items()} if isinstance(contacts, dict) else {}))
            elif relationship.type in config.document_types:
                runbooks.append(other.name)  # a catalog link: short, and the documents below resolve it
            elif self._capped(incidents, config.incidents_per_service, "incidents"):
                incidents.append(ContextIncident(other.entity_id, other.name, self.access.description(other)[:300],
                                                 sorted(d for d in relationship.doc_ids if self.access.can_read(d))
                                                 [:FACT_DOCUMENTS]))
            else:
                continue
            self.facts[relationship.relationship_id] = relationship
        about = self.about.get(entity.entity_id, [])
        if len(about) > config.documents_per_service:
            self.truncated["documents"] = self.truncated.get("documents", 0) + len(about) - config.documents_per_service
        documents = [ContextDocument(doc_id, self.documents[doc_id].title, self.documents[doc_id].uri, via,
                                     round(strength, 3))
                     for strength, doc_id, via in about[: config.documents_per_service] if doc_id in self.documents]
        system = self._entry(entity).get("system")
        return ContextService(entity.entity_id, entity.name, entity.type, role, hops, path,
                              system if isinstance(system, str) else "", owners, sorted(set(runbooks)), documents,
                              incidents)

    def _capped(self, kept: list, cap: int, kind: str) -> bool:
        """Whether one more fits under ``cap``; counts the ones that do not."""
        if len(kept) < cap:
            return True
        self.truncated[kind] = self.truncated.get(kind, 0) + 1
        return False

    def _entry(self, entity: Entity) -> Mapping[str, Any]:
        return catalog_entry(entity, self.documents)


def catalog_entry(entity: Entity, documents: Mapping[str, Document]) -> Mapping[str, Any]:
    """The metadata of the entity's own catalog entry among ``documents`` (the catalog page titled by its name): its
    definition rather than a page another catalog writes for it because it refers to it; empty when none is there."""
    pages = [document.metadata for doc_id in entity.doc_ids
             if (document := documents.get(doc_id)) is not None and document.title == entity.name]
    return next((p for p in pages if p.get("catalog_origin") != REFERENCED_ORIGIN), pages[0] if pages else {})


def catalog_systems(state: StateStore, entities: Iterable[Entity], catalog_pages: set[str],
                    access: ReaderAccess) -> dict[str, str]:
    """Entity id → the system its readable catalog entry names (``spec.system``), for those that have one."""
    if not catalog_pages:  # nothing to look at (an entity of a large corpus cites hundreds of other documents)
        return {}
    entities = list(entities)
    wanted = {d for e in entities for d in e.doc_ids if d in catalog_pages and access.can_read(d)}
    if not wanted:
        return {}
    documents = {d.doc_id: d for d in state.documents(doc_ids=wanted, with_text=False)}
    systems = {e.entity_id: catalog_entry(e, documents).get("system") for e in entities}
    return {eid: system for eid, system in systems.items() if isinstance(system, str) and system}
