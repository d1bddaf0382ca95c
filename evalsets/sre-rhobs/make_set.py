#!/usr/bin/env python3
"""Build the sre-rhobs retrieval evaluation set from two fetched git snapshots.

Usage:
    python make_set.py --rhobs <git dir of rhobs/configuration> --thanos <git dir of thanos-io/thanos> --out <folder>

Deterministic; standard library + PyYAML only. Reads the snapshots with `git --git-dir=... show HEAD:<path>`.
This script is a build recipe for the data in this folder; the project never imports it.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import yaml

SYSTEM = "rhobs"
SOP_PATH = "docs/sop/observatorium.md"
RUNBOOK_URL = re.compile(r"^https://github\.com/rhobs/configuration/blob/main/([^#\s]+)#(\S+)$")

# ----------------------------------------------------------------------------------------------------------------
# git access


class Snapshot:
    def __init__(self, git_dir: str, short: str, repo: str):
        self.git_dir, self.short, self.repo = git_dir, short, repo
        out = self._git("log", "-1", "--format=%H %cs").split()
        self.commit, self.date = out[0], out[1]
        self.files = self._git("ls-tree", "-r", "--name-only", "HEAD").splitlines()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", *args], check=True, capture_output=True,
                              text=True).stdout

    def read(self, path: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "show", f"HEAD:{path}"], check=True,
                              capture_output=True).stdout.decode("utf-8")


# ----------------------------------------------------------------------------------------------------------------
# Markdown helpers

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")


def strip_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[end + 5:].lstrip("\n")
    return text


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, raw heading text) of ATX headings outside fenced code blocks."""
    out, fenced = [], None
    for i, line in enumerate(text.split("\n")):
        m = FENCE.match(line)
        if m:
            fenced = None if fenced == m.group(1) else (fenced or m.group(1))
            continue
        if fenced:
            continue
        h = ATX.match(line)
        if h:
            out.append((i, len(h.group(1)), h.group(2)))
    return out


def plain(heading: str) -> str:
    """Heading text without links, images, inline code, emphasis or HTML tags."""
    s = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", s)
    s = re.sub(r"<[^>]+>", "", s)
    s = s.replace("`", "")
    s = re.sub(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1", r"\2", s)
    return re.sub(r"\s+", " ", s).strip()


def slug(heading_plain: str) -> str:
    """GitHub's heading anchor: lower-case, drop punctuation other than '-' and '_', spaces become '-'."""
    s = heading_plain.lower()
    s = "".join(ch for ch in s if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return s.replace(" ", "-")


def title_of(text: str, path: str) -> str:
    hs = headings(text)
    if hs:
        t = plain(hs[0][2])
        if t:
            return t
    return Path(path).stem


def has_body(text: str) -> bool:
    """True if the text has anything besides headings and blank lines."""
    hs = {i for i, _, _ in headings(text)}
    return any(line.strip() for i, line in enumerate(text.split("\n")) if i not in hs)


def split_playbook(text: str):
    """Split at every level-1 and level-2 heading. Yields (anchor, title, section text, [anchors inside])
    for each non-empty unit; units with no body are returned as aliases of the next non-empty unit."""
    lines = text.split("\n")
    hs = headings(text)
    seen: Counter = Counter()
    anchored = []
    for i, level, raw in hs:  # GitHub numbers duplicate anchors over all headings, in order
        base = slug(plain(raw))
        a = base if seen[base] == 0 else f"{base}-{seen[base]}"
        seen[base] += 1
        anchored.append((i, level, plain(raw), a))
    cuts = [h for h in anchored if h[1] <= 2]
    units = []
    if cuts and cuts[0][0] > 0 and any(line.strip() for line in lines[:cuts[0][0]]):
        raise SystemExit("playbook has text before its first heading")
    for k, (i, level, t, a) in enumerate(cuts):
        end = cuts[k + 1][0] if k + 1 < len(cuts) else len(lines)
        body = "\n".join(lines[i:end]).rstrip("\n")
        inner = [h[3] for h in anchored if i <= h[0] < end]
        units.append({"anchor": a, "title": t, "text": body, "anchors": inner, "empty": not has_body(body)})
    passages, aliases, pending = [], {}, []
    for u in units:
        if u["empty"]:
            pending.append(u["anchor"])
            continue
        passages.append(u)
        for a in pending + u["anchors"]:
            aliases[a] = u["anchor"]
        pending = []
    return passages, aliases, pending


# ----------------------------------------------------------------------------------------------------------------
# corpus


def thanos_doc_paths(snap: Snapshot) -> list[str]:
    keep = []
    for p in snap.files:
        if not p.endswith(".md"):
            continue
        parts = p.split("/")
        if parts[0] == "docs" and (len(parts) == 2 or parts[1] in ("components", "operating")):
            keep.append(p)
    return sorted(keep)


def rhobs_doc_paths(snap: Snapshot) -> list[str]:
    keep = []
    for p in snap.files:
        parts = p.split("/")
        if p.endswith(".md") and parts[0] not in ("tests", "vendor") and not any(x.startswith(".") for x in parts):
            keep.append(p)
    return sorted(keep)


def build_corpus(rhobs: Snapshot, thanos: Snapshot, log: dict):
    corpus, anchor_map, skipped = [], {}, []
    for snap, paths in ((thanos, thanos_doc_paths(thanos)), (rhobs, rhobs_doc_paths(rhobs))):
        for p in paths:
            text = strip_front_matter(snap.read(p))
            if not has_body(text):
                skipped.append(f"{snap.short}/{p}")
                continue
            if snap is rhobs and p == SOP_PATH:
                passages, aliases, trailing = split_playbook(text)
                for u in passages:
                    corpus.append({"id": f"{snap.short}/{p}#{u['anchor']}", "title": u["title"], "text": u["text"]})
                for a, target in aliases.items():
                    anchor_map[(p, a)] = f"{snap.short}/{p}#{target}"
                log["playbook_sections"] = len(passages)
                log["playbook_empty_headings"] = sorted(a for a, t in aliases.items()
                                                        if not any(a in u["anchors"] for u in passages))
                log["playbook_trailing_empty"] = trailing
                continue
            corpus.append({"id": f"{snap.short}/{p}", "title": title_of(text, p), "text": text})
    log["skipped_empty"] = skipped
    return corpus, anchor_map


# ----------------------------------------------------------------------------------------------------------------
# wiring -> catalog

PARAM = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
OBJSTORE_KEYS = {"thanos.yaml", "objstore.yaml", "bucket"}


def substitute(obj, params: dict):
    if isinstance(obj, str):
        for _ in range(5):
            new = PARAM.sub(lambda m: params.get(m.group(1), m.group(0)), obj)
            if new == obj:
                break
            obj = new
        return obj
    if isinstance(obj, list):
        return [substitute(x, params) for x in obj]
    if isinstance(obj, dict):
        return {substitute(k, params): substitute(v, params) for k, v in obj.items()}
    return obj


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, list):
        for x in obj:
            yield from strings(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from strings(x)


def wiring_paths(snap: Snapshot) -> list[str]:
    return sorted(p for p in snap.files if re.fullmatch(r"resources/services/[^/]+\.yaml", p))


def build_catalog(rhobs: Snapshot, log: dict):
    workloads = {}  # name -> info
    services = defaultdict(list)  # service name -> [(template path, workload names)]
    used_files = []
    for path in wiring_paths(rhobs):
        docs = [d for d in yaml.safe_load_all(rhobs.read(path)) if d]
        for d in docs:
            if d.get("kind") != "Template":
                continue
            params = {p["name"]: str(p.get("value", "")) for p in d.get("parameters", [])}
            objs = substitute(d.get("objects", []), params)
            wls = [o for o in objs if o.get("kind") in ("Deployment", "StatefulSet")]
            if not wls:
                continue
            used_files.append(path)
            configmaps = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ConfigMap"}
            for o in wls:
                pod = o["spec"]["template"]
                spec = pod["spec"]
                containers = spec.get("containers", [])
                texts = []
                for c in containers + spec.get("initContainers", []):
                    texts += list(strings(c.get("args", []))) + list(strings(c.get("command", [])))
                    texts += [e["value"] for e in c.get("env", []) or [] if isinstance(e.get("value"), str)]
                for v in spec.get("volumes", []) or []:
                    cm = (v.get("configMap") or {}).get("name")
                    if cm in configmaps:
                        texts += list(strings(configmaps[cm].get("data", {})))
                stores = set()
                vol_secret = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) or []
                              if v.get("secret")}
                for c in containers:
                    for e in c.get("env", []) or []:
                        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                        if ref and ref.get("key") in OBJSTORE_KEYS:
                            stores.add(ref["name"])
                    for m in c.get("volumeMounts", []) or []:
                        if m.get("name") in vol_secret and (m.get("subPath") in OBJSTORE_KEYS):
                            stores.add(vol_secret[m["name"]])
                name = o["metadata"]["name"]
                if name in workloads:
                    raise SystemExit(f"duplicate workload name {name}")
                workloads[name] = {
                    "name": name, "file": path, "main": containers[0]["name"],
                    "labels": pod["metadata"].get("labels", {}), "text": "\n".join(texts),
                    "objstores": sorted(stores), "kind_k8s": o["kind"],
                }
            for o in objs:
                if o.get("kind") != "Service":
                    continue
                sel = (o.get("spec") or {}).get("selector") or {}
                if not sel:
                    continue
                sel_wls = sorted(w["metadata"]["name"] for w in wls
                                 if all(w["spec"]["template"]["metadata"].get("labels", {}).get(k) == v
                                        for k, v in sel.items()))
                if sel_wls:
                    services[o["metadata"]["name"]].append((path, sel_wls))
    # dependencies: a workload depends on the workloads behind every Service whose name it uses as a host name
    deps = {n: set() for n in workloads}
    for n, w in workloads.items():
        for svc, entries in services.items():
            pat = re.compile(r"(?<![A-Za-z0-9_-])" + re.escape(svc) + r"(?=[.:])")
            if not pat.search(w["text"]):
                continue
            same = [e for e in entries if e[0] == w["file"]]
            for _, targets in (same or entries[:1]):
                for t in targets:
                    if t != n:
                        deps[n].add(("component" if workloads[t]["main"] != "memcached" else "resource", t))
        for s in w["objstores"]:
            deps[n].add(("resource", s))
    entities = []
    for n in sorted(workloads):
        w = workloads[n]
        kind = "Resource" if w["main"] == "memcached" else "Component"
        spec = {"type": "cache" if kind == "Resource" else "service"}
        if kind == "Component":
            spec["lifecycle"] = "production"
        spec["system"] = SYSTEM
        if deps[n]:
            spec["dependsOn"] = [f"{k}:{t}" for k, t in sorted(deps[n], key=lambda x: (x[0] == "resource", x[1]))]
        entities.append({"apiVersion": "backstage.io/v1alpha1", "kind": kind, "metadata": {"name": n}, "spec": spec})
    for s in sorted({s for w in workloads.values() for s in w["objstores"]}):
        entities.append({"apiVersion": "backstage.io/v1alpha1", "kind": "Resource", "metadata": {"name": s},
                         "spec": {"type": "object-storage", "system": SYSTEM}})
    log["wiring_files"] = used_files
    return entities, workloads, deps


# ----------------------------------------------------------------------------------------------------------------
# questions

DEPS_PHRASES = [
    "{X} is degraded. Which components does it depend on, and where are they documented?",
    "What does {x} call, and which docs cover those components?",
    "{X} is returning errors. Which of its upstream dependencies should we check, and where are their docs?",
    "Before restarting {x}, which services must be healthy for it to work, and what documentation describes them?",
]
DEPENDENTS_PHRASES = [
    "{X} is down: which components that rely on it are affected, and where are their docs?",
    "Which consumers of {x} will see errors, and where are they documented?",
    "If {x} becomes unavailable, which services that call it will break, and which docs describe them?",
    "We plan maintenance on {x}. Which components depend on it, and where can we read about them?",
]


def name_forms(name: str) -> list[str]:
    return [name, f"the {name} service", " ".join(w[:1].upper() + w[1:] for w in name.split("-"))]


def phrase(template: str, name_form: str) -> str:
    """{X} starts a sentence: only a leading "the" is capitalised; a wiring name keeps its case."""
    start = "The" + name_form[3:] if name_form.startswith("the ") else name_form
    return template.replace("{X}", start).replace("{x}", name_form)


def component_doc(w: dict, doc_ids: set) -> str | None:
    """Rule: a workload whose main (first) container is named thanos-<x> is documented by thanos
    docs/components/<x>.md, if that file is a passage."""
    m = re.fullmatch(r"thanos-(.+)", w["main"])
    if not m:
        return None
    pid = f"thanos/docs/components/{m.group(1)}.md"
    return pid if pid in doc_ids else None


def dependency_questions(workloads, deps, doc_ids, log):
    dependents = defaultdict(set)
    for n, ds in deps.items():
        for k, t in ds:
            dependents[t].add(n)
    doc = {n: component_doc(w, doc_ids) for n, w in workloads.items()}
    out = []
    for qtype, relation, phrases in (("deps2docs", lambda n: {t for _, t in deps[n]}, DEPS_PHRASES),
                                     ("dependents2docs", lambda n: dependents.get(n, set()), DEPENDENTS_PHRASES)):
        cands = []
        for n in sorted(workloads):
            gold = sorted({doc[t] for t in relation(n) if t in doc and doc[t]})
            if gold:
                cands.append((n, gold))
        # rule: components that share main container and gold set are asked about once (first name in sort order)
        seen, kept, dropped = set(), [], []
        for n, gold in cands:
            key = (workloads[n]["main"], tuple(gold))
            if key in seen:
                dropped.append(n)
                continue
            seen.add(key)
            kept.append((n, gold))
        for i, (n, gold) in enumerate(kept):
            q = phrase(phrases[i % 4], name_forms(n)[i % 3])
            out.append({"id": f"{'deps' if qtype == 'deps2docs' else 'dependents'}-{n}", "question": q,
                        "answer": None, "gold_ids": gold, "type": qtype})
        log[f"{qtype}_candidates"] = len(cands)
        log[f"{qtype}_merged_away"] = dropped
    return out


TEMPLATE_RULES = [
    (re.compile(r"\{\{\s*\$value\s*\|\s*humanizePercentage\s*\}\}%?"), "N%"),
    (re.compile(r"\{\{\s*\$value\s*\|\s*humanize\s*\}\}%"), "N%"),
    (re.compile(r"\{\{\s*printf\s+\"[^\"]*\"\s+\$value\s*\}\}%"), "N%"),
    (re.compile(r"\{\{\s*\$value[^}]*\}\}"), "N"),
    (re.compile(r"\{\{\s*printf\s+\"[^\"]*\"\s+\$value\s*\}\}"), "N"),
    (re.compile(r"\{\{\s*\$(?:labels|externalLabels)\.([A-Za-z0-9_]+)\s*\}\}"), None),
]


def neutral(text: str) -> str:
    for pat, repl in TEMPLATE_RULES:
        if repl is None:
            text = pat.sub(lambda m: m.group(1).replace("_", " "), text)
        else:
            text = pat.sub(repl, text)
    text = text.replace("N%%", "N%")
    return re.sub(r"\s+", " ", text).strip()


def alert_rule_paths(snap: Snapshot) -> list[str]:
    return sorted(p for p in snap.files if p.startswith("resources/observability/prometheusrules/")
                  and p.endswith(".yaml") and not p.endswith(".prometheusrulestests.yaml"))


def alert_questions(rhobs: Snapshot, anchor_map, corpus_ids, log):
    rules, order = {}, []
    total = 0
    for path in alert_rule_paths(rhobs):
        for d in yaml.safe_load_all(rhobs.read(path)):
            if not d or d.get("kind") != "PrometheusRule":
                continue
            for g in (d.get("spec") or {}).get("groups", []):
                for r in g.get("rules", []):
                    if "alert" not in r:
                        continue
                    total += 1
                    if r["alert"] not in rules:
                        rules[r["alert"]] = r.get("annotations") or {}
                        order.append(r["alert"])
    out, unresolved, no_link, name_scrubbed, residue, same_as_earlier = [], [], [], 0, [], []
    asked = set()
    for name in sorted(order):  # alphabetical, so the same-wording rule below keeps the first name in sort order
        a = rules[name]
        link = a.get("runbook_url") or a.get("runbook")
        if not link:
            no_link.append(name)
            continue
        m = RUNBOOK_URL.match(link.strip())
        gold = None
        if m:
            path, anchor = m.group(1), m.group(2).lower()
            gold = anchor_map.get((path, anchor))
            if gold is None and f"rhobs/{path}" in corpus_ids and not anchor:
                gold = f"rhobs/{path}"
        if gold is None:
            unresolved.append(name)
            continue
        parts = [a[k] for k in ("summary", "description") if a.get(k)]
        if not parts and a.get("message"):
            parts = [a["message"]]
        text = neutral(" ".join(parts))
        if re.search(re.escape(name), text, re.I):
            text = re.sub(re.escape(name), "this alert", text, flags=re.I)
            name_scrubbed += 1
        if "{{" in text or "$" in text:
            residue.append(name)
        question = f"An alert is firing: {text}"
        if (question, gold) in asked:  # another alert name with the same wording and the same runbook
            same_as_earlier.append(name)
            continue
        asked.add((question, gold))
        out.append({"id": f"alert-{name}", "question": question, "answer": None,
                    "gold_ids": [gold], "type": "alert2runbook"})
    log.update(alert_rules_total=total, alert_names=len(order), alert_unresolved=unresolved,
               alert_no_link=no_link, alert_name_scrubbed=name_scrubbed, alert_residue=residue,
               alert_same_as_earlier=same_as_earlier)
    return out


# ----------------------------------------------------------------------------------------------------------------
# BM25 baseline

TOKEN = re.compile(r"[a-z0-9]+")


def bm25_scores(corpus, questions, k1=1.2, b=0.75):
    docs = [Counter(TOKEN.findall((p["title"] + " " + p["text"]).lower())) for p in corpus]
    lens = [sum(d.values()) for d in docs]
    avg = sum(lens) / len(lens)
    df = Counter(t for d in docs for t in d)
    n = len(docs)
    idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
    ranked = {}
    for q in questions:
        terms = TOKEN.findall(q["question"].lower())
        scores = []
        for i, d in enumerate(docs):
            s = 0.0
            for t in terms:
                tf = d.get(t)
                if tf:
                    s += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens[i] / avg))
            scores.append((-s, corpus[i]["id"]))
        ranked[q["id"]] = [pid for _, pid in sorted(scores)]
    return ranked


def metrics(questions, ranked):
    by = defaultdict(list)
    for q in questions:
        r, gold = ranked[q["id"]], set(q["gold_ids"])
        rr = next((1 / (i + 1) for i, p in enumerate(r) if p in gold), 0.0)
        by[q["type"]].append((len(gold & set(r[:5])) / len(gold), len(gold & set(r[:10])) / len(gold),
                              float(gold <= set(r[:5])), rr))
    return {t: [sum(x[i] for x in v) / len(v) for i in range(4)] + [len(v)] for t, v in sorted(by.items())}


# ----------------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rhobs", required=True, help="git dir of the rhobs/configuration snapshot")
    ap.add_argument("--thanos", required=True, help="git dir of the thanos-io/thanos snapshot")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    rhobs = Snapshot(args.rhobs, "rhobs", "rhobs/configuration")
    thanos = Snapshot(args.thanos, "thanos", "thanos-io/thanos")
    log: dict = {"sources": {s.repo: {"commit": s.commit, "date": s.date} for s in (rhobs, thanos)}}

    corpus, anchor_map = build_corpus(rhobs, thanos, log)
    ids = [p["id"] for p in corpus]
    assert len(ids) == len(set(ids)), "duplicate passage ids"
    id_set = set(ids)

    entities, workloads, deps = build_catalog(rhobs, log)
    questions = alert_questions(rhobs, anchor_map, id_set, log)
    assert not log["alert_residue"], log["alert_residue"]
    questions += dependency_questions(workloads, deps, id_set, log)
    questions.sort(key=lambda q: (q["type"], q["id"]))

    # checks
    qids = [q["id"] for q in questions]
    assert len(qids) == len(set(qids)), "duplicate question ids"
    for q in questions:
        assert q["gold_ids"] and all(g in id_set for g in q["gold_ids"]), q["id"]
    names = {(e["kind"].lower(), e["metadata"]["name"]) for e in entities}
    for e in entities:
        for ref in e["spec"].get("dependsOn", []):
            k, n = ref.split(":", 1)
            assert (k, n) in names, f"dangling {ref}"
    title = {p["id"]: p["title"] for p in corpus}
    with_title = Counter(q["type"] for q in questions
                         if any(title[g].lower() in q["question"].lower() for g in q["gold_ids"]))

    out.mkdir(parents=True, exist_ok=True)
    (out / "catalog").mkdir(exist_ok=True)
    (out / "LICENSES").mkdir(exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for p in corpus:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    with open(out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    with open(out / "catalog" / "catalog-info.yaml", "w", encoding="utf-8") as f:
        f.write("# Derived by make_set.py from rhobs/configuration resources/services/*.yaml (names only)\n")
        f.write(yaml.safe_dump_all(entities, sort_keys=False, explicit_start=False))
    for snap, fname in ((rhobs, "rhobs-configuration-LICENSE"), (thanos, "thanos-LICENSE")):
        (out / "LICENSES" / fname).write_text(snap.read("LICENSE"), encoding="utf-8")

    ranked = bm25_scores(corpus, questions)
    base = metrics(questions, ranked)
    best = defaultdict(list)
    for q in questions:
        g = len(q["gold_ids"])
        best[q["type"]].append((min(g, 5) / g, float(g <= 5)))
    log["counts"] = dict(Counter(q["type"] for q in questions))
    log["questions_with_gold_title"] = dict(with_title)
    log["gold_size_max"] = {t: max(len(q["gold_ids"]) for q in questions if q["type"] == t) for t in log["counts"]}
    log["best_recall_at_5"] = {t: [sum(x[0] for x in v) / len(v), sum(x[1] for x in v) / len(v)]
                               for t, v in best.items()}
    log["bm25"] = base
    log["passages"] = len(corpus)
    log["catalog_entities"] = Counter(e["kind"] for e in entities)
    log["corpus_bytes"] = (out / "corpus.jsonl").stat().st_size
    json.dump(log, sys.stdout, indent=1, default=str)
    print()


if __name__ == "__main__":
    main()
