"""Structured catalogs: a service-catalog YAML and Backstage ``catalog-info.yaml`` entities as typed nodes and edges.

A ``catalog`` source (``path``: one file, or a folder searched for ``*.yaml`` / ``*.yml``, hidden entries skipped,
symbolic links out of it refused and quarantined, files over ``max_document_bytes`` quarantined) holds either
format; a file may mix Backstage documents (``---`` separated). Every catalog entity becomes one ``Document``:
``doc_id = "<source>:<kind>:<namespace>/<name>"``, title = the entity's name (so it is the subject of its own page
and the query engine's title-subject bonus applies), text = plain generated sentences ("cart is owned by
team-cart.", "cart depends on valkey-cart."), and ``metadata["catalog"] = True``. Next to the text, each document
carries an exact extraction record (``SourceScan.extractions``): the entity names, ``[subject, predicate, object]``
triples (the ``precomputed`` extractor's format, so ``lib.extraction.precomputed_extractions`` reads it too) and,
under ``"catalog"``, the ontology type of every name and of every triple. ``extract_with_catalogs`` turns those into
mentions; a workspace that routes catalog documents through it gets the catalog's facts exactly, whatever extractor
is configured for text. Text sources mention the same names, and elements merge by normalized name, so a service is
one node whether a runbook or the catalog talks about it.

Service catalog (a top-level ``services:`` list, optional ``teams:`` list)::

    services:
      - name: checkout
        tier: 1
        owners: [team-checkout]          # or owner: team-checkout; entity refs like group:team-checkout work too
        depends_on: [cart, currency]     # plain names are services; "resource:orders-db" names another kind
        runbooks: [https://runbooks.example.com/checkout, {title: Checkout down, url: https://…}]
        description: Places orders.
        title: Checkout Service          # optional: other names text and questions use (title, aliases)
        aliases: [checkout-svc]
    teams:
      - {name: team-checkout, description: Owns the order flow.}

Backstage: ``apiVersion: backstage.io/v1alpha1`` documents of kind Component, Resource, API, System, Domain, Group
and User (Location and Template describe the catalog itself and are skipped). Entity references are
``[kind:][namespace/]name``; a missing kind takes the field's default (``spec.owner``: group, ``spec.dependsOn``:
component, ``spec.providesApis``/``consumesApis``: api, ``spec.system``: system, ``spec.domain``: domain,
``spec.memberOf``/``parent``: group, ``spec.children``: group, ``spec.members``: user), a missing namespace the
referring entity's own namespace (as Backstage resolves them).

Types and edges:

* Component, Resource and a service-catalog service are ``Service`` (a Resource such as a database or a cache is a
  deployed dependency: "which services does X depend on" must list it); Group and a service-catalog team are
  ``Team``; User is ``PERSON``; runbooks are ``Runbook``.
* API is ``TECHNOLOGY``: an API entity is an interface definition (OpenAPI, gRPC, AsyncAPI), not something that is
  deployed or paged for; typing it Service would list every interface a second time next to the component that
  serves it. System and Domain are ``CONCEPT``: groupings of services, not services.
* ``spec.owner`` / ``owners`` → ``OWNED_BY``; ``spec.dependsOn`` / ``depends_on`` → ``DEPENDS_ON`` (and
  ``spec.dependencyOf`` the reverse edge); ``spec.consumesApis`` → ``DEPENDS_ON`` with predicate "consumes API" (a
  consumer needs the API to work, which is what DEPENDS_ON means, so a dependency question follows it);
  ``spec.providesApis`` → ``RELATED_TO`` "provides API" (serving an interface is not needing it); runbooks (a
  service's ``runbooks`` or a Backstage ``metadata.links`` entry whose title, type or icon says runbook or playbook)
  → ``HAS_RUNBOOK``, the runbook named by its URL (a title when there is no URL); ``spec.system``,
  ``spec.domain``, ``spec.subcomponentOf``, group ``parent``/``children`` and memberships → ``RELATED_TO`` with
  their predicate, at weight 0.5: they group things, they do not say how things run.

Change detection: an entity's content hash covers its title, generated text, extraction record and metadata, all
derived from its own entry, so editing one entry re-ingests that document; the one exception is an owner's page,
which lists what it owns (as Backstage shows on a group's page), so a change of owner also re-ingests the old and the
new owner's pages. An entity that is referenced but defined nowhere in the source (a team only named as an owner, a
dependency outside the catalog) gets a page of its own as well, listing the references (its only content, so it
changes when they do). Edges live only in the records of the entries that state them. A broken entry is quarantined (item id = its doc id when its name can still be read, so the
last good version stays indexed) and the rest of the file goes on; a document that is not a catalog (a Kubernetes
manifest, a compose file) is skipped in a folder and quarantined when the source names the file itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from graphrag_pipeline.lib.core.config import CatalogSource, Ontology
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.ids import content_hash, normalize_name
from graphrag_pipeline.lib.core.models import (
    Chunk,
    ChunkExtraction,
    Document,
    EntityMention,
    Quarantined,
    RelationMention,
)
from graphrag_pipeline.lib.sources.paths import (
    FolderListing,
    SourceFile,
    has_suffix,
    list_folder,
    read_file,
    relative_posix,
)
from graphrag_pipeline.lib.sources.reader import (
    RAW_EXCERPT,
    STAGE,
    ReadContext,
    SourceScan,
    YamlAliasError,
    json_safe,
    load_untrusted_yaml,
    unreadable_marker,
)

CATALOG_SUFFIXES = frozenset({".yaml", ".yml"})
RECORD_KEY = "catalog"  # key of the typed part of a catalog document's extraction record
RECORD_VERSION = 2  # 2: the other names of each entity (title, declared aliases, full reference)
SPOTTER = "catalog"
REFERENCED_ORIGIN = "referenced"  # the origin of a page written for an entity only referred to, never defined
CONTACTS_KEY = "contacts"  # a document's metadata key for its entity's contacts (query.context reads it)
DEFAULT_NAMESPACE = "default"
BACKSTAGE_API_PREFIX = "backstage.io/"

# Entity kind (Backstage kinds, service-catalog "service"/"team", runbook targets) -> ontology entity type.
KIND_TYPES: dict[str, str] = {
    "component": "Service",
    "resource": "Service",
    "service": "Service",
    "api": "TECHNOLOGY",
    "system": "CONCEPT",
    "domain": "CONCEPT",
    "group": "Team",
    "team": "Team",
    "user": "PERSON",
    "runbook": "Runbook",
}
_KIND_WORDS = {
    "component": "component",
    "resource": "resource",
    "service": "service",
    "api": "API",
    "system": "system",
    "domain": "domain",
    "group": "team",
    "team": "team",
    "user": "user",
}
BACKSTAGE_KINDS = frozenset({"component", "resource", "api", "system", "domain", "group", "user"})
SKIPPED_KINDS = frozenset({"location", "template"})  # about the catalog itself, not about the system it describes


@dataclass(frozen=True, slots=True)
class RelationSpec:
    """How one kind of catalog statement becomes an edge."""

    predicate: str  # kept on the relationship; for typed edges it also types the stock precomputed path
    type: str  # ontology relationship type
    weight: float
    sentence: str  # "{s} ... {o}." as written in the entity's text


RELATIONS: dict[str, RelationSpec] = {
    "owned_by": RelationSpec("owned by", "OWNED_BY", 1.0, "{s} is owned by {o}."),
    "depends_on": RelationSpec("depends on", "DEPENDS_ON", 1.0, "{s} depends on {o}."),
    "consumes_api": RelationSpec("consumes API", "DEPENDS_ON", 1.0, "{s} consumes API {o}."),
    "provides_api": RelationSpec("provides API", "RELATED_TO", 1.0, "{s} provides API {o}."),
    "has_runbook": RelationSpec("has runbook", "HAS_RUNBOOK", 1.0, "{s} has runbook {o}."),
    "part_of_system": RelationSpec("part of system", "RELATED_TO", 0.5, "{s} is part of system {o}."),
    "part_of_domain": RelationSpec("part of domain", "RELATED_TO", 0.5, "{s} is part of domain {o}."),
    "subcomponent_of": RelationSpec("subcomponent of", "RELATED_TO", 0.5, "{s} is a subcomponent of {o}."),
    "sub_team_of": RelationSpec("sub-team of", "RELATED_TO", 0.5, "{s} is a sub-team of {o}."),
    "member_of": RelationSpec("member of", "RELATED_TO", 0.5, "{s} is a member of {o}."),
}


class CatalogError(GraphRAGError, ValueError):
    """An entry that cannot be read as a catalog entity; the message is the quarantine reason."""

    kind = "invalid"


# ------------------------------------------------------------------------------------------------- entity references

_REF = re.compile(r"(?:(?P<kind>[^:/\s]+):)?(?:(?P<namespace>[^:/\s]+)/)?(?P<name>[^:/\s]+)")
_NAME = re.compile(r"[^:/\s]+")


@dataclass(frozen=True, slots=True, order=True)
class EntityRef:
    kind: str  # lower case
    namespace: str  # lower case
    name: str  # as written

    @property
    def display(self) -> str:
        """The node name: the plain name in the default namespace (what text calls it), else namespace/name."""
        return self.name if self.namespace == DEFAULT_NAMESPACE else f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.namespace}/{self.name}"

    @property
    def entity_type(self) -> str:
        return KIND_TYPES.get(self.kind, "CONCEPT")

    @property
    def identity(self) -> str:
        """Backstage compares references case-insensitively."""
        return self.ref.casefold()


def parse_entity_ref(ref: Any, *, default_kind: str, default_namespace: str = DEFAULT_NAMESPACE) -> EntityRef:
    """``[kind:][namespace/]name`` → EntityRef, the kind and namespace defaulted when missing."""
    if not isinstance(ref, str) or not ref.strip():
        raise CatalogError(f"entity reference must be a non-empty string, got {ref!r}")
    match = _REF.fullmatch(ref.strip())
    if match is None:
        raise CatalogError(f"{ref!r} is not an entity reference of the form [kind:][namespace/]name")
    return EntityRef(
        kind=(match["kind"] or default_kind).lower(),
        namespace=(match["namespace"] or default_namespace).lower(),
        name=match["name"],
    )


def runbook_ref(target: str) -> EntityRef:
    """Runbooks are named by their URL (or title): a URL is not an entity reference, so it is not parsed as one."""
    return EntityRef("runbook", DEFAULT_NAMESPACE, target.strip())


# ---------------------------------------------------------------------------------------------------- catalog entries


@dataclass(frozen=True, slots=True)
class Fact:
    relation: str  # key of RELATIONS
    source: EntityRef
    target: EntityRef
    note: str = ""  # shown after the sentence, e.g. a runbook link's title

    @property
    def spec(self) -> RelationSpec:
        return RELATIONS[self.relation]

    def sentence(self) -> str:
        text = self.spec.sentence.format(s=self.source.display, o=self.target.display)
        return f"{text[:-1]} ({self.note})." if self.note else text


@dataclass
class CatalogEntry:
    """One catalog entity as read from its entry (or, with ``origin`` "referenced", from the references to it)."""

    ref: EntityRef
    origin: str  # "backstage" | "service-catalog" | "referenced"
    path: str  # the file, relative to the source path ("" for referenced-only entities)
    summary: str  # the first sentence: what the entity is
    description: str = ""
    facts: list[Fact] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # further sentences (tags, links, references)
    metadata: dict[str, Any] = field(default_factory=dict)
    # What else names it: its title and declared aliases (text and questions use them: "Checkout Service").
    declared_names: tuple[str, ...] = ()
    title: str = ""  # the catalog's display name of it, when it gives one (a graph property users match on)

    def other_names(self) -> list[str]:
        """Every name of the entity but its node name: declared names, the plain name in another namespace and the
        full reference, in that order (which one wins a clash between entities is decided on resolution)."""
        names = [*self.declared_names, self.ref.name, f"{self.ref.kind}:{self.ref.display}", self.ref.ref]
        return [name for name in dict.fromkeys(n.strip() for n in names) if name and name != self.ref.display]

    def text(self) -> str:
        first = self.summary + (f"\n{self.description}" if self.description else "")
        paragraphs = [first, "\n".join(fact.sentence() for fact in self.facts), "\n".join(self.details)]
        return "\n\n".join(p for p in paragraphs if p)

    def record(self) -> dict[str, Any]:
        """The exact extraction: entities, [subject, predicate, object] triples, and their ontology types."""
        subject = self.ref.display
        types = {subject: self.ref.entity_type}
        descriptions = {subject: self.summary}
        triples, relation_types, weights, sentences = [], [], [], []
        for fact in self.facts:
            for end in (fact.source, fact.target):
                types.setdefault(end.display, end.entity_type)
                descriptions.setdefault(end.display, fact.sentence())
            triples.append([fact.source.display, fact.spec.predicate, fact.target.display])
            relation_types.append(fact.spec.type)
            weights.append(fact.spec.weight)
            sentences.append(fact.sentence())
        return {
            "entities": list(types),
            "triples": triples,
            RECORD_KEY: {
                "version": RECORD_VERSION,
                "names": {subject: self.other_names()},
                "titles": {subject: self.title} if self.title else {},
                "types": types,
                "descriptions": descriptions,
                "relation_types": relation_types,
                "weights": weights,
                "sentences": sentences,
            },
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """An entry that could not be read: ``ref`` when its name could still be read (its doc id is then the item id)."""

    path: str
    location: str  # where in the file: the YAML document's number, or "services[3]"
    reason: str
    ref: EntityRef | None = None
    raw: str = ""


@dataclass
class ParsedFile:
    entries: list[CatalogEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skipped: int = 0  # YAML documents that are no catalog (in a folder: Kubernetes manifests, compose files, …)


def parse_catalog_text(text: str, path: str = "", *, strict: bool = True) -> ParsedFile:
    """Every catalog entity in one file's text. ``strict``: a YAML document that is no catalog is a problem (the
    source names this file) rather than skipped (a folder may hold other YAML)."""
    parsed = ParsedFile()
    pieces = _yaml_documents(text)
    for position, (piece, line) in enumerate(pieces, start=1):
        where = f"{path or 'catalog'} document {position} (line {line})" if len(pieces) > 1 else (path or "catalog")
        failure: yaml.YAMLError | None = None
        try:
            data = load_untrusted_yaml(piece)
        except yaml.YAMLError as error:
            # A compose file's anchors, say: read again only to tell that it is no catalog, never kept. A catalog
            # entry with an alias is refused like any other broken one.
            data = _read_for_kind(piece) if isinstance(error, YamlAliasError) else None
            failure = None if data is not None and not _is_catalog(data) else error
        if failure is not None:
            reason = f"{where}: invalid YAML: {_one_line(failure)}"
            refs = _names_in_broken_yaml(piece)
            if not refs:
                parsed.problems.append(Problem(path, str(position), reason, None, piece[:RAW_EXCERPT]))
            for ref in refs:
                kept = f"{reason}; the last indexed version of {ref.ref} is kept"
                parsed.problems.append(Problem(path, str(position), kept, ref, piece[:RAW_EXCERPT]))
            continue
        if data is None:
            continue
        if isinstance(data, Mapping) and _is_backstage(data):
            _parse_backstage(data, path, position, where, piece, parsed)
        elif isinstance(data, Mapping) and isinstance(data.get("services"), list):
            _parse_service_catalog(data, path, position, where, parsed)
        elif strict:
            reason = f"{where}: not a catalog (expected a top-level services: list or a backstage.io entity)"
            if isinstance(data, Mapping) and isinstance(data.get("services"), Mapping):
                reason += "; services: is a mapping here, as in a docker compose file"
            parsed.problems.append(Problem(path, str(position), reason, None, piece[:RAW_EXCERPT]))
        else:
            parsed.skipped += 1
    return parsed


_DOCUMENT_MARKER = re.compile(r"^---(?=[ \t]|$)", re.MULTILINE)


def _yaml_documents(text: str) -> list[tuple[str, int]]:
    """(document text, first line number) per ``---`` separated YAML document, each parsed on its own so that a
    syntax error costs one entity, not the rest of the file."""
    starts = [0] + [m.start() for m in _DOCUMENT_MARKER.finditer(text) if m.start() > 0]
    pieces = []
    for start, end in zip(starts, [*starts[1:], len(text)]):
        piece = text[start:end]
        if piece.strip():
            pieces.append((piece, text.count("\n", 0, start) + 1))
    return pieces


def _read_for_kind(piece: str) -> Any:
    try:
        return yaml.safe_load(piece)
    except yaml.YAMLError:
        return None


def _is_catalog(data: Any) -> bool:
    """A Backstage entity or a service catalog (parsing a document with aliases to find out shares their nodes, so it
    costs no more than its text; it is serializing them that explodes)."""
    return isinstance(data, Mapping) and (_is_backstage(data) or isinstance(data.get("services"), list))


def _is_backstage(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("apiVersion"), str) and data["apiVersion"].startswith(BACKSTAGE_API_PREFIX)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _raw(value: Any) -> str:
    return json.dumps(json_safe(value), ensure_ascii=False, sort_keys=True)[:RAW_EXCERPT]


# Names still readable in a document that is not valid YAML: enough to keep the entity's last good version.
_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*):")
_LIST_NAME = re.compile(r"^\s*-\s*name:\s*[\"']?([^\s\"'#]+)")
_INDENTED = re.compile(r"^\s+(name|namespace):\s*[\"']?([^\s\"'#]+)")


def _names_in_broken_yaml(piece: str) -> list[EntityRef]:
    lines = piece.split("\n")
    kind = next((m.group(1) for line in lines if (m := re.match(r"^kind:\s*[\"']?(\w+)", line))), None)
    if kind is not None:  # a Backstage document: its metadata name and namespace
        found = dict(reversed([(m.group(1), m.group(2)) for line in lines if (m := _INDENTED.match(line))]))
        if "name" not in found or not _NAME.fullmatch(found["name"]):
            return []
        return [EntityRef(kind.lower(), found.get("namespace", DEFAULT_NAMESPACE).lower(), found["name"])]
    refs, section = [], None
    for line in lines:
        if top := _TOP_KEY.match(line):
            section = top.group(1)
        elif (item := _LIST_NAME.match(line)) and section in ("services", "teams"):
            refs.append(EntityRef("service" if section == "services" else "team", DEFAULT_NAMESPACE, item.group(1)))
    return refs


# ---------------------------------------------------------------------------------------------------- service catalog


def _parse_service_catalog(data: Mapping[str, Any], path: str, position: int, where: str, parsed: ParsedFile) -> None:
    for section, kind, parse in (("services", "service", _service_entry), ("teams", "team", _team_entry)):
        items = data.get(section) or []
        if not isinstance(items, list):
            parsed.problems.append(Problem(path, section, f"{where}: {section}: must be a list", None, _raw(items)))
            continue
        for index, item in enumerate(items, start=1):
            ref = None
            if isinstance(item, Mapping) and isinstance(item.get("name"), str) and _NAME.fullmatch(item["name"]):
                ref = EntityRef(kind, DEFAULT_NAMESPACE, item["name"])
            try:
                if ref is None:
                    raise CatalogError("needs a name: a non-empty string without spaces, ':' or '/'")
                parsed.entries.append(parse(item, ref, path))
            except CatalogError as error:
                reason = f"{where}: {section}[{index}]" + (f" ({ref.name})" if ref else "") + f": {error}"
                location = f"{section}[{index}]" if position == 1 else f"{position}:{section}[{index}]"
                parsed.problems.append(Problem(path, location, reason, ref, _raw(item)))


def _service_entry(item: Mapping[str, Any], ref: EntityRef, path: str) -> CatalogEntry:
    tier = item.get("tier")
    if tier is not None and (isinstance(tier, bool) or not isinstance(tier, (str, int))):
        raise CatalogError(f"tier must be a string or a number, got {tier!r}")
    description = _optional_text(item, "description")
    owners = _ref_list(item, "owners", allow_single=True) + _ref_list(item, "owner", allow_single=True)
    facts = [Fact("owned_by", ref, parse_entity_ref(o, default_kind="team")) for o in owners]
    facts += [Fact("depends_on", ref, parse_entity_ref(d, default_kind="service"))
              for d in _ref_list(item, "depends_on", allow_single=True)]
    runbooks = [item["runbooks"]] if isinstance(item.get("runbooks"), str) else _list(item, "runbooks")
    facts += [_runbook_fact(ref, runbook) for runbook in runbooks]
    title = _optional_text(item, "title")
    summary = f"{ref.name} is a service in the service catalog" + (f", tier {tier}" if tier is not None else "")
    summary += f", titled {title}." if title else "."
    metadata = {"tier": tier} if tier is not None else {}
    extra = {str(k): v for k, v in item.items() if k not in _SERVICE_KEYS}
    if extra:
        metadata["fields"] = json_safe(extra)
    return CatalogEntry(ref, "service-catalog", path, summary, description, _unique_facts(facts), [], metadata,
                        declared_names=_declared_names(item), title=title)


_SERVICE_KEYS = frozenset({"name", "title", "aliases", "tier", "description", "owners", "owner", "depends_on",
                           "runbooks"})


def _team_entry(item: Mapping[str, Any], ref: EntityRef, path: str) -> CatalogEntry:
    description = _optional_text(item, "description")
    contacts = _contacts(item)
    return CatalogEntry(ref, "service-catalog", path, f"{ref.name} is a team in the service catalog.", description,
                        details=[_contact_sentence(contacts)] if contacts else [],
                        metadata={CONTACTS_KEY: contacts} if contacts else {}, declared_names=_declared_names(item),
                        title=_optional_text(item, "title"))


# Fields and annotations that tell how to reach an owner: a profile's email, a chat channel, an on-call rotation
# ("profile.email", "slack", "oncall", "pagerduty.com/service-id", "opsgenie.com/team"). Keys that name a credential
# are never read: an integration key in an annotation must not reach an index.
_CONTACT_FIELD = re.compile(r"email|mail|slack|chat|channel|teams|on-?_?call|pager|opsgenie|phone|contact",
                            re.IGNORECASE)
_CREDENTIAL_FIELD = re.compile(r"key|token|secret|password|credential", re.IGNORECASE)


def _contacts(fields: Mapping[str, Any]) -> dict[str, str]:
    """The contact details among an entry's fields: plain strings only, credentials never."""
    return {str(key): " ".join(value.split()) for key, value in sorted(fields.items(), key=lambda kv: str(kv[0]))
            if isinstance(value, str) and value.strip() and _CONTACT_FIELD.search(str(key))
            and not _CREDENTIAL_FIELD.search(str(key))}


def _contact_sentence(contacts: Mapping[str, str]) -> str:
    return "Contacts: " + "; ".join(f"{key} {value}" for key, value in contacts.items()) + "."


def _runbook_fact(subject: EntityRef, runbook: Any) -> Fact:
    if isinstance(runbook, str) and runbook.strip():
        return Fact("has_runbook", subject, runbook_ref(runbook))
    if isinstance(runbook, Mapping):
        url, title = runbook.get("url"), runbook.get("title")
        for key, value in (("url", url), ("title", title)):
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise CatalogError(f"runbook {key} must be a non-empty string, got {value!r}")
        if url or title:
            return Fact("has_runbook", subject, runbook_ref(url or title), note=title.strip() if url and title else "")
    raise CatalogError(f"a runbook must be a URL, a title or a mapping with url and/or title, got {runbook!r}")


# ---------------------------------------------------------------------------------------------------------- backstage


def _parse_backstage(
    data: Mapping[str, Any], path: str, position: int, where: str, piece: str, parsed: ParsedFile
) -> None:
    kind = data.get("kind")
    metadata = data.get("metadata")
    ref = None
    if isinstance(kind, str) and isinstance(metadata, Mapping) and isinstance(metadata.get("name"), str):
        namespace = metadata.get("namespace", DEFAULT_NAMESPACE)
        if isinstance(namespace, str) and _NAME.fullmatch(namespace) and _NAME.fullmatch(metadata["name"]):
            ref = EntityRef(kind.lower(), namespace.lower(), metadata["name"])
    try:
        if not isinstance(kind, str) or not kind.strip():
            raise CatalogError("kind must be a non-empty string")
        if kind.lower() in SKIPPED_KINDS:
            parsed.skipped += 1
            return
        if kind.lower() not in BACKSTAGE_KINDS:
            raise CatalogError(f"unsupported kind {kind!r} (supported: {', '.join(sorted(BACKSTAGE_KINDS))})")
        if not isinstance(metadata, Mapping):
            raise CatalogError("metadata must be a mapping")
        if ref is None:
            raise CatalogError("metadata.name (and metadata.namespace, if set) must be strings without spaces, "
                               "':' or '/'")
        parsed.entries.append(_backstage_entry(data, ref, path))
    except CatalogError as error:
        label = f" ({ref.ref})" if ref else ""
        parsed.problems.append(Problem(path, str(position), f"{where}{label}: {error}", ref, piece[:RAW_EXCERPT]))


# field -> (relation, default kind of its references, reversed: the referenced entity is the edge's source)
_SPEC_REFS: dict[str, tuple[str, str, bool]] = {
    "owner": ("owned_by", "group", False),
    "system": ("part_of_system", "system", False),
    "domain": ("part_of_domain", "domain", False),
    "subcomponentOf": ("subcomponent_of", "component", False),
    "dependsOn": ("depends_on", "component", False),
    "dependencyOf": ("depends_on", "component", True),
    "providesApis": ("provides_api", "api", False),
    "consumesApis": ("consumes_api", "api", False),
    "parent": ("sub_team_of", "group", False),
    "children": ("sub_team_of", "group", True),
    "members": ("member_of", "user", True),
    "memberOf": ("member_of", "group", False),
}
_SINGLE_REF_FIELDS = frozenset({"owner", "system", "domain", "subcomponentOf", "parent"})
_RUNBOOK_WORDS = re.compile(r"runbook|playbook", re.IGNORECASE)


def _backstage_entry(data: Mapping[str, Any], ref: EntityRef, path: str) -> CatalogEntry:
    metadata = data["metadata"]
    spec = data.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise CatalogError("spec must be a mapping")
    facts: list[Fact] = []
    for key, (relation, default_kind, reverse) in _SPEC_REFS.items():
        if key not in spec:
            continue
        values = [spec[key]] if key in _SINGLE_REF_FIELDS else _ref_list(spec, key, allow_single=True,
                                                                          label=f"spec.{key}")
        for value in values:
            if key in _SINGLE_REF_FIELDS and not isinstance(value, str):
                raise CatalogError(f"spec.{key} must be one entity reference (a string), got {value!r}")
            try:
                other = parse_entity_ref(value, default_kind=default_kind, default_namespace=ref.namespace)
            except CatalogError as error:
                raise CatalogError(f"spec.{key}: {error}") from None
            facts.append(Fact(relation, other, ref) if reverse else Fact(relation, ref, other))
    details = []
    for index, link in enumerate(_list(metadata, "links"), start=1):
        if not isinstance(link, Mapping) or not isinstance(link.get("url"), str) or not link["url"].strip():
            raise CatalogError(f"metadata.links[{index}] must be a mapping with a url")
        title = link.get("title") if isinstance(link.get("title"), str) else ""
        words = " ".join(str(link.get(k) or "") for k in ("title", "type", "icon"))
        if _RUNBOOK_WORDS.search(words):
            facts.append(Fact("has_runbook", ref, runbook_ref(link["url"]), note=title.strip()))
        else:
            details.append(f"Link: {title.strip() + ' ' if title.strip() else ''}{link['url'].strip()}.")
    tags = _list(metadata, "tags")
    if not all(isinstance(tag, str) for tag in tags):
        raise CatalogError("metadata.tags must be a list of strings")
    if tags:
        details.insert(0, f"Tags: {', '.join(tags)}.")
    description = _optional_text(metadata, "description")
    title = _optional_text(metadata, "title")
    attributes = [f"{key} {spec[key]}" for key in ("type", "lifecycle", "profile")
                  if isinstance(spec.get(key), (str, int)) and not isinstance(spec.get(key), bool)]
    if ref.namespace != DEFAULT_NAMESPACE:
        attributes.append(f"namespace {ref.namespace}")
    summary = f"{ref.display} is a Backstage {data['kind']}" + (f" ({', '.join(attributes)})" if attributes else "")
    summary += f", titled {title}." if title else "."
    entry_metadata: dict[str, Any] = {"backstage_kind": data["kind"]}
    for key in ("type", "lifecycle"):
        if isinstance(spec.get(key), str):
            entry_metadata[key] = spec[key]
    if tags:
        entry_metadata["tags"] = list(tags)
    if isinstance(spec.get("system"), str):  # which system a fact about it belongs to (query.context shows it)
        entry_metadata["system"] = parse_entity_ref(spec["system"], default_kind="system",
                                                    default_namespace=ref.namespace).display
    profile = spec.get("profile") if isinstance(spec.get("profile"), Mapping) else {}
    annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), Mapping) else {}
    contacts = _contacts({**{f"profile.{k}": v for k, v in profile.items()}, **annotations})
    if contacts:
        entry_metadata[CONTACTS_KEY] = contacts
        details.append(_contact_sentence(contacts))
    return CatalogEntry(ref, "backstage", path, summary, description, _unique_facts(facts), details, entry_metadata,
                        declared_names=_declared_names(metadata), title=title)


def _declared_names(item: Mapping[str, Any]) -> tuple[str, ...]:
    """``title`` and ``aliases`` (a Backstage entity's ``metadata``, a service-catalog entry): other names of it."""
    aliases = _list(item, "aliases")
    if not all(isinstance(alias, str) and alias.strip() for alias in aliases):
        raise CatalogError("aliases must be a list of names (non-empty strings)")
    return tuple(name.strip() for name in (_optional_text(item, "title"), *aliases) if name.strip())


# ------------------------------------------------------------------------------------------------------------ helpers


def _list(item: Mapping[str, Any], key: str) -> list[Any]:
    value = item.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise CatalogError(f"{key} must be a list, got {type(value).__name__}")
    return value


def _ref_list(item: Mapping[str, Any], key: str, *, allow_single: bool, label: str = "") -> list[str]:
    value = item.get(key)
    if value is None:
        return []
    if allow_single and isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise CatalogError(f"{label or key} must be a list of entity names or references (strings), got {value!r}")
    return value


def _optional_text(item: Mapping[str, Any], key: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CatalogError(f"{key} must be a string, got {type(value).__name__}")
    return " ".join(value.split())


def _unique_facts(facts: Iterable[Fact]) -> list[Fact]:
    """Distinct facts in a canonical order (relation, then target), so reordering a list changes nothing; an entity
    related to itself is no fact."""
    order = {name: index for index, name in enumerate(RELATIONS)}
    unique: dict[tuple[str, str, str], Fact] = {}
    for fact in facts:
        source, target = normalize_name(fact.source.display), normalize_name(fact.target.display)
        if source != target:
            unique.setdefault((fact.relation, source, target), fact)
    return sorted(unique.values(), key=lambda f: (order[f.relation], normalize_name(f.source.display),
                                                 normalize_name(f.target.display)))


# ------------------------------------------------------------------------------------------------------------ reading


class CatalogReader:
    """Service-catalog and Backstage entities, one document each, with their exact typed facts."""

    default_poll_seconds = 60  # a scan reads a few YAML files

    def scan(self, source: CatalogSource) -> dict[str, str]:
        return scan_catalog_hashes(source)

    def read(self, source: CatalogSource, context: ReadContext | None) -> SourceScan:
        return read_catalog(source)


def read_catalog(source: CatalogSource) -> SourceScan:
    """Documents, quarantined entries, content hashes and exact extraction records of a catalog source."""
    root, listing = _catalog_files(source)
    entries: dict[str, CatalogEntry] = {}
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    broken: set[str] = set()  # node names of entries that could not be read this time
    strict = root.is_file()
    for refused in listing.refused:
        # Entries of a file that may not be read are not kept either: they vanish, and so does what they indexed.
        item = f"{source.name}:{relative_posix(refused.path, root)}"
        hashes[item] = refused.marker
        quarantined.append(Quarantined(STAGE, item, refused.reason))
    for file in listing.files:
        path = file.path
        relative = path.name if strict else relative_posix(path, root)
        file_item = f"{source.name}:{relative}"
        try:
            content = read_file(file, source.max_document_bytes)
        except OSError as error:
            hashes[file_item] = unreadable_marker(error)
            quarantined.append(Quarantined(STAGE, file_item, f"cannot read {path}: {error}"))
            continue
        if content.data is None:
            hashes[file_item] = content.digest
            quarantined.append(Quarantined(STAGE, file_item, f"over max_document_bytes: {content.size} bytes, more "
                                           f"than the source's limit ({source.max_document_bytes}); not read"))
            continue
        data = content.data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            reason = f"{relative}: not valid UTF-8 ({error.reason} at byte {error.start}); convert the file to UTF-8"
            # Names with an undecodable byte are not the names the last good version had.
            refs = [r for r in _names_in_broken_yaml(data.decode("utf-8", errors="replace")) if "\ufffd" not in r.name]
            for ref in refs or [None]:
                if ref is not None:
                    broken.add(normalize_name(ref.display))
                item = _doc_id(source, ref) if ref else file_item
                hashes[item] = content_hash(data.decode("utf-8", errors="replace"))
                quarantined.append(Quarantined(STAGE, item, reason))
            continue
        text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        parsed = parse_catalog_text(text, relative, strict=strict)
        for problem in parsed.problems:
            if problem.ref is not None:
                broken.add(normalize_name(problem.ref.display))
            item = _doc_id(source, problem.ref) if problem.ref else f"{file_item}#{problem.location}"
            hashes[item] = content_hash(problem.reason, problem.raw)
            quarantined.append(Quarantined(STAGE, item, problem.reason, problem.raw))
        for entry in parsed.entries:
            first = entries.get(entry.ref.identity)
            if first is not None:
                item = f"{_doc_id(source, entry.ref)}@{relative}"
                reason = f"{relative}: {entry.ref.ref} is defined twice; the definition in {first.path} is used"
                hashes[item] = content_hash(reason, entry.text())
                quarantined.append(Quarantined(STAGE, item, reason, entry.text()[:RAW_EXCERPT]))
                continue
            entries[entry.ref.identity] = entry
    for entry in _referenced_entries(entries.values()):
        if normalize_name(entry.ref.display) not in broken:  # a broken definition keeps its last good version
            entries.setdefault(entry.ref.identity, entry)
    _list_ownership(entries.values())

    documents: list[Document] = []
    extractions: dict[str, dict[str, Any]] = {}
    base_uri = root.resolve().as_uri()
    for entry in sorted(entries.values(), key=lambda e: e.ref.identity):
        doc_id = _doc_id(source, entry.ref)
        file_uri = (root / entry.path).resolve().as_uri() if entry.path and not strict else base_uri
        metadata = {
            **({"access_groups": list(source.access_groups)} if source.access_groups else {}),
            "catalog": True,
            "catalog_origin": entry.origin,
            "kind": entry.ref.kind,
            "namespace": entry.ref.namespace,
            "name": entry.ref.name,
            "entity_ref": entry.ref.ref,
            "entity_type": entry.ref.entity_type,
            **({"path": entry.path} if entry.path else {}),
            **entry.metadata,
        }
        record = entry.record()
        text = entry.text()
        title = entry.ref.display
        documents.append(
            Document(
                doc_id=doc_id,
                source=source.name,
                uri=f"{file_uri}#{entry.ref.ref}",
                title=title,
                text=text,
                content_hash=content_hash(title, text, json.dumps(record, sort_keys=True),
                                          json.dumps(metadata, sort_keys=True)),
                metadata=metadata,
            )
        )
        extractions[doc_id] = record
        hashes[doc_id] = documents[-1].content_hash
    return SourceScan(documents=tuple(documents), quarantined=tuple(quarantined), hashes=hashes,
                      extractions=extractions)


def scan_catalog_hashes(source: CatalogSource) -> dict[str, str]:
    """doc_id -> content hash, equal to ``read_catalog(source).hashes`` (parsing YAML is cheap next to indexing)."""
    return read_catalog(source).hashes


def _doc_id(source: CatalogSource, ref: EntityRef) -> str:
    return f"{source.name}:{ref.kind}:{ref.namespace}/{ref.name}"


def _catalog_files(source: CatalogSource) -> tuple[Path, FolderListing]:
    """The configured file (named by the user, so read even through a link), or the catalog files inside the
    configured folder (links out of it refused: ``lib.sources.paths``)."""
    root = Path(source.path)
    if root.is_file():
        return root, FolderListing((SourceFile(root, root.resolve()),), ())
    if not root.is_dir():
        raise FileNotFoundError(f"source {source.name!r}: catalog {root} does not exist")
    listing = list_folder(root, lambda name: has_suffix(name, CATALOG_SUFFIXES),
                          follow_symlinks=source.follow_symlinks)
    return root, listing


def _referenced_entries(entries: Iterable[CatalogEntry]) -> list[CatalogEntry]:
    """A page for every entity the catalog refers to without defining it (runbooks excepted: they are links); the
    first reference seen decides its kind."""
    entries = list(entries)
    # By node name: a team named as an owner in a service catalog is defined by a Backstage Group of that name.
    defined = {normalize_name(entry.ref.display) for entry in entries}
    references: dict[str, tuple[EntityRef, list[Fact]]] = {}
    for entry in entries:
        for fact in entry.facts:
            for end in (fact.source, fact.target):
                key = normalize_name(end.display)
                if key not in defined and end.kind != "runbook":
                    references.setdefault(key, (end, []))[1].append(fact)
    pages = []
    for key, (ref, facts) in references.items():
        word = _KIND_WORDS.get(ref.kind, ref.kind)
        article = "an" if word[:1].lower() in "aeiou" else "a"
        summary = f"{ref.display} is {article} {word} referenced in the catalog but not defined in it."
        # What it owns is listed by _list_ownership, as on the pages of defined owners.
        details = sorted({fact.sentence() for fact in facts
                          if not (fact.relation == "owned_by" and normalize_name(fact.target.display) == key)})
        pages.append(CatalogEntry(ref, REFERENCED_ORIGIN, "", summary, details=details))
    return pages


def _list_ownership(entries: Iterable[CatalogEntry]) -> None:
    """An owner's page lists what it owns (Backstage shows the same reverse relation on a group's page): a team's
    own entry says little else, and "what does team-x own" is then one passage. Text only: the edges stay in the
    owned entities' records, so the owner's page changes when its list does, and nothing else does."""
    entries = list(entries)
    owned: dict[str, set[str]] = {}
    for entry in entries:
        for fact in entry.facts:
            if fact.relation == "owned_by":
                owned.setdefault(normalize_name(fact.target.display), set()).add(fact.source.display)
    for entry in entries:
        names = owned.get(normalize_name(entry.ref.display))
        if names:
            owner = entry.ref.display
            entry.details = [*entry.details, *(f"{owner} owns {name}." for name in sorted(names, key=normalize_name))]


# --------------------------------------------------------------------------------------------------------- extraction


def is_catalog_record(record: Any) -> bool:
    return isinstance(record, Mapping) and isinstance(record.get(RECORD_KEY), Mapping)


def catalog_extractions(
    chunks: Sequence[Chunk], records: Mapping[str, Any], ontology: Ontology
) -> tuple[list[ChunkExtraction], list[Quarantined]]:
    """One extraction per chunk (same order) with exactly the catalog's entities and relations, typed by the record:
    the entity a document is about in each of its chunks, each fact in the chunk holding its sentence (or the first
    chunk), with both ends."""
    by_doc: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_doc.setdefault(chunk.doc_id, []).append(chunk)
    found: dict[str, tuple[dict[str, EntityMention], list[RelationMention]]] = {c.chunk_id: ({}, []) for c in chunks}
    quarantined: list[Quarantined] = []
    for doc_id, doc_chunks in by_doc.items():
        doc_chunks.sort(key=lambda c: c.position)
        try:
            record = _checked_record(records.get(doc_id))
        except ValueError as error:
            raw = json.dumps(records.get(doc_id), ensure_ascii=False, default=str)[:RAW_EXCERPT]
            quarantined.append(Quarantined("extraction", doc_id, f"catalog record unusable: {error}", raw))
            continue
        typed = record[RECORD_KEY]
        loose_texts = [_loose(chunk.text) for chunk in doc_chunks]

        def attach(name: str, index: int) -> None:
            chunk_id = doc_chunks[index].chunk_id
            entities = found[chunk_id][0]
            key = normalize_name(name)
            if key not in entities:
                entities[key] = EntityMention(
                    name=name,
                    type=ontology.entity_type(typed["types"].get(name, ontology.default_entity_type)),
                    description=typed["descriptions"].get(name, ""),
                    chunk_id=chunk_id,
                    spotter=SPOTTER,
                )

        subject = record["entities"][0]
        for index in range(len(doc_chunks)):
            attach(subject, index)
        for position, (source, predicate, target) in enumerate(record["triples"]):
            sentence = typed["sentences"][position]
            index = next((i for i, text in enumerate(loose_texts) if _loose(sentence) in text), 0)
            attach(source, index)
            attach(target, index)
            found[doc_chunks[index].chunk_id][1].append(
                RelationMention(
                    source=source,
                    target=target,
                    type=ontology.relationship_type(typed["relation_types"][position]),
                    predicate=predicate,
                    description=sentence,
                    weight=float(typed["weights"][position]),
                    chunk_id=doc_chunks[index].chunk_id,
                )
            )
        for name in record["entities"]:
            if not any(normalize_name(name) in found[c.chunk_id][0] for c in doc_chunks):
                attach(name, next((i for i, text in enumerate(loose_texts) if _loose(name) in text), 0))
    extractions = [
        ChunkExtraction(chunk.chunk_id, tuple(found[chunk.chunk_id][0].values()), tuple(found[chunk.chunk_id][1]))
        for chunk in chunks
    ]
    return extractions, quarantined


def catalog_names(records: Iterable[Any]) -> dict[str, list[str]]:
    """Node name → the entity's other names (title, declared aliases, full reference), from catalog records."""
    names: dict[str, list[str]] = {}
    for record in records:
        if is_catalog_record(record):
            for subject, others in (record[RECORD_KEY].get("names") or {}).items():
                names.setdefault(subject, []).extend(o for o in others if isinstance(o, str))
    return names


def catalog_titles(records: Iterable[Any]) -> dict[str, str]:
    """Node name → the catalog's title of the entity, for the entities that have one (records written before titles
    were kept have none: they are re-read with the document)."""
    titles: dict[str, str] = {}
    for record in records:
        if is_catalog_record(record):
            titles.update((subject, title) for subject, title in (record[RECORD_KEY].get("titles") or {}).items()
                          if isinstance(title, str) and title)
    return titles


def catalog_typed_names(records: Iterable[Any]) -> dict[str, str]:
    """Every name of every catalog entity (node name and other names) → the entity's ontology type."""
    typed: dict[str, str] = {}
    for record in records:
        if is_catalog_record(record):
            catalog = record[RECORD_KEY]
            for subject, entity_type in catalog["types"].items():
                for name in (subject, *(catalog.get("names") or {}).get(subject, ())):
                    typed.setdefault(name, entity_type)
    return typed


def extract_with_catalogs(
    chunks: Sequence[Chunk],
    records: Mapping[str, Any],
    ontology: Ontology,
    extract_others: Callable[[Sequence[Chunk]], tuple[list[ChunkExtraction], list[Quarantined]]],
) -> tuple[list[ChunkExtraction], list[Quarantined]]:
    """Chunks of catalog documents (their source record carries the typed catalog part) get the catalog's exact
    extraction; every other chunk goes to ``extract_others`` (the configured extractor). Results in input order."""
    catalog_docs = {doc_id for doc_id, record in records.items() if is_catalog_record(record)}
    if not catalog_docs:
        return extract_others(chunks)
    from_catalog = [c for c in chunks if c.doc_id in catalog_docs]
    others = [c for c in chunks if c.doc_id not in catalog_docs]
    extracted, quarantined = catalog_extractions(from_catalog, records, ontology)
    by_chunk = {e.chunk_id: e for e in extracted}
    if others:
        other_results, other_quarantined = extract_others(others)
        by_chunk.update((e.chunk_id, e) for e in other_results)
        quarantined = [*quarantined, *other_quarantined]
    return [by_chunk[c.chunk_id] for c in chunks if c.chunk_id in by_chunk], quarantined  # quarantined: none


def _checked_record(record: Any) -> dict[str, Any]:
    if not is_catalog_record(record):
        raise ValueError("no catalog record for this document")
    entities, triples, typed = record.get("entities"), record.get("triples"), record[RECORD_KEY]
    if not isinstance(entities, list) or not entities or not all(isinstance(e, str) and e.strip() for e in entities):
        raise ValueError("entities must be a non-empty list of names")
    if not isinstance(triples, list) or not all(
        isinstance(t, list) and len(t) == 3 and all(isinstance(p, str) and p.strip() for p in t) for t in triples
    ):
        raise ValueError("triples must be [subject, predicate, object] lists of strings")
    if typed.get("version") != RECORD_VERSION:
        raise ValueError(f"record version {typed.get('version')!r}, expected {RECORD_VERSION}")
    for key, kind in (("names", dict), ("types", dict), ("descriptions", dict), ("relation_types", list),
                      ("weights", list), ("sentences", list)):
        if not isinstance(typed.get(key), kind):
            raise ValueError(f"{RECORD_KEY}.{key} must be a {kind.__name__}")
    if not len(typed["relation_types"]) == len(typed["weights"]) == len(typed["sentences"]) == len(triples):
        raise ValueError("one relation type, weight and sentence per triple")
    return record


def _loose(text: str) -> str:
    return re.sub(r"\s*-\s*", "-", " ".join(text.split())).casefold()
