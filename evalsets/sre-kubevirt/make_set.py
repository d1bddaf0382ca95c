#!/usr/bin/env python3
"""Build the sre-kubevirt retrieval eval set from bare git snapshots of six public KubeVirt repositories.

Usage:
  python3 make_set.py --monitoring <git dir> --kubevirt <git dir> --hco <git dir> --cdi <git dir> \
                      --ssp <git dir> --cnao <git dir> [--out <folder>]

  --monitoring  kubevirt/monitoring                        (runbooks and monitoring docs: passages)
  --kubevirt    kubevirt/kubevirt                          (docs/: passages; NetworkPolicy manifest: catalog wiring;
                                                            Prometheus rule unit tests: alerts)
  --hco         kubevirt/hyperconverged-cluster-operator   (deploy/operator.yaml: catalog; rule unit tests: alerts)
  --cdi         kubevirt/containerized-data-importer       (rule unit tests: alerts)
  --ssp         kubevirt/ssp-operator                      (rule unit tests: alerts)
  --cnao        kubevirt/cluster-network-addons-operator   (rule unit tests: alerts)

Standard library + PyYAML only. Reads HEAD of each snapshot with `git --git-dir=... ls-tree/show/log` (read only)
and writes corpus.jsonl, questions.jsonl, catalog/catalog-info.yaml, LICENSES/*-LICENSE and README.md into the
output folder (default: the folder of this script). Deterministic: same snapshots, same bytes.
Not part of graphrag_pipeline; nothing in the project imports it.
"""
from __future__ import annotations

import argparse
import json
import math
import posixpath
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import yaml

SET_NAME = "sre-kubevirt"
SYSTEM = "kubevirt"

# key -> (GitHub repo, passage id prefix or None, license file name in LICENSES/)
SOURCES = {
    "monitoring": ("kubevirt/monitoring", "kubevirt-monitoring", "kubevirt-monitoring-LICENSE"),
    "kubevirt": ("kubevirt/kubevirt", "kubevirt", "kubevirt-LICENSE"),
    "hco": ("kubevirt/hyperconverged-cluster-operator", None, "hyperconverged-cluster-operator-LICENSE"),
    "cdi": ("kubevirt/containerized-data-importer", None, "containerized-data-importer-LICENSE"),
    "ssp": ("kubevirt/ssp-operator", None, "ssp-operator-LICENSE"),
    "cnao": ("kubevirt/cluster-network-addons-operator", None, "cluster-network-addons-operator-LICENSE"),
}
# Prometheus rule unit-test files (promtool format), in the order in which alerts are collected
RULE_TESTS = [
    ("kubevirt", "hack/prom-rule-ci/prom-rules-tests.yaml"),
    ("cdi", "hack/prom-rule-ci/prom-rules-tests.yaml"),
    ("cnao", "tools/prom-rule-ci/prom-rules-tests.yaml"),
    ("hco", "hack/prom-rule-ci/hyperconverged-prom-rules-tests.yaml"),
    ("hco", "hack/prom-rule-ci/observability-prom-rules-tests.yaml"),
    ("ssp", "pkg/monitoring/rules/rules-tests.yaml"),
]
NETWORK_POLICIES = "manifests/generated/kubevirt-network-policies.yaml.in"   # in kubevirt/kubevirt
HCO_OPERATORS = "deploy/operator.yaml"                                      # in kubevirt/hyperconverged-cluster-operator
RUNBOOK_BASE = "https://kubevirt.io/monitoring/runbooks/"
RUNBOOK_DIR = "docs/runbooks/"                                              # in kubevirt/monitoring
GHPAGES = "docs/ghpages.json"                                               # in kubevirt/monitoring
COMPONENT_LABEL = "kubevirt.io"


# ----------------------------------------------------------------------------------------------------------- git
class Snapshot:
    def __init__(self, git_dir: str):
        self.git_dir = git_dir

    def _git(self, *args: str) -> bytes:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", *args], check=True, capture_output=True).stdout

    def head(self) -> tuple[str, str]:
        out = self._git("log", "-1", "--format=%H %cI", "HEAD").decode().split()
        return out[0], out[1]

    def files(self) -> list[str]:
        return sorted(self._git("ls-tree", "-r", "-z", "--name-only", "HEAD").decode().split("\0")[:-1])

    def read(self, path: str) -> str:
        return self._git("show", f"HEAD:{path}").decode("utf-8")

    def read_bytes(self, path: str) -> bytes:
        return self._git("show", f"HEAD:{path}")


# ------------------------------------------------------------------------------------------------------- corpus
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?\r?\n---[ \t]*(\r?\n|\Z)", re.S)
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")


def strip_front_matter(text: str) -> str:
    return FRONT_MATTER.sub("", text, count=1)


def clean_heading(raw: str) -> str:
    s = re.sub(r"[ \t]+#+[ \t]*$", "", raw)  # closing hashes
    s = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", s)  # images -> alt text
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # links -> text
    s = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", s)  # reference links -> text
    s = re.sub(r"<[^>]+>", "", s)  # inline HTML
    s = re.sub(r"`([^`]*)`", r"\1", s)  # code spans
    s = re.sub(r"(\*\*|__)(.+?)\1", r"\2", s)  # bold
    s = re.sub(r"(?<!\w)[*_](.+?)[*_](?!\w)", r"\1", s)  # emphasis
    return re.sub(r"\s+", " ", s).strip()


def first_heading(body: str) -> str | None:
    """Text of the first ATX heading outside fenced code blocks and HTML comments."""
    in_fence = None
    in_comment = False
    for line in body.splitlines():
        if in_comment:
            if "-->" in line:
                in_comment = False
            continue
        m = FENCE.match(line)
        if m:
            marker = m.group(1)[0]
            if in_fence is None:
                in_fence = marker
            elif in_fence == marker:
                in_fence = None
            continue
        if in_fence:
            continue
        if line.lstrip().startswith("<!--") and "-->" not in line:
            in_comment = True
            continue
        m = ATX.match(line)
        if m and m.group(2):
            title = clean_heading(m.group(2))
            if title:
                return title
    return None


def monitoring_included(path: str) -> tuple[bool, str]:
    if not path.endswith(".md"):
        return False, ""
    if "/vendor/" in path or "/testdata/" in path:
        return False, ""  # vendored third-party code and linter fixtures: not listed
    if path == "CLAUDE.md":
        return False, "instructions for a coding assistant (repository meta)"
    if path.startswith("docs/review_guidelines/"):
        return False, "pull-request review guidelines (repository meta)"
    if path.startswith(("monitoringlinter/", "test/")):
        return False, "README of a development linter tool"
    return True, ""


def kubevirt_included(path: str) -> tuple[bool, str]:
    return (path.startswith("docs/") and path.endswith(".md")), ""


def build_corpus(snaps: dict[str, Snapshot]) -> tuple[list[dict], list[tuple[str, str]]]:
    passages, left_out = [], []
    for key, rule in (("monitoring", monitoring_included), ("kubevirt", kubevirt_included)):
        prefix = SOURCES[key][1]
        for path in snaps[key].files():
            ok, why = rule(path)
            if not ok:
                if why:
                    left_out.append((f"{SOURCES[key][0]}: {path}", why))
                continue
            body = strip_front_matter(snaps[key].read(path))
            if not body.strip():
                left_out.append((f"{SOURCES[key][0]}: {path}", "empty or front matter only"))
                continue
            title = first_heading(body) or posixpath.splitext(posixpath.basename(path))[0]
            passages.append({"id": f"{prefix}/{path}", "title": title, "text": body})
    return passages, left_out


# ------------------------------------------------------------------------------------------------------- alerts
def runbook_passage(url: str, ids: set[str], redirects: dict[str, str]) -> str | None:
    """https://kubevirt.io/monitoring/runbooks/<X> -> kubevirt-monitoring/docs/runbooks/<X>.md (ghpages redirects
    applied), when that passage exists."""
    if not url.startswith(RUNBOOK_BASE):
        return None
    name = url[len(RUNBOOK_BASE):].split("#")[0].strip("/")
    fname = name if name.endswith(".md") else name + ".md"
    fname = redirects.get(fname, fname)
    pid = f"{SOURCES['monitoring'][1]}/{RUNBOOK_DIR}{fname}"
    return pid if pid in ids else None


def alert_question(severity: str, summary: str, description: str) -> str:
    summary, description = summary.strip(), description.strip()
    text = summary
    if description and description != summary:
        text = (summary if summary.endswith((".", "!", "?")) else summary + ".") + " " + description if summary \
            else description
    article = "An" if severity[:1].lower() in "aeiou" else "A"
    return f"{article} {severity} alert is firing: {text}"


def collect_alerts(snaps: dict[str, Snapshot]) -> tuple[list[dict], int]:
    """First expected firing (non-empty exp_annotations) of each alert name, in RULE_TESTS order, then file order."""
    seen: dict[str, dict] = {}
    n_names = set()
    for key, path in RULE_TESTS:
        doc = yaml.safe_load(snaps[key].read(path))
        for test in doc.get("tests") or []:
            for art in test.get("alert_rule_test") or []:
                name = art["alertname"]
                n_names.add(name)
                for exp in art.get("exp_alerts") or []:
                    ann = exp.get("exp_annotations") or {}
                    if ann and name not in seen:
                        seen[name] = {"name": name, "source": f"{SOURCES[key][0]}: {path}",
                                      "summary": str(ann.get("summary", "")),
                                      "description": str(ann.get("description", "")),
                                      "runbook_url": str(ann.get("runbook_url", "")),
                                      "severity": str((exp.get("exp_labels") or {}).get("severity", "firing"))}
    return [seen[n] for n in sorted(seen)], len(n_names)


def build_alert_questions(alerts: list[dict], ids: set[str], redirects: dict[str, str]):
    questions, dropped = [], []
    seen_pairs = set()
    for a in alerts:
        gold = runbook_passage(a["runbook_url"], ids, redirects)
        if not gold:
            dropped.append((a["name"], f"runbook_url `{a['runbook_url']}` resolves to no passage"))
            continue
        q = alert_question(a["severity"], a["summary"], a["description"])
        if a["name"].lower() in q.lower():
            dropped.append((a["name"], "alert name occurs in the annotation text"))
            continue
        if "{{" in q or "$labels" in q or "$value" in q:
            dropped.append((a["name"], "unrendered template in the annotation text"))
            continue
        if (q, gold) in seen_pairs:
            dropped.append((a["name"], "same question and gold as an earlier alert"))
            continue
        seen_pairs.add((q, gold))
        questions.append({"id": f"alert-{a['name']}", "question": q, "answer": None, "gold_ids": [gold],
                          "type": "alert2runbook"})
    return questions, dropped


# ------------------------------------------------------------------------------------------------------ catalog
def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def selector_components(sel: dict | None) -> list[str]:
    """Component names a pod selector names through the kubevirt.io label (matchLabels, or matchExpressions with
    operator In). Other selectors name no component."""
    if not isinstance(sel, dict):
        return []
    out = []
    v = (sel.get("matchLabels") or {}).get(COMPONENT_LABEL)
    if v:
        out.append(v)
    for e in sel.get("matchExpressions") or []:
        if e.get("key") == COMPONENT_LABEL and e.get("operator") == "In":
            out += list(e.get("values") or [])
    return out


def build_catalog(snaps: dict[str, Snapshot]) -> dict:
    hco_deployments = [d["metadata"]["name"] for d in load_yaml_docs(snaps["hco"].read(HCO_OPERATORS))
                       if d.get("kind") == "Deployment"]
    text = re.sub(r"\{\{[^}]*\}\}", "NAMESPACE", snaps["kubevirt"].read(NETWORK_POLICIES))
    policies = [d for d in load_yaml_docs(text) if d.get("kind") == "NetworkPolicy"]
    np_components: set[str] = set()
    edges: dict[str, set[str]] = defaultdict(set)
    edge_src: dict[tuple[str, str], list[str]] = defaultdict(list)
    unnamed_peers = []
    for p in policies:
        spec = p.get("spec") or {}
        pods = selector_components(spec.get("podSelector"))
        np_components.update(pods)
        for rule in spec.get("egress") or []:
            for peer in rule.get("to") or []:
                targets = selector_components(peer.get("podSelector"))
                if peer.get("podSelector") is not None and not targets:
                    unnamed_peers.append(p["metadata"]["name"])
                np_components.update(targets)
                for s in pods:
                    for t in targets:
                        if s != t:
                            edges[s].add(t)
                            edge_src[(s, t)].append(p["metadata"]["name"])
        for rule in spec.get("ingress") or []:
            for peer in rule.get("from") or []:
                callers = selector_components(peer.get("podSelector"))
                np_components.update(callers)
                for c in callers:
                    for t in pods:
                        if c != t:
                            edges[c].add(t)
                            edge_src[(c, t)].append(p["metadata"]["name"])
    names = sorted(set(hco_deployments) | np_components)
    entities = {n: {"deps": sorted(edges.get(n, ())),
                    "source": ", ".join(x for x, ok in (("HCO deploy/operator.yaml Deployment", n in hco_deployments),
                                                       ("kubevirt NetworkPolicy selector", n in np_components)) if ok)}
                for n in names}
    return {"entities": entities, "policies": [p["metadata"]["name"] for p in policies],
            "edge_src": {f"{s} -> {t}": sorted(set(v)) for (s, t), v in sorted(edge_src.items())},
            "unnamed_peers": sorted(set(unnamed_peers)), "hco_deployments": hco_deployments}


def catalog_yaml(entities: dict) -> str:
    docs = []
    for name in sorted(entities):
        spec = {"type": "service", "lifecycle": "production", "system": SYSTEM}
        if entities[name]["deps"]:
            spec["dependsOn"] = [f"component:{d}" for d in entities[name]["deps"]]
        docs.append({"apiVersion": "backstage.io/v1alpha1", "kind": "Component", "metadata": {"name": name},
                     "spec": spec})
    head = ("# Generated by make_set.py from kubevirt/hyperconverged-cluster-operator deploy/operator.yaml and "
            "kubevirt/kubevirt manifests/generated/kubevirt-network-policies.yaml.in (see README.md). Names only.\n")
    return head + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def doc_of(name: str, ids: set[str]) -> str | None:
    """The runbook of the component's availability alert: docs/runbooks/<F>.md with lower(F) == name without '-' +
    'down' (virt-api -> VirtAPIDown.md)."""
    want = name.replace("-", "").lower() + "down"
    prefix = f"{SOURCES['monitoring'][1]}/{RUNBOOK_DIR}"
    hits = [i for i in sorted(ids) if i.startswith(prefix) and "/" not in i[len(prefix):]
            and posixpath.splitext(i[len(prefix):])[0].lower() == want]
    return hits[0] if len(hits) == 1 else None


# ---------------------------------------------------------------------------------------------------- questions
def segment(part: str, vocab: Counter) -> list[str]:
    """Fewest corpus words (>= 3 letters, not the part itself) that concatenate to `part`; ties: the most frequent
    rarest word, then alphabetical. No such split: the part whole."""
    n = len(part)
    best: list[list | None] = [None] * (n + 1)
    best[0] = []
    for i in range(1, n + 1):
        cands = []
        for j in range(0, i - 2):
            w = part[j:i]
            if best[j] is not None and w in vocab and w != part:
                seq = best[j] + [w]
                cands.append((len(seq), -min(vocab[x] for x in seq), seq))
        if cands:
            best[i] = min(cands)[2]
    return best[n] if best[n] and len(best[n]) >= 2 else [part]


def spaced_form(name: str, vocab: Counter) -> str:
    words = []
    for part in re.split(r"[-_]", name):
        for w in segment(part, vocab):
            words.append(w.upper() if len(w) <= 2 else w.capitalize())
    return " ".join(words)


def name_forms(name: str, vocab: Counter) -> list[str]:
    the = f"the {name}" if name.endswith("service") else f"the {name} service"
    spaced = spaced_form(name, vocab)
    return [name, the, spaced if spaced != name else the]


DEPS_PHRASINGS = [
    "{X} is degraded. Which services does it depend on, and where are they documented?",
    "What does {X} call, and which docs cover those services?",
    "{X} is returning errors. Which of its dependencies should I check, and where is each one documented?",
    "Before restarting {X}, which services and databases does it rely on, and where are their docs?",
]
DEPENDENTS_PHRASINGS = [
    "{X} is down: which services that rely on it are affected, and where are their runbooks?",
    "Which consumers of {X} will see errors, and where are they documented?",
    "If {X} has an outage, which services depend on it, and where are their docs?",
    "Who calls {X}? List the dependent services and where each one is documented.",
]


def render(template: str, x: str) -> str:
    q = template.format(X=x)
    return "The" + q[3:] if q.startswith("the ") else q


def build_dep_questions(entities: dict, docs: dict, vocab: Counter) -> list[dict]:
    dependents = defaultdict(list)
    for n, e in entities.items():
        for d in e["deps"]:
            dependents[d].append(n)
    questions = []
    for qtype, rel, phrasings, prefix in (
            ("deps2docs", lambda n: entities[n]["deps"], DEPS_PHRASINGS, "deps"),
            ("dependents2docs", lambda n: sorted(dependents[n]), DEPENDENTS_PHRASINGS, "dependents")):
        eligible = [n for n in sorted(entities) if any(t in docs for t in rel(n))]
        for i, n in enumerate(eligible):
            gold = sorted({docs[t] for t in rel(n) if t in docs})
            x = name_forms(n, vocab)[i % 3]
            questions.append({"id": f"{prefix}-{n}", "question": render(phrasings[i % 4], x), "answer": None,
                              "gold_ids": gold, "type": qtype})
    return questions


# -------------------------------------------------------------------------------------------------------- BM25
def tokens(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", s.lower())


class BM25:
    def __init__(self, passages: list[dict], k1: float = 1.2, b: float = 0.75):
        self.ids = [p["id"] for p in passages]
        docs = [tokens(p["title"] + " " + p["text"]) for p in passages]
        self.N = len(docs)
        self.lens = [len(d) for d in docs]
        self.avg = sum(self.lens) / self.N
        self.df = Counter(t for d in docs for t in set(d))
        self.tfs = [Counter(d) for d in docs]
        self.k1, self.b = k1, b

    def rank(self, query: str) -> list[str]:
        q = tokens(query)
        scores = []
        for idx, tf in enumerate(self.tfs):
            s = 0.0
            for t in q:
                if t in tf:
                    idf = math.log(1 + (self.N - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    s += idf * tf[t] * (self.k1 + 1) / (tf[t] + self.k1 * (1 - self.b + self.b * self.lens[idx] / self.avg))
            scores.append((-s, idx))
        return [self.ids[i] for _, i in sorted(scores)]


def evaluate(passages: list[dict], questions: list[dict]) -> dict:
    bm = BM25(passages)
    per = defaultdict(lambda: defaultdict(list))
    for q in questions:
        ranked = bm.rank(q["question"])
        gold = set(q["gold_ids"])
        m = per[q["type"]]
        m["r5"].append(len(gold & set(ranked[:5])) / len(gold))
        m["r10"].append(len(gold & set(ranked[:10])) / len(gold))
        m["all5"].append(float(gold <= set(ranked[:5])))
        first = next((r for r, pid in enumerate(ranked, 1) if pid in gold), None)
        m["mrr"].append(1 / first if first else 0.0)
        m["best5"].append(min(5, len(gold)) / len(gold))
        m["bestall5"].append(float(len(gold) <= 5))
    return {t: {k: sum(v) / len(v) for k, v in m.items()} | {"n": len(m["r5"])} for t, m in sorted(per.items())}


# ------------------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key in SOURCES:
        ap.add_argument(f"--{key}", required=True, help=f"git dir of a {SOURCES[key][0]} snapshot")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    args = ap.parse_args()
    out = Path(args.out)
    snaps = {k: Snapshot(getattr(args, k)) for k in SOURCES}
    heads = {k: snaps[k].head() for k in SOURCES}

    passages, left_out = build_corpus(snaps)
    ids = {p["id"] for p in passages}
    assert len(ids) == len(passages), "duplicate passage id"

    redirects = {r["source"]: r["target"] for r in json.loads(snaps["monitoring"].read(GHPAGES)).get("redirects", [])}
    alerts, n_alert_names = collect_alerts(snaps)
    alert_qs, dropped = build_alert_questions(alerts, ids, redirects)

    cat = build_catalog(snaps)
    entities = cat["entities"]
    docs = {n: d for n in sorted(entities) if (d := doc_of(n, ids))}
    vocab = Counter(t for p in passages for t in re.findall(r"[a-z]+", p["text"].lower()) if len(t) >= 3)
    dep_qs = build_dep_questions(entities, docs, vocab)
    questions = dep_qs + alert_qs
    questions.sort(key=lambda q: (q["type"], q["id"]))

    # ---- checks
    titles = {p["id"]: p["title"] for p in passages}
    assert all(g in ids for q in questions for g in q["gold_ids"]), "gold id missing from corpus"
    assert len({q["id"] for q in questions}) == len(questions), "duplicate question id"
    for n, e in entities.items():
        assert all(d in entities for d in e["deps"]), f"dangling dependsOn in {n}"
    for q in alert_qs:
        assert q["id"][len("alert-"):].lower() not in q["question"].lower()
    title_hits = [q["id"] for q in questions
                  if any(titles[g].lower() in q["question"].lower() for g in q["gold_ids"])]

    # ---- write
    (out / "catalog").mkdir(parents=True, exist_ok=True)
    (out / "LICENSES").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for p in passages:
            fh.write(json.dumps(p, ensure_ascii=False) + "\n")
    with open(out / "questions.jsonl", "w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    (out / "catalog" / "catalog-info.yaml").write_text(catalog_yaml(entities), encoding="utf-8")
    for key, (_, _, lic) in SOURCES.items():
        (out / "LICENSES" / lic).write_bytes(snaps[key].read_bytes("LICENSE"))

    metrics = evaluate(passages, questions)
    corpus_bytes = (out / "corpus.jsonl").stat().st_size
    by_src = Counter(p["id"].split("/", 1)[0] for p in passages)
    runbook_ids = sorted(i for i in ids if i.startswith(f"{SOURCES['monitoring'][1]}/{RUNBOOK_DIR}"))
    gold_runbooks = {g for q in alert_qs for g in q["gold_ids"]}
    stats = {"heads": heads, "passages": len(passages), "corpus_bytes": corpus_bytes, "by_src": by_src,
             "left_out": left_out, "alerts": alerts, "n_alert_names": n_alert_names, "dropped": dropped,
             "cat": cat, "docs": docs, "questions": questions, "metrics": metrics, "title_hits": title_hits,
             "forms": {n: name_forms(n, vocab) for n in sorted(entities)},
             "runbooks_without_question": [i for i in runbook_ids if i not in gold_runbooks]}
    (out / "README.md").write_text(readme(stats), encoding="utf-8")
    print(json.dumps({"heads": heads, "passages": len(passages), "corpus_bytes": corpus_bytes,
                      "questions": Counter(q["type"] for q in questions), "dropped": dropped,
                      "title_hits": title_hits, "metrics": metrics}, indent=1))


def readme(s: dict) -> str:
    cat, qs, m = s["cat"], s["questions"], s["metrics"]
    ents = cat["entities"]
    counts = Counter(q["type"] for q in qs)
    nedges = sum(len(e["deps"]) for e in ents.values())
    gold_sizes = defaultdict(Counter)
    for q in qs:
        gold_sizes[q["type"]][len(q["gold_ids"])] += 1
    src_rows = "\n".join(
        f"| [{SOURCES[k][0]}](https://github.com/{SOURCES[k][0]}) | `{s['heads'][k][0]}` | {s['heads'][k][1]} | "
        f"Apache-2.0 (`LICENSES/{SOURCES[k][2]}`, verbatim) | {USED_FOR[k]} |" for k in SOURCES)
    ent_rows = "\n".join(
        f"| `{n}` | {e['source']} | {', '.join(e['deps']) or '-'} | "
        f"{'`' + s['docs'][n] + '`' if n in s['docs'] else '-'} | {' / '.join(s['forms'][n])} |"
        for n, e in sorted(ents.items()))
    edge_rows = "\n".join(f"  - {k}: {', '.join(v)}" for k, v in cat["edge_src"].items())
    left = "\n".join(f"  - `{p}`: {why}" for p, why in s["left_out"])
    dropped = "\n".join(f"  - `{n}`: {why}" for n, why in s["dropped"])
    alert_src = Counter(a["source"] for a in s["alerts"])
    alert_src_rows = "\n".join(
        f"  - `{SOURCES[k][0]}: {p}`: {alert_src[f'{SOURCES[k][0]}: {p}']} alert names taken from it"
        for k, p in RULE_TESTS)
    rows = "\n".join(f"| {t} ({v['n']}) | {v['r5']:.3f} | {v['all5']:.3f} | {v['r10']:.3f} | {v['mrr']:.3f} |"
                     for t, v in m.items())
    best = "\n".join(f"| {t} | {v['best5']:.3f} | {v['bestall5']:.3f} |" for t, v in m.items())
    d_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPS_PHRASINGS))
    r_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPENDENTS_PHRASINGS))
    sizes = "; ".join(f"{t}: " + ", ".join(f"{k} gold × {v}" for k, v in sorted(c.items()))
                      for t, c in sorted(gold_sizes.items()))
    no_q = ", ".join(posixpath.splitext(posixpath.basename(i))[0] for i in s["runbooks_without_question"])
    th = len(s["title_hits"])
    return f"""# {SET_NAME}: KubeVirt alerts, runbooks and component wiring

A held-out SRE retrieval set built by `make_set.py` (standard library + PyYAML) from six public Apache-2.0
repositories of the KubeVirt project (virtual machines on Kubernetes). {s['passages']} passages
({s['corpus_bytes']:,} bytes), {len(qs)} questions ({', '.join(f'{c} {t}' for t, c in sorted(counts.items()))}),
{len(ents)} catalog entities. The script is deterministic: rerun it on the same snapshots and every file here comes
out byte-identical:

    python3 make_set.py --monitoring <git dir> --kubevirt <git dir> --hco <git dir> --cdi <git dir> \\
                        --ssp <git dir> --cnao <git dir> [--out <folder>]

It reads each snapshot's HEAD with `git --git-dir=<dir> ls-tree/show/log` only, and prints a JSON log (commits,
counts, dropped alerts, BM25). The project never imports it.

## Sources
| repo | commit | commit date | license | used for |
|---|---|---|---|---|
{src_rows}

Why this product: the brief's first candidate. Its conventions differ from the other sets: runbooks are one file per
alert with `Meaning / Impact / Diagnosis / Mitigation` sections; alerts are defined in Go and get their
`runbook_url` from a URL template (`{RUNBOOK_BASE}<AlertName>`), so the machine-readable form of an alert
used here is the projects' own Prometheus rule unit tests (promtool `alert_rule_test`), whose `exp_annotations` hold
the annotations exactly as they are rendered when the alert fires (concrete pod, node and VM names instead of
templates); and the only machine-readable wiring between components is a set of Kubernetes NetworkPolicies.
openshift/runbooks was not used: its `openshift-virtualization-operator/` folder is a downstream copy of the same
runbooks (it would duplicate every gold passage), and its other operators' alerts are largely kube-prometheus rules
(cluster-monitoring-operator, already in the development sets) or Ceph rules (storage), with no inter-component
wiring in their manifests either. Strimzi and Vitess were not examined in depth. The dependency part is small, see
Caveats.

## Files
- `corpus.jsonl`: `{{"id","title","text"}}`, one whole Markdown document per passage.
- `questions.jsonl`: `{{"id","question","answer": null,"gold_ids","type"}}`.
- `catalog/catalog-info.yaml`: multi-document Backstage catalog (`backstage.io/v1alpha1`), names only.
- `LICENSES/`: the LICENSE file of each of the six repositories, verbatim (all Apache-2.0).
- `make_set.py`: builds all of the above and this README.

## Passages ({s['passages']}: {', '.join(f'{k} {v}' for k, v in sorted(s['by_src'].items()))})
- kubevirt/monitoring (id `kubevirt-monitoring/<path>`): every `*.md` in the HEAD tree, i.e. the current runbooks
  (`docs/runbooks/`, {len([1 for q in s['docs']])} of them double as component docs, see Catalog), the deprecated
  runbooks (`docs/deprecated_runbooks/`, alerts no longer shipped: distractors), `docs/metrics.md` (the metrics
  reference), `README.md`, `monitoring-guidelines.md` and `dashboards/README.md`; except vendored code and linter
  fixtures (`*/vendor/*`, `*/testdata/*`, not listed) and the files listed below.
- kubevirt/kubevirt (id `kubevirt/<path>`): every `*.md` under `docs/` (architecture, components, debugging,
  metrics, network, release and developer docs): distractors, several of which describe the same components.
- Text = the file body verbatim after removing a leading YAML front-matter block (`---` ... `---`), if any. HTML
  comments (the runbooks' `<!--DS: ... -->` downstream markers) are kept.
- Title = the text of the first ATX heading outside fenced code and HTML comments, with closing hashes,
  links/images (kept as their text), inline HTML, code spans and bold/emphasis markers removed and whitespace
  collapsed; if a file has no heading, its file name without extension. No title was set by hand. Runbook titles
  are the CamelCase alert names.
- Left out ({len(s['left_out'])}):
{left}

## Catalog ({len(ents)} Components, {nedges} dependsOn edges)
Names only: no title, owner or link (the sources have only repository-wide OWNERS files). Every entity is a
`Component` with `spec.type: service`, `spec.lifecycle: production`, `spec.system: {SYSTEM}`.
1. Entities: every `Deployment` in kubevirt/hyperconverged-cluster-operator `{HCO_OPERATORS}` (the operators that
   the HyperConverged operator installs, {len(cat['hco_deployments'])}), plus every component named by a
   NetworkPolicy selector in kubevirt/kubevirt `{NETWORK_POLICIES}` ({len(cat['policies'])} policies; the
   `{{{{...}}}}` Go-template fields are replaced by a placeholder before YAML parsing). A selector names a component
   through the `{COMPONENT_LABEL}` pod label: `matchLabels[{COMPONENT_LABEL}]`, or a `matchExpressions` entry on
   that key with operator `In` (each value). The components that virt-operator creates at run time (virt-api,
   virt-controller, virt-handler, virt-launcher, ...) have no manifest of their own; their names are the label
   values. virt-operator appears in both sources with the same name.
2. dependsOn: A depends on B when a NetworkPolicy selecting A's pods has an egress rule whose `to` peer selects B's
   pods, or a NetworkPolicy selecting B's pods has an ingress rule whose `from` peer selects A's pods. Self edges
   (virt-handler to virt-handler, virt-api to itself) are dropped. Rules without a named peer (ports only, or
   other labels: {', '.join(cat['unnamed_peers']) or 'none'} selects export-server pods by a label key with
   `Exists`; the virt-template policies are ingress without `from`) give no edge. Edges and the policies behind them:
{edge_rows}
3. The doc of a component is the runbook of its availability alert: the passage
   `kubevirt-monitoring/{RUNBOOK_DIR}<F>.md` whose file name `<F>`, lower-cased, equals the component name without
   `-` followed by `down` (virt-api → `VirtAPIDown.md`). The docs are not named like the components and are not
   linked from the wiring; this rule is the mapping. No other passage is a component doc.

| entity | from | dependsOn | doc passage | name forms used in questions |
|---|---|---|---|---|
{ent_rows}

## Questions ({len(qs)}: {', '.join(f'{t} {c}' for t, c in sorted(counts.items()))})
Written rules, applied before any retrieval run; no question was picked or edited by hand.
- `alert2runbook`: alerts come from the Prometheus rule unit-test files below ({s['n_alert_names']} distinct alert
  names; files read in this order, each in document order; an alert name already taken from an earlier file is
  skipped):
{alert_src_rows}
  For each alert name, the first expected firing (`exp_alerts` entry) with non-empty `exp_annotations` is used. The
  question is `A <severity> alert is firing: <summary> <description>`, with `<severity>` the expected `severity`
  label ("An" before a vowel), a `.` added after the summary when it does not end with `.`, `!` or `?`, and the
  description left out when it is empty or equal to the summary. The annotation text is used exactly as the test
  expects it rendered (e.g. node `node01`, VM `vm-01`); it contains no template residue (checked). Gold = the
  passage the `runbook_url` annotation resolves to: `{RUNBOOK_BASE}<X>` → `kubevirt-monitoring/{RUNBOOK_DIR}<X>.md`
  (after the redirects in `docs/ghpages.json`, none of which is hit). An alert is dropped when its URL resolves to
  no passage, when its name occurs in the question (case-insensitive), or when question and gold equal an earlier
  one. Alerts are in name order. Dropped:
{dropped}
  Runbooks that get no alert question and stay as distractors: {no_q}.
- `deps2docs`: every entity with at least one dependency that has a doc. Gold = the docs of its dependencies
  (dependencies without a doc are ignored).
- `dependents2docs`: every entity with at least one dependent that has a doc. Gold = the docs of its dependents.
- Within each dependency type, entities are sorted by name; the i-th question uses phrasing `i mod 4` and name form
  `i mod 3`. Name forms (as in `sre-bank-of-anthos`): (0) the catalog name as is; (1) "the <name> service" (just
  "the <name>" when the name already ends with "service"); (2) a spaced, capitalised form: the name split at
  `-`/`_`, each part split into the fewest words of at least 3 letters that occur in the corpus text (ties: the
  split whose rarest word is most frequent), words of 1-2 letters upper-cased, others capitalised (if that equals
  the name, form 1 is used). Names are written exactly as the form gives them, also at the start of a sentence;
  only a leading "the" is capitalised.
- deps2docs phrasings:
{d_ph}
- dependents2docs phrasings:
{r_ph}

Checks (asserted by the script): every gold id is in the corpus; passage and question ids are unique; no
`dependsOn` ref is dangling; no alert name occurs in its question. Questions containing a gold passage's title
verbatim (case-insensitive): {th}{(' (' + ', '.join(s['title_hits']) + ')') if s['title_hits'] else ''}.

Gold-set sizes: {sizes}.

## BM25 baseline
k1=1.2, b=0.75, over title + " " + text, lower-case alphanumeric tokens (`[a-z0-9]+`), idf = ln(1 + (N-df+0.5)/(df+0.5)),
ties broken by corpus order. R@k = share of a question's gold passages in the top k, averaged; all-gold@5 = share of
questions with every gold passage in the top 5; MRR = reciprocal rank of the first gold passage.

| type | R@5 | all-gold@5 | R@10 | MRR |
|---|---|---|---|---|
{rows}

Best achievable with 5 results (gold sets larger than 5 cap it):

| type | best R@5 | best all-gold@5 |
|---|---|---|
{best}

## Caveats
- **The dependency part is small.** KubeVirt wires its components in Go (virt-operator creates virt-api,
  virt-controller and virt-handler at run time); the only machine-readable wiring in these repositories is the
  NetworkPolicy manifest, which has {nedges} edges, and only {len(s['docs'])} components have an availability
  runbook. That gives {counts.get('deps2docs', 0)} deps2docs and {counts.get('dependents2docs', 0)} dependents2docs
  questions, far below the 8 per type aimed for; one question moves a type's mean by a quarter or more. The four
  dependents2docs questions all have the same gold (`VirtAPIDown.md`): virt-api is the only documented caller.
  The other operators (CDI, SSP, network addons, HPP) declare no wiring between components in YAML and were not
  given invented edges. Read the dependency figures as a smoke test, not a measurement.
- **Alerts are near-paraphrases of their runbooks.** Most runbooks restate the alert in their `Meaning` section,
  so lexical overlap is high; but many alerts differ only in the component word or a threshold (`Low*Count`,
  `NoReady*`, `*RESTErrorsBurst` for four components; `GuestVCPUQueueHigh*` warning vs critical), and the
  deprecated runbooks (`*RESTErrorsHigh`, `KubeMacPoolDown`, `SSPOperatorDown`) are near-duplicates of current
  ones that are not gold.
- **Concrete values.** The rendered test annotations carry test fixture names (`node01`, `vm-01`, `test-ns`,
  `n1.cnv.redhat.com`), which occur in no passage.
- **One alert, two sources.** `VMNonRecoverableOSPanic` is tested in kubevirt/kubevirt and in the HCO
  observability tests with different rendered counts; the kubevirt/kubevirt one (first in file order) is used.
- **Runbooks are written for both upstream and downstream** (OpenShift) readers; the `<!--DS: ...-->` comments keep
  downstream text in the passages.
- The snapshots are from different dates (see Sources); the runbook set and the rule tests were compared only
  through the links, which all resolve except the one listed under Dropped.
"""


USED_FOR = {
    "monitoring": "runbooks and monitoring docs (passages `kubevirt-monitoring/<path>`); `docs/ghpages.json` redirects",
    "kubevirt": "`docs/**/*.md` (passages `kubevirt/<path>`); NetworkPolicies (catalog); rule tests (alerts)",
    "hco": "`deploy/operator.yaml` (catalog); two rule-test files (alerts)",
    "cdi": "rule tests (alerts)",
    "ssp": "rule tests (alerts)",
    "cnao": "rule tests (alerts)",
}


if __name__ == "__main__":
    main()
