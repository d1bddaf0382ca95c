#!/usr/bin/env python3
"""Build the sre-argo-cd retrieval eval set from a bare git snapshot of argoproj/argo-cd.

Usage: python3 make_set.py <path to the snapshot's git directory> [output folder]

Standard library + PyYAML only. Reads HEAD of the snapshot with `git --git-dir=... ls-tree/show` (read only) and
writes corpus.jsonl, questions.jsonl, catalog/catalog-info.yaml, LICENSES/argo-cd-LICENSE and README.md into the
output folder (default: the folder of this script). Deterministic: same snapshot, same bytes.
Not part of graphrag_pipeline; nothing in the project imports it.
"""
from __future__ import annotations

import json
import math
import posixpath
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

REPO = "argoproj/argo-cd"
SHORT = "argo-cd"
SYSTEM = "argo-cd"
SET_NAME = "sre-argo-cd"
MANIFESTS = ("manifests/install-with-hydrator.yaml", "manifests/ha/install-with-hydrator.yaml")
DOC_FOLDERS = ("docs", "docs/operator-manual", "docs/developer-guide/architecture")  # top level of each, *.md
ARGO_IMAGE_PREFIX = "quay.io/argoproj/"
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
RESOURCE_COMPONENT_LABEL = "redis"  # app.kubernetes.io/component value that makes a workload a Resource (cache)
SHORT_NAME = re.compile(r"^(?:Run|Runs|Start|Starts)\s+(?:the\s+)?(?:Argo\s?CD)\s+(.+?)\.?$", re.I)


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


# ------------------------------------------------------------------------------------------------------ markdown
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


def headings(body: str) -> list[tuple[int, int, str]]:
    """(line index, level, cleaned text) of every ATX heading outside fenced code blocks and HTML comments."""
    out = []
    in_fence = None
    in_comment = False
    for i, line in enumerate(body.splitlines()):
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
                out.append((i, len(m.group(1)), title))
    return out


def slug(title: str, seen: Counter) -> str:
    """GitHub's anchor: lower-case, punctuation other than - and _ dropped, spaces to -, duplicates numbered."""
    s = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    n = seen[s]
    seen[s] += 1
    return s if n == 0 else f"{s}-{n}"


def norm(s: str) -> str:
    """Comparison form of a heading or a name: lower-case words of letters and digits, single-spaced."""
    return " ".join(re.findall(r"[a-z0-9]+", s.lower()))


def sections(body: str) -> list[tuple[str, str, str]]:
    """(anchor, title, text) for every level-1..3 heading; a section runs to the next heading of level <= 3.
    Sections with no text besides heading lines are dropped (their anchors still count for numbering)."""
    lines = body.splitlines(keepends=True)
    hs = headings(body)
    cut = [(i, lvl, t) for i, lvl, t in hs if lvl <= 3]
    heading_lines = {i for i, _, _ in hs}
    seen: Counter = Counter()
    out = []
    for k, (i, lvl, t) in enumerate(cut):
        end = cut[k + 1][0] if k + 1 < len(cut) else len(lines)
        anchor = slug(t, seen)
        chunk = lines[i:end]
        if any(ln.strip() for j, ln in enumerate(chunk, start=i) if j not in heading_lines):
            out.append((anchor, t, "".join(chunk)))
    return out


# ------------------------------------------------------------------------------------------------------ catalog
def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def selects(selector: dict, labels: dict) -> bool:
    ml = (selector or {}).get("matchLabels") or {}
    return bool(ml) and all(labels.get(k) == v for k, v in ml.items())


def image_name(image: str) -> str:
    return image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


def cobra_shorts(snap: Snapshot, files: list[str]) -> dict[tuple[str, str | None], str]:
    """(binary, subcommand or None) -> cobra Short text, for the server binaries of cmd/*/commands/*.go.
    A binary's root command is the cobra.Command whose `Use:` is the common.Command* constant naming it
    (common/common.go); a subcommand is a `Use: "<sub>"` command in the same folder."""
    consts = dict(re.findall(r"^\s*(Command\w+)\s*=\s*\"([^\"]+)\"", snap.read("common/common.go"), re.M))
    out: dict[tuple[str, str | None], str] = {}
    by_dir: dict[str, list[str]] = defaultdict(list)
    for f in files:
        if re.match(r"cmd/[^/]+/commands/[^/]+\.go$", f) and not f.endswith("_test.go"):
            by_dir[posixpath.dirname(f)].append(f)
    pair = re.compile(r"Use:\s*(common\.(\w+)|\"([^\"]+)\"),\s*\n\s*Short:\s*\"([^\"]+)\"")
    for d, fs in sorted(by_dir.items()):
        roots, subs = [], []
        for f in sorted(fs):
            for m in pair.finditer(snap.read(f)):
                if m.group(2) and m.group(2) in consts:
                    roots.append((consts[m.group(2)], m.group(4)))
                elif m.group(3):
                    subs.append((m.group(3), m.group(4)))
        for binary, short in roots:
            out[(binary, None)] = short
            for sub, s in subs:
                out.setdefault((binary, sub), s)
    return out


def build_catalog(snap: Snapshot, files: list[str]) -> dict:
    shorts = cobra_shorts(snap, files)
    entities: dict[str, dict] = {}
    edges: dict[str, set] = defaultdict(set)
    edge_src: dict[tuple[str, str], set] = defaultdict(set)
    present: dict[str, list[str]] = defaultdict(list)
    for mf in MANIFESTS:
        docs = load_yaml_docs(snap.read(mf))
        workloads = {}
        for d in docs:
            if d.get("kind") in WORKLOAD_KINDS:
                tmpl = d["spec"]["template"]
                workloads[d["metadata"]["name"]] = {
                    "kind": d["kind"], "pod_labels": tmpl["metadata"].get("labels") or {},
                    "component": (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component", ""),
                    "containers": tmpl["spec"]["containers"]}
        for w, info in sorted(workloads.items()):
            present[w].append(mf)
            c0 = info["containers"][0]
            argv = list(c0.get("command") or []) + list(c0.get("args") or [])
            binary = posixpath.basename(argv[0]) if argv else ""
            sub = argv[1] if len(argv) > 1 and not argv[1].startswith("-") and "/" not in argv[1] else None
            short = shorts.get((binary, sub)) if binary.startswith("argocd") else None
            m = SHORT_NAME.match(short or "")
            third_party = None if c0["image"].startswith(ARGO_IMAGE_PREFIX) else image_name(c0["image"])
            rec = {"kind": "Resource" if info["component"] == RESOURCE_COMPONENT_LABEL else "Component",
                   "workload_kind": info["kind"], "component_label": info["component"],
                   "command": " ".join([binary] + ([sub] if sub else [])), "short": short,
                   "short_name": m.group(1) if m else None, "image": third_party}
            if w in entities:
                assert {k: entities[w][k] for k in rec} == rec, f"{w} differs between manifests"
            else:
                entities[w] = rec
        for d in docs:
            if d.get("kind") != "NetworkPolicy":
                continue
            targets = [w for w, i in workloads.items() if selects(d["spec"].get("podSelector"), i["pod_labels"])]
            for rule in d["spec"].get("ingress") or []:
                for peer in (rule or {}).get("from") or []:
                    if "podSelector" not in peer or "namespaceSelector" in peer:
                        continue
                    for src, i in workloads.items():
                        if selects(peer["podSelector"], i["pod_labels"]):
                            for t in targets:
                                if t != src:
                                    edges[src].add(t)
                                    edge_src[(src, t)].add(d["metadata"]["name"])
    for w, e in entities.items():
        e["deps"] = sorted(edges.get(w, ()))
        e["manifests"] = present[w]
        names = []
        if e["component_label"]:
            names.append(e["component_label"].replace("-", " "))
        if e["short_name"]:
            names.append(e["short_name"])
        if e["image"]:
            names.append(e["image"])
        e["names"] = names
    return {"entities": entities, "edge_src": edge_src}


def ref(entities: dict, name: str) -> str:
    return f"{entities[name]['kind'].lower()}:{name}"


def catalog_yaml(entities: dict) -> str:
    docs = []
    for name in sorted(entities):
        e = entities[name]
        if e["kind"] == "Component":
            spec = {"type": "service", "lifecycle": "production", "system": SYSTEM}
        else:
            spec = {"type": "cache", "system": SYSTEM}
        if e["deps"]:
            spec["dependsOn"] = [ref(entities, d) for d in e["deps"]]
        docs.append({"apiVersion": "backstage.io/v1alpha1", "kind": e["kind"], "metadata": {"name": name},
                     "spec": spec})
    head = (f"# Generated by make_set.py from {' and '.join(MANIFESTS)} of {REPO} (see README.md). "
            "Names only: no titles, links, owners or annotations.\n")
    return head + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


# ------------------------------------------------------------------------------------------------------- corpus
def in_scope(path: str) -> bool:
    return path.endswith(".md") and posixpath.dirname(path) in DOC_FOLDERS


def build_corpus(snap: Snapshot, files: list[str], entities: dict) -> tuple[list[dict], list[str], dict]:
    name_owners: dict[str, set] = defaultdict(set)
    for w, e in entities.items():
        for n in e["names"]:
            name_owners[norm(n)].add(w)
    passages, split_docs = [], []
    excluded = Counter()
    for path in files:
        if not path.endswith(".md") or not path.startswith("docs/"):
            continue
        if not in_scope(path):
            excluded[posixpath.dirname(path)] += 1
            continue
        body = strip_front_matter(snap.read(path))
        if not body.strip():
            continue
        named = {frozenset(name_owners[norm(t)]) for _, lvl, t in headings(body)
                 if lvl <= 3 and norm(t) in name_owners}
        if len(named) >= 2:  # the page describes two or more catalog workloads under their own headings
            split_docs.append(path)
            for anchor, title, text in sections(body):
                passages.append({"id": f"{SHORT}/{path}#{anchor}", "title": title, "text": text})
        else:
            hs = headings(body)
            title = hs[0][2] if hs else posixpath.splitext(posixpath.basename(path))[0]
            passages.append({"id": f"{SHORT}/{path}", "title": title, "text": body})
    docs_of: dict[str, list[str]] = defaultdict(list)
    for p in passages:
        for w in sorted(name_owners.get(norm(p["title"]), ())):
            docs_of[w].append(p["id"])
    excluded_top = sorted(excluded.items(), key=lambda kv: (-kv[1], kv[0]))
    return passages, split_docs, {"docs_of": dict(docs_of), "excluded": excluded_top}


# ---------------------------------------------------------------------------------------------------- questions
def segment(part: str, vocab: Counter) -> list[str]:
    """Fewest corpus words (>= 3 letters, not the part itself) that concatenate to `part`; ties: the most frequent
    rarest word, then alphabetical. No such split: the part whole."""
    n = len(part)
    best: list[list[str] | None] = [None] * (n + 1)
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


def name_forms(name: str, noun: str, vocab: Counter) -> list[str]:
    the = f"the {name}" if name.endswith(noun) else f"the {name} {noun}"
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
    return "The" + q[3:] if q.startswith("the ") else q  # names are kept as written, only "the" is capitalised


def noun_of(e: dict) -> str:
    return "service" if e["kind"] == "Component" else "cache"


def build_questions(entities: dict, docs_of: dict, vocab: Counter) -> list[dict]:
    dependents = defaultdict(list)
    for n, e in entities.items():
        for d in e["deps"]:
            dependents[d].append(n)
    questions = []
    for qtype, rel, phrasings, prefix in (
            ("deps2docs", lambda n: entities[n]["deps"], DEPS_PHRASINGS, "deps"),
            ("dependents2docs", lambda n: sorted(dependents[n]), DEPENDENTS_PHRASINGS, "dependents")):
        eligible = [n for n in sorted(entities) if any(t in docs_of for t in rel(n))]
        for i, n in enumerate(eligible):
            gold = sorted({g for t in rel(n) for g in docs_of.get(t, ())})
            x = name_forms(n, noun_of(entities[n]), vocab)[i % 3]
            questions.append({"id": f"{prefix}-{n}", "question": render(phrasings[i % 4], x), "answer": None,
                              "gold_ids": gold, "type": qtype})
    return questions


# -------------------------------------------------------------------------------------------------------- BM25
def tokens(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", s.lower())


def bm25_rank(passages: list[dict], query: str, k1: float = 1.2, b: float = 0.75) -> list[str]:
    docs = [tokens(p["title"] + " " + p["text"]) for p in passages]
    N = len(docs)
    avg = sum(map(len, docs)) / N
    df = Counter(t for d in docs for t in set(d))
    tfs = [Counter(d) for d in docs]
    scores = []
    for idx, (d, tf) in enumerate(zip(docs, tfs)):
        s = 0.0
        for t in tokens(query):
            if t in tf:
                idf = math.log(1 + (N - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avg))
        scores.append((-s, idx))
    return [passages[i]["id"] for _, i in sorted(scores)]


def evaluate(passages: list[dict], questions: list[dict]) -> dict:
    per = defaultdict(lambda: defaultdict(list))
    for q in questions:
        ranked = bm25_rank(passages, q["question"])
        gold = set(q["gold_ids"])
        m = per[q["type"]]
        m["r5"].append(len(gold & set(ranked[:5])) / len(gold))
        m["r10"].append(len(gold & set(ranked[:10])) / len(gold))
        m["all5"].append(float(gold <= set(ranked[:5])))
        first = next((i for i, pid in enumerate(ranked) if pid in gold), None)
        m["mrr"].append(0.0 if first is None else 1.0 / (first + 1))
        m["best5"].append(min(5, len(gold)) / len(gold))
        m["bestall5"].append(float(len(gold) <= 5))
    return {t: {k: sum(v) / len(v) for k, v in m.items()} | {"n": len(m["r5"])} for t, m in sorted(per.items())}


# ------------------------------------------------------------------------------------------------------- main
def main() -> None:
    git_dir = sys.argv[1]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent
    snap = Snapshot(git_dir)
    commit, date = snap.head()
    files = snap.files()

    cat = build_catalog(snap, files)
    entities = cat["entities"]
    passages, split_docs, info = build_corpus(snap, files, entities)
    docs_of = info["docs_of"]
    ids = {p["id"] for p in passages}

    vocab = Counter(t for p in passages for t in re.findall(r"[a-z]+", p["text"].lower()) if len(t) >= 3)
    questions = build_questions(entities, docs_of, vocab)

    # ---- checks
    titles = {p["id"]: p["title"] for p in passages}
    texts = {p["id"]: p["text"] for p in passages}
    assert all(g in ids for q in questions for g in q["gold_ids"]), "gold id missing from corpus"
    assert len(ids) == len(passages), "duplicate passage id"
    for n, e in entities.items():
        assert all(d in entities for d in e["deps"]), f"dangling dependsOn in {n}"
    title_hits = [q["id"] for q in questions
                  if any(titles[g].lower() in q["question"].lower() for g in q["gold_ids"])]
    # how far names and documents are apart: gold (entity, passage) pairs whose title / text contain the catalog name
    pairs = [(w, pid) for w, pids in docs_of.items() for pid in pids]
    name_in_title = [(w, p) for w, p in pairs if w in titles[p].lower()]
    name_in_text = [(w, p) for w, p in pairs if re.search(r"(?<![\w-])" + re.escape(w) + r"(?![\w-])", texts[p])]

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
    (out / "LICENSES" / f"{SHORT}-LICENSE").write_bytes(snap.read_bytes("LICENSE"))

    metrics = evaluate(passages, questions)
    corpus_bytes = (out / "corpus.jsonl").stat().st_size
    stats = {"commit": commit, "date": date, "passages": passages, "corpus_bytes": corpus_bytes,
             "split_docs": split_docs, "excluded": info["excluded"], "entities": entities, "docs_of": docs_of,
             "questions": questions, "metrics": metrics, "title_hits": title_hits, "edge_src": cat["edge_src"],
             "name_in_title": name_in_title, "name_in_text": name_in_text, "pairs": pairs,
             "forms": {n: name_forms(n, noun_of(entities[n]), vocab) for n in sorted(entities)}}
    (out / "README.md").write_text(readme(stats), encoding="utf-8")
    print(json.dumps({"commit": commit, "date": date, "passages": len(passages), "corpus_bytes": corpus_bytes,
                      "split_docs": split_docs, "title_hits": title_hits, "metrics": metrics,
                      "questions": len(questions), "gold_pairs": len(pairs),
                      "name_in_text": len(name_in_text)}, indent=1))


def readme(s: dict) -> str:
    ents, qs, m, docs_of = s["entities"], s["questions"], s["metrics"], s["docs_of"]
    counts = Counter(q["type"] for q in qs)
    nedges = sum(len(e["deps"]) for e in ents.values())
    gold_sizes = Counter(len(q["gold_ids"]) for q in qs)
    titles = {p["id"]: p["title"] for p in s["passages"]}
    n_split = sum(1 for p in s["passages"] if "#" in p["id"])

    def names_cell(e):
        parts = []
        if e["component_label"]:
            parts.append(f"label `{e['component_label']}`")
        if e["short"]:
            parts.append(f"`{e['command']}`: \"{e['short']}\"" + ("" if e["short_name"] else " (no name)"))
        if e["image"]:
            parts.append(f"image `{e['image']}`")
        return "; ".join(parts)

    ent_lines = "\n".join(
        f"| `{n}` | {e['kind']} ({e['workload_kind']}) | {'both' if len(e['manifests']) == 2 else ('HA only' if 'ha/' in e['manifests'][0] else 'standard only')} | "
        f"{names_cell(e)} | {', '.join(e['deps']) or '-'} | "
        f"{'<br>'.join('`' + d.split('/', 1)[1] + '` (' + titles[d] + ')' for d in docs_of.get(n, [])) or '-'} | "
        f"{' / '.join(s['forms'][n])} |"
        for n, e in sorted(ents.items()))
    edge_lines = "\n".join(f"  - `{a}` → `{b}` (from {', '.join(sorted(nps))})"
                           for (a, b), nps in sorted(s["edge_src"].items()))
    split = "\n".join(f"  - `{p}`" for p in s["split_docs"])
    excl = ", ".join(f"`{d}/` ({c})" for d, c in s["excluded"])
    rows = "\n".join(f"| {t} ({v['n']}) | {v['r5']:.3f} | {v['all5']:.3f} | {v['r10']:.3f} | {v['mrr']:.3f} |"
                     for t, v in m.items())
    best = "\n".join(f"| {t} | {v['best5']:.3f} | {v['bestall5']:.3f} |" for t, v in m.items())
    d_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPS_PHRASINGS))
    r_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPENDENTS_PHRASINGS))
    q_lines = "\n".join(f"| `{q['id']}` | {q['question']} | {len(q['gold_ids'])} |" for q in qs)
    return f"""# {SET_NAME}: an SRE dependency-retrieval set from Argo CD, where catalog names and doc titles differ

**Role: development set** (tune on it; look at its rankings). Built by `make_set.py` (standard library + PyYAML)
from one public Apache-2.0 repository. {len(s['passages'])} passages, {len(qs)} questions, {len(ents)} catalog
entities. The script is deterministic: rerun it on the same snapshot and every file here comes out byte-identical
(`python3 make_set.py <git dir of the snapshot> [out dir]`).

What it measures: the catalog names come mechanically from Argo CD's install manifests (`argocd-server`,
`argocd-repo-server`, `argocd-redis-ha-haproxy`, ...), while the gold documents are the sections of Argo CD's two
architecture pages that describe each component under its *human* name ("API Server", "Repository Server",
"Repo Server", "Dex", "Redis"). Of the {len(s['pairs'])} gold (workload, passage) pairs, {len(s['name_in_title'])} have the
catalog name in the passage's title and {len(s['name_in_text'])} have it anywhere in the passage's text (checked by the
script). Many non-gold documents, by contrast,
name the workloads literally (`tls.md`, `high_availability.md`, `metrics.md`, ...). The catalog has **no links to
docs, no titles, no annotations**: names and `dependsOn` only, so a retriever must infer which documents are about
an entity from their text.

## Source
| repo | commit | commit date | license |
|---|---|---|---|
| [{REPO}](https://github.com/{REPO}) | `{s['commit']}` | {s['date']} | Apache-2.0 (`LICENSES/{SHORT}-LICENSE`, verbatim) |

Why this product: of the brief's candidates, Argo CD is the one whose manifests wire components together in a
machine-readable way (NetworkPolicies that name, per workload, which other workloads may connect to it) *and* whose
docs describe each component under a name that is not its workload name. Checked and not used:
cortexproject/cortex (one Markdown doc per component, but its docker-compose files give every component one shared
config, so wiring would be all-to-all, and there is no rendered Kubernetes deployment in the repository);
linkerd/linkerd2 (Helm-rendered golden manifests with subcommand args, but no docs in the repository; the website's
architecture page covers only three control-plane components); argoproj/argo-workflows (the quick-start manifests
that wire its components are over the snapshot's 4 MiB file limit); temporalio/docker-compose (`depends_on` is
start-up order, not calls). jaegertracing/jaeger and rook/rook were not examined.

## Files
- `corpus.jsonl`: `{{"id","title","text"}}`.
- `questions.jsonl`: `{{"id","question","answer": null,"gold_ids","type"}}`.
- `catalog/catalog-info.yaml`: multi-document Backstage catalog (`backstage.io/v1alpha1`), names and `dependsOn` only.
- `LICENSES/{SHORT}-LICENSE`: upstream LICENSE.
- `make_set.py`: builds all of the above and this README.

## Passages ({len(s['passages'])}, corpus.jsonl {s['corpus_bytes']:,} bytes)
- In scope: every `*.md` file directly in {', '.join('`' + d + '/`' for d in DOC_FOLDERS)} (not in their
  subfolders). Text = the file body verbatim after removing a leading YAML front-matter block, if any.
- Out of scope: every other Markdown file under `docs/`, by folder: {excl}. Notably
  `docs/operator-manual/server-commands/` (the generated flag reference of each server binary, titled
  "`argocd-repo-server` Command Reference" etc.: each is wholly about one workload and named by it, so as a
  non-gold passage it would be an unfair distractor and as gold a title match this set is not about) and
  `docs/operator-manual/notifications/` (the notifications controller's docs, which have no component section to
  be gold by the rule below). Upgrade notes, user guide, proposals and the notification-service catalogue are out
  to keep the corpus within ~1 MB / 200 passages.
- **Split into sections ({n_split} passages from {len(s['split_docs'])} files):** a file is split when two or more of its
  level-1..3 headings equal the documented names (below) of different catalog workloads, i.e. the page describes
  several workloads one per heading. That holds for exactly these:
{split}
  A section runs from a level-1..3 heading to the next level-1..3 heading (deeper headings stay inside); sections
  with no text besides headings are dropped. id = `{SHORT}/<path>#<anchor>` with GitHub's anchor slug; title = the
  heading. Every other file is one passage, id = `{SHORT}/<path>`.
- Title = the text of the (section's or file's first) ATX heading outside fenced code and HTML comments, with
  links/images (kept as their text), inline HTML, code spans and emphasis removed; a file with no heading takes
  its file name without extension. No title was set by hand.

## Catalog ({len(ents)} entities, {nedges} dependsOn edges)
Derived mechanically from `{MANIFESTS[0]}` (the standard install with the source hydrator's commit server) and
`{MANIFESTS[1]}` (the HA variant, which replaces `argocd-redis` with `argocd-redis-ha-haproxy` in front of the
`argocd-redis-ha-server` StatefulSet). The catalog is the **union** of the two: a workload present in both is one
entity (the script asserts its labels, image and command are the same in both).
1. Each Deployment or StatefulSet becomes an entity named as the manifest names the workload. Its kind is
   `Resource` (`spec.type: cache`) when its `app.kubernetes.io/component` label is `redis`, otherwise `Component`
   (`spec.type: service`, `spec.lifecycle: production`). `spec.system: {SYSTEM}`. No `metadata.title`, no owner
   (CODEOWNERS assigns the whole repository and `docs/` to approver teams, not per component), **no links and no
   annotations**.
2. `dependsOn` from NetworkPolicies: A depends on B when a NetworkPolicy in the same manifest selects B's pods
   (`spec.podSelector.matchLabels` ⊆ B's pod-template labels) and one of its `ingress[].from[]` peers is a
   `podSelector` (without `namespaceSelector`) that selects A's pods. Peers that are `namespaceSelector: {{}}`
   (metrics ports open to any namespace) and `argocd-server`'s allow-all rule give no edge; self-edges
   (`argocd-redis-ha-server` peers with itself) are dropped. Edges ({nedges}):
{edge_lines}

### Which documents are about which workload (the gold mapping)
Each workload has **documented names**, taken mechanically from the repository:
- (a) its `app.kubernetes.io/component` label with `-` read as a space (`repo-server` → "repo server");
- (b) for a container running an Argo CD binary, the cobra `Short` description of the command it runs
  (binary = basename of the first container's first `command`/`args` element, plus a following subcommand word if
  any; the command is found through `common/common.go`'s `Command*` constants and `Use:` in
  `cmd/*/commands/*.go`), when it reads "Run[s]/Start[s] [the] Argo CD|ArgoCD <name>" ("Run ArgoCD Repository
  Server" → "Repository Server"); `argocd-dex rundex` reads "Runs dex generating a config ..." and gives no name;
- (c) for a first container whose image is not `{ARGO_IMAGE_PREFIX}*`, the image's name (`dex`, `redis`, `haproxy`).

A passage is **about** a workload when its title equals one of the workload's documented names (compared as
lower-case words of letters and digits). A title that equals names of several workloads ("Redis": the component
label of all three Redis workloads) is about each of them. This is also what decides which files are split.

| entity | kind | in manifest | documented names | dependsOn | passages about it (title) | name forms used in questions |
|---|---|---|---|---|---|---|
{ent_lines}

`argocd-notifications-controller` and `argocd-commit-server` have no passage about them (no architecture section;
their own docs are out of scope or titled otherwise), so they appear in questions only as subjects, never as gold.

## Questions ({len(qs)}: {', '.join(f'{t} {c}' for t, c in sorted(counts.items()))})
Written rules, no question picked or edited by hand; the phrasings and name forms are those of
`sre-bank-of-anthos` and were fixed before any retrieval run on this set.
- `deps2docs`: every entity with at least one dependency that has a passage about it. Gold = the passages about
  its dependencies (dependencies without one are ignored; a passage about several dependencies counts once).
- `dependents2docs`: every entity that at least one entity with a passage about it depends on. Gold = the
  passages about its dependents.
- Within each type, entities are sorted by name; the i-th question uses phrasing `i mod 4` and name form `i mod 3`.
  Name forms: (0) the catalog name as is; (1) "the <name> service" for a Component, "the <name> cache" for a
  Resource (its `spec.type`; just "the <name>" when the name already ends with that noun); (2) a spaced,
  capitalised form: the name split at `-`/`_`, each part split into the fewest words of at least 3 letters that
  occur in the corpus text (ties: the split whose rarest word is most frequent), words of 1-2 letters upper-cased,
  others capitalised (if that equals the name, form 1 is used). Names are written exactly as the form gives them,
  also at the start of a sentence; only a leading "the" is capitalised.
- deps2docs phrasings:
{d_ph}
- dependents2docs phrasings:
{r_ph}
- No alert2runbook questions: the repository has no Prometheus alert rules and no runbooks.

| id | question | gold |
|---|---|---|
{q_lines}

Checks (asserted by the script): every gold id is in the corpus; passage ids are unique; no `dependsOn` ref is
dangling; a workload present in both manifests is the same in both. Questions containing a gold passage's title
verbatim (case-insensitive): {len(s['title_hits'])}{(' (' + ', '.join(s['title_hits']) + ')') if s['title_hits'] else ''}.

Gold-set sizes: {', '.join(f'{k} gold: {v} question(s)' for k, v in sorted(gold_sizes.items()))}.

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
- **Small.** {len(qs)} questions ({', '.join(f'{c} {t}' for t, c in sorted(counts.items()))}): a {len(ents)}-workload product cannot give
  10 per type. One question moves a type's mean by {' or '.join(sorted({f'1/{c}' for c in counts.values()}))}.
- **Few distinct gold passages, one shared.** Every gold passage is one of the {sum(1 for p in s['passages'] if '#' in p['id'] and any(p['id'] in v for v in docs_of.values()))} component sections of the
  two architecture pages; the "Redis" section is about all three Redis workloads and is gold in many questions.
  A retriever that always returns the architecture sections would do well; read per-question rankings, not just
  means.
- **Union of two install variants.** No real cluster runs both `argocd-redis` and `argocd-redis-ha-haproxy`; the
  catalog merges the standard and HA manifests to get more wiring, so e.g. `argocd-server` depends on both.
- **Other documents are about components too.** `high_availability.md`, `tls.md`, `metrics.md`, `mtls.md`,
  `dynamic-cluster-distribution.md` (the application controller's sharding), `config-management-plugins.md`
  (repo-server sidecars) and `developer-guide/architecture/authz-authn.md` (the API server's authn/authz layers)
  describe one or more workloads at length, often naming them literally, but are not gold: the gold rule takes
  only passages *titled* by a documented name. They are the hard distractors of this set; a retriever ranking
  them is not wholly wrong, which caps what the metrics can say.
- **Dependencies are from NetworkPolicies**, i.e. which workloads are *allowed* to connect, not observed traffic.
  They agree with the address flags the binaries default to (`--repo-server`, `--dex-server`, `--redis`,
  `--commit-server`), which the manifests leave to those defaults and so could not be used directly.
- **Name forms rely on corpus vocabulary**; the forms actually used are in the entity table.
"""


if __name__ == "__main__":
    main()
