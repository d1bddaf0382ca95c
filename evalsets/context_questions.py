"""Add incident-context questions to an eval set, from its catalog alone: ``python evalsets/context_questions.py
evalsets/<set>``. Deterministic; rerunning replaces the questions it wrote before (ids ``context-*``).

Rule: for every catalog entity that at least one entity depends on, one question of type ``incident_context``:
"Alert on {X}: which services depend on it, who owns them, and which runbooks apply?" (X: the catalog name).
- ``gold_entities``: its dependents within two hops (the blast radius ``context()`` reports by default).
- ``gold_facts``: every ``dependsOn`` edge from a dependent within two hops to X or to a dependent one hop away; the
  ``owner`` of X and of each of those dependents (when the catalog has owners); their runbook links (``metadata.links``
  whose title or type says runbook, as ``[entity, "HAS_RUNBOOK", url]``, when the catalog has them).
- ``gold_ids``: empty; these questions are scored on facts (``graphrag-pipeline eval`` reports them under ``facts``).

When the catalog has owners, also one question of type ``chained_owners`` per such entity: "Which services depend on
{X}, and who owns them?", ``gold_facts`` = its direct dependents' ``dependsOn`` edges to X and their ``owner``s (the
two steps a chained question follows through ``query``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

QUESTION = "Alert on {x}: which services depend on it, who owns them, and which runbooks apply?"
CHAINED = "Which services depend on {x}, and who owns them?"


def entity_name(ref: str, namespace: str = "default") -> str:
    """A Backstage reference's node name: the plain name in the default namespace, else namespace/name (a missing
    namespace is the referring entity's)."""
    path = ref.split(":", 1)[-1]
    namespace, name = path.split("/", 1) if "/" in path else (namespace, path)
    return name if namespace.lower() == "default" else f"{namespace.lower()}/{name}"


def main(set_dir: str) -> None:
    root = Path(set_dir)
    entities = [d for f in sorted((root / "catalog").glob("*.y*ml"))
                for d in yaml.safe_load_all(f.read_text(encoding="utf-8")) if isinstance(d, dict)]
    depends: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    runbooks: dict[str, list[str]] = {}
    for entity in entities:
        if entity.get("kind") not in ("Component", "Resource"):
            continue
        namespace = entity["metadata"].get("namespace", "default")
        name, spec = entity_name(entity["metadata"]["name"], namespace), entity.get("spec") or {}
        for target in spec.get("dependsOn") or []:
            depends.setdefault(name, set()).add(entity_name(target, namespace))
        if spec.get("owner"):
            owner[name] = entity_name(spec["owner"], namespace)
        runbooks[name] = [link["url"] for link in entity["metadata"].get("links") or []
                          if re.search("runbook|playbook", f"{link.get('title', '')} {link.get('type', '')}", re.I)]
    dependents_of: dict[str, set[str]] = {}
    for source, targets in depends.items():
        for target in targets:
            dependents_of.setdefault(target, set()).add(source)
    questions = [json.loads(line) for line in (root / "questions.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip() and not json.loads(line)["id"].startswith("context-")]
    for subject in sorted(dependents_of):
        hop1 = dependents_of[subject] - {subject}
        hop2 = {d for n in hop1 for d in dependents_of.get(n, ())} - hop1 - {subject}
        facts = {(d, "DEPENDS_ON", n) for n in {subject, *hop1} for d in dependents_of.get(n, ()) if d in hop1 | hop2}
        for name in {subject, *hop1, *hop2}:
            if name in owner:
                facts.add((name, "OWNED_BY", owner[name]))
            facts.update((name, "HAS_RUNBOOK", url) for url in runbooks.get(name, ()))
        questions.append({"id": f"context-{subject}", "question": QUESTION.format(x=subject), "answer": None,
                          "gold_ids": [], "gold_facts": [list(f) for f in sorted(facts)],
                          "gold_entities": sorted(hop1 | hop2), "type": "incident_context"})
    for subject in sorted(dependents_of) if owner else ():
        direct = dependents_of[subject] - {subject}
        facts = {(d, "DEPENDS_ON", subject) for d in direct} | {(d, "OWNED_BY", owner[d]) for d in direct if d in owner}
        questions.append({"id": f"context-chained-{subject}", "question": CHAINED.format(x=subject), "answer": None,
                          "gold_ids": [], "gold_facts": [list(f) for f in sorted(facts)],
                          "gold_entities": sorted(direct), "type": "chained_owners"})
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
