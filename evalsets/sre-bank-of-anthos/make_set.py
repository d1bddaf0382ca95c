#!/usr/bin/env python3
"""Build the sre-bank-of-anthos retrieval eval set from a bare git snapshot of GoogleCloudPlatform/bank-of-anthos.

Usage: python3 make_set.py <path to the snapshot's git directory> [output folder]

Standard library + PyYAML only. Reads HEAD of the snapshot with `git --git-dir=... ls-tree/show/cat-file` (read
only) and writes corpus.jsonl, questions.jsonl, catalog/catalog-info.yaml, LICENSES/bank-of-anthos-LICENSE and
README.md into the output folder (default: the folder of this script). Deterministic: same snapshot, same bytes.
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

REPO = "GoogleCloudPlatform/bank-of-anthos"
SHORT = "bank-of-anthos"
SYSTEM = "bank-of-anthos"
SET_NAME = "sre-bank-of-anthos"
MANIFEST_DIR = "kubernetes-manifests/"
EXCLUDED_PREFIXES = (".github/",)  # repository meta: issue/PR templates, code of conduct, contributing, security, CI
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


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


def build_corpus(snap: Snapshot) -> tuple[list[dict], list[tuple[str, str]]]:
    passages, left_out = [], []
    for path in snap.files():
        if not path.lower().endswith(".md"):
            continue
        if path.startswith(EXCLUDED_PREFIXES):
            left_out.append((path, "under .github/ (repository meta, not operational documentation)"))
            continue
        body = strip_front_matter(snap.read(path))
        if not body.strip():
            left_out.append((path, "empty or front matter only"))
            continue
        title = first_heading(body) or posixpath.splitext(posixpath.basename(path))[0]
        passages.append({"id": f"{SHORT}/{path}", "title": title, "text": body})
    return passages, left_out


# ------------------------------------------------------------------------------------------------------ catalog
def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


HOST = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*(?::[A-Za-z][A-Za-z0-9+.\-]*)*://)?(?:[^@/\s]*@)?([A-Za-z0-9.\-]+)")


def host_of(value: str) -> str | None:
    m = HOST.match(value.strip())
    return m.group(1) if m else None


def image_name(image: str) -> str:
    last = image.split("@")[0].rsplit("/", 1)[-1]
    return last.split(":")[0]


def artifact_dirs(snap: Snapshot, files: list[str]) -> dict[str, str]:
    """image name -> source folder, from every skaffold.yaml build artifact (context, or context/jib.project)."""
    out: dict[str, str] = {}

    def walk(node, base):
        if isinstance(node, dict):
            arts = node.get("artifacts")
            if isinstance(arts, list):
                for a in arts:
                    if isinstance(a, dict) and "image" in a and "context" in a:
                        d = posixpath.normpath(posixpath.join(base, a["context"]))
                        if isinstance(a.get("jib"), dict) and a["jib"].get("project"):
                            d = posixpath.normpath(posixpath.join(d, a["jib"]["project"]))
                        out.setdefault(a["image"], d)
            for v in node.values():
                walk(v, base)
        elif isinstance(node, list):
            for v in node:
                walk(v, base)

    for f in files:
        if posixpath.basename(f) == "skaffold.yaml":
            for doc in load_yaml_docs(snap.read(f)):
                walk(doc, posixpath.dirname(f))
    return out


def is_code_file(path: str) -> bool:
    """Source files that can read an env var: no docs, no tests, no deployment manifests, no build config."""
    parts = path.split("/")
    if any(p in ("test", "tests", "k8s") for p in parts[:-1]):
        return False
    name = parts[-1]
    return not (name.lower().endswith(".md") or name == "skaffold.yaml")


def build_catalog(snap: Snapshot, files: list[str]) -> dict:
    docs = []
    for f in files:
        if f.startswith(MANIFEST_DIR) and f.endswith((".yaml", ".yml")):
            docs += load_yaml_docs(snap.read(f))
    configmaps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    services = {d["metadata"]["name"]: (d.get("spec") or {}).get("selector") or {}
                for d in docs if d.get("kind") == "Service"}
    workloads = {}
    for d in docs:
        if d.get("kind") in WORKLOAD_KINDS:
            labels = d["spec"]["template"]["metadata"].get("labels") or {}
            workloads[d["metadata"]["name"]] = {"kind": d["kind"], "labels": labels,
                                                "containers": d["spec"]["template"]["spec"]["containers"]}
    # Service name -> workload whose pod labels match the Service selector
    svc_to_workload = {}
    for s, sel in sorted(services.items()):
        hits = [w for w, info in sorted(workloads.items())
                if sel and all(info["labels"].get(k) == v for k, v in sel.items())]
        if len(hits) == 1:
            svc_to_workload[s] = hits[0]
    art = artifact_dirs(snap, files)
    code_files = [f for f in files if is_code_file(f)]

    entities = {}
    unfiltered_edges = 0
    for w, info in sorted(workloads.items()):
        env: list[tuple[str, str]] = []
        images = []
        for c in info["containers"]:
            images.append(image_name(c.get("image", "")))
            for e in c.get("env") or []:
                if "value" in e:
                    env.append((e["name"], str(e["value"])))
                else:
                    ref = ((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
                    if ref.get("name") in configmaps and ref.get("key") in configmaps[ref["name"]]:
                        env.append((e["name"], str(configmaps[ref["name"]][ref["key"]])))
            for ef in c.get("envFrom") or []:
                cm = (ef.get("configMapRef") or {}).get("name")
                for k, v in sorted((configmaps.get(cm) or {}).items()):
                    env.append((k, str(v)))
        src_dirs = sorted({art[i] for i in images if i in art})
        src_text = ""
        for f in code_files:
            if any(f.startswith(d + "/") for d in src_dirs):
                try:
                    src_text += snap.read(f) + "\n"
                except UnicodeDecodeError:
                    pass
        deps, candidates = [], set()
        for name, value in env:
            host = host_of(value)
            target = svc_to_workload.get(host or "")
            if not target or target == w:
                continue
            candidates.add(target)
            if re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", src_text) and target not in deps:
                deps.append(target)
        unfiltered_edges += len(candidates)
        entities[w] = {"kind": "Component" if info["kind"] == "Deployment" else "Resource",
                       "src_dirs": src_dirs, "deps": deps}
    return {"entities": entities, "unfiltered_edges": unfiltered_edges}


def ref(entities: dict, name: str) -> str:
    return f"{entities[name]['kind'].lower()}:{name}"


def catalog_yaml(entities: dict) -> str:
    docs = []
    for name in sorted(entities):
        e = entities[name]
        spec = {"type": "service" if e["kind"] == "Component" else "database",
                "lifecycle": "production", "system": SYSTEM}
        if e["kind"] == "Resource":
            spec.pop("lifecycle")
        if e["deps"]:
            spec["dependsOn"] = [ref(entities, d) for d in sorted(e["deps"])]
        docs.append({"apiVersion": "backstage.io/v1alpha1", "kind": e["kind"], "metadata": {"name": name},
                     "spec": spec})
    head = ("# Generated by make_set.py from kubernetes-manifests/ of GoogleCloudPlatform/bank-of-anthos "
            "(see README.md). Names only.\n")
    return head + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


# ---------------------------------------------------------------------------------------------------- questions
def segment(part: str, vocab: Counter) -> list[str]:
    """Fewest corpus words (>= 3 letters, not the part itself) that concatenate to `part`; ties: the most frequent
    rarest word, then alphabetical. No such split: the part whole."""
    n = len(part)
    best: list[list[tuple] | None] = [None] * (n + 1)
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


def name_forms(name: str, kind: str, vocab: Counter) -> list[str]:
    noun = "database" if kind == "Resource" else "service"
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


def build_questions(entities: dict, readme_of: dict, vocab: Counter) -> list[dict]:
    dependents = defaultdict(list)
    for n, e in entities.items():
        for d in e["deps"]:
            dependents[d].append(n)
    questions = []
    for qtype, rel, phrasings, prefix in (
            ("deps2docs", lambda n: entities[n]["deps"], DEPS_PHRASINGS, "deps"),
            ("dependents2docs", lambda n: dependents[n], DEPENDENTS_PHRASINGS, "dependents")):
        eligible = [n for n in sorted(entities) if any(t in readme_of for t in rel(n))]
        for i, n in enumerate(eligible):
            gold = sorted(readme_of[t] for t in rel(n) if t in readme_of)
            x = name_forms(n, entities[n]["kind"], vocab)[i % 3]
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
        first = next((r for r, pid in enumerate(ranked, 1) if pid in gold), None)
        m["mrr"].append(1 / first if first else 0.0)
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

    passages, left_out = build_corpus(snap)
    ids = {p["id"] for p in passages}
    cat = build_catalog(snap, files)
    entities = cat["entities"]

    # README passage of a catalog entity: <source folder>/README.md (exact name) when it is in the corpus
    readme_of = {}
    for n, e in entities.items():
        hits = [f"{SHORT}/{d}/README.md" for d in e["src_dirs"] if f"{SHORT}/{d}/README.md" in ids]
        if len(hits) == 1:
            readme_of[n] = hits[0]

    vocab = Counter(t for p in passages for t in re.findall(r"[a-z]+", p["text"].lower()) if len(t) >= 3)
    questions = build_questions(entities, readme_of, vocab)

    # ---- checks
    titles = {p["id"]: p["title"] for p in passages}
    assert all(g in ids for q in questions for g in q["gold_ids"]), "gold id missing from corpus"
    assert len(ids) == len(passages), "duplicate passage id"
    for n, e in entities.items():
        assert all(d in entities for d in e["deps"]), f"dangling dependsOn in {n}"
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
    (out / "LICENSES" / f"{SHORT}-LICENSE").write_bytes(snap.read_bytes("LICENSE"))

    metrics = evaluate(passages, questions)
    corpus_bytes = (out / "corpus.jsonl").stat().st_size
    stats = {"commit": commit, "date": date, "passages": len(passages), "corpus_bytes": corpus_bytes,
             "left_out": left_out, "entities": entities, "readme_of": readme_of, "questions": questions,
             "metrics": metrics, "title_hits": title_hits, "unfiltered_edges": cat["unfiltered_edges"],
             "forms": {n: name_forms(n, entities[n]["kind"], vocab) for n in sorted(entities)}}
    (out / "README.md").write_text(readme(stats), encoding="utf-8")
    print(json.dumps({k: stats[k] for k in ("commit", "date", "passages", "corpus_bytes", "title_hits",
                                             "unfiltered_edges", "metrics")}, indent=1))


def readme(s: dict) -> str:
    ents, qs, m = s["entities"], s["questions"], s["metrics"]
    counts = Counter(q["type"] for q in qs)
    nedges = sum(len(e["deps"]) for e in ents.values())
    gold_sizes = Counter(len(q["gold_ids"]) for q in qs)
    dep_lines = "\n".join(
        f"| `{n}` | {e['kind']} | `{', '.join(e['src_dirs'])}` | {', '.join(sorted(e['deps'])) or '-'} | "
        f"{'`' + s['readme_of'][n] + '`' if n in s['readme_of'] else '-'} | {' / '.join(s['forms'][n])} |"
        for n, e in sorted(ents.items()))
    left = "\n".join(f"  - `{p}`: {why}" for p, why in s["left_out"])
    rows = "\n".join(f"| {t} ({v['n']}) | {v['r5']:.3f} | {v['all5']:.3f} | {v['r10']:.3f} | {v['mrr']:.3f} |"
                     for t, v in m.items())
    best = "\n".join(f"| {t} | {v['best5']:.3f} | {v['bestall5']:.3f} |" for t, v in m.items())
    d_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPS_PHRASINGS))
    r_ph = "\n".join(f"  {i}. `{p}`" for i, p in enumerate(DEPENDENTS_PHRASINGS))
    return f"""# {SET_NAME}: an SRE dependency-retrieval set from Bank of Anthos

Built by `make_set.py` (standard library + PyYAML) from one public Apache-2.0 repository. {s['passages']} passages,
{len(qs)} questions, {len(ents)} catalog entities. The script is deterministic: rerun it on the same snapshot and
every file here comes out byte-identical (`python3 make_set.py <git dir of the snapshot> [out dir]`).

## Source
| repo | commit | commit date | license |
|---|---|---|---|
| [{REPO}](https://github.com/{REPO}) | `{s['commit']}` | {s['date']} | Apache-2.0 (`LICENSES/{SHORT}-LICENSE`, verbatim) |

Why this product: the brief's candidates were checked first. Bank of Anthos has one README per deployed service
(9 services, each with `src/**/<service>/README.md`), Kubernetes manifests whose env vars (`*_API_ADDR`,
`ACCOUNTS_DB_URI`, `SPRING_DATASOURCE_URL`, `FRONTEND_ADDR`) name other services, and a docs/ and extras/ tree
that serves as distractors. FudanSELab/train-ticket has ~40 services but almost no per-service READMEs; Sock Shop
keeps its service READMEs in separate repositories; instana/robot-shop has no per-service READMEs; dotnet/eShop
wires its services in C# (Aspire AppHost), not in a machine-readable manifest.

## Files
- `corpus.jsonl`: `{{"id","title","text"}}`, one whole Markdown document per passage.
- `questions.jsonl`: `{{"id","question","answer": null,"gold_ids","type"}}`.
- `catalog/catalog-info.yaml`: multi-document Backstage catalog (`backstage.io/v1alpha1`), names only.
- `LICENSES/{SHORT}-LICENSE`: upstream LICENSE.
- `make_set.py`: builds all of the above and this README.

## Passages ({s['passages']}, corpus.jsonl {s['corpus_bytes']:,} bytes)
- Every `*.md` file in the snapshot's HEAD tree, except the ones listed below. id = `{SHORT}/<path in repo>`.
- Text = the file body verbatim after removing a leading YAML front-matter block (`---` ... `---`), if any.
- Title = the text of the first ATX heading (`#`..`######`) outside fenced code and HTML comments, with closing
  hashes, links/images (kept as their text), inline HTML, code spans and bold/emphasis markers removed and
  whitespace collapsed; if a file has no heading, its file name without extension. No title was set by hand.
- Left out ({len(s['left_out'])}):
{left}

## Catalog ({len(ents)} entities, {nedges} dependsOn edges)
Derived mechanically from `kubernetes-manifests/*.yaml` (the default deployment; the variants under `extras/` and
`iac/` are not used):
1. Each Deployment becomes a `Component` (`spec.type: service`), each StatefulSet a `Resource`
   (`spec.type: database`), named as the manifest names the workload. `spec.system: {SYSTEM}`,
   Components get `spec.lifecycle: production`. No `metadata.title`, no owner: the only CODEOWNERS entry is a
   repository-wide default (`*`), not per folder. (The manifests carry a `team` label, e.g. `team: ledger`; it was
   not used.)
2. A workload's environment = its containers' `env` values (literal `value`, or `configMapKeyRef` resolved against
   the ConfigMaps in the same manifests) plus every key of each ConfigMap in `envFrom`.
3. For each variable, the host part of its value is parsed (`host:port`, `scheme://[user@]host[:port]/...`,
   `jdbc:postgresql://host:port/...`). If that host is the name of a Kubernetes Service whose selector matches
   exactly one workload's pod labels, and that workload is not the workload itself, it is a candidate dependency.
4. A candidate is kept only if the variable's name occurs (as a whole word) in the service's own source code: the
   folder that builds the workload's image according to the `skaffold.yaml` build artifacts (`context`, or
   `context/jib.project` for Jib builds), excluding `*.md`, `skaffold.yaml` and anything under `test/`, `tests/` or
   `k8s/`. This drops variables that a shared ConfigMap (`service-api-config`, loaded whole by `envFrom`) hands to a
   service that never reads them. Without this filter there would be {s['unfiltered_edges']} edges instead of
   {nedges} (ledgerwriter receives all five `*_API_ADDR` but reads only `BALANCES_API_ADDR`).
5. The README of an entity is `<source folder>/README.md` when that passage exists.

| entity | kind | source folder | dependsOn | README passage | name forms used in questions |
|---|---|---|---|---|---|
{dep_lines}

## Questions ({len(qs)}: {', '.join(f'{t} {c}' for t, c in sorted(counts.items()))})
Written rules, no question picked or edited by hand; phrasings were written before any retrieval run.
- `deps2docs`: every entity with at least one dependency that has a README passage. Gold = the README passages of
  its dependencies (dependencies without a README would be ignored; here all have one).
- `dependents2docs`: every entity that at least one entity depends on, where such a dependent has a README. Gold =
  the README passages of its dependents.
- Within each type, entities are sorted by name; the i-th question uses phrasing `i mod 4` and name form `i mod 3`.
  Name forms: (0) the catalog name as is; (1) "the <name> service" ("the <name> database" for a Resource; just
  "the <name>" when the name already ends with that noun); (2) a spaced, capitalised form: the name split at `-`/`_`,
  each part split into the fewest words of at least 3 letters that occur in the corpus text (ties: the split whose
  rarest word is most frequent), words of 1-2 letters upper-cased, others capitalised (if that equals the name,
  form 1 is used). Names are written exactly as the form gives them, also at the start of a
  sentence; only a leading \"the\" is capitalised.
- deps2docs phrasings:
{d_ph}
- dependents2docs phrasings:
{r_ph}
- No alert2runbook questions: `extras/prometheus/*/rules.yaml` has alert rules with summary/description, but no
  runbook links and no runbook documents exist in the repository.

Checks (asserted by the script): every gold id is in the corpus; passage ids are unique; no `dependsOn` ref is
dangling. Questions containing a gold passage's title verbatim (case-insensitive): {len(s['title_hits'])}{(' (' + ', '.join(s['title_hits']) + ')') if s['title_hits'] else ''}.

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
- Small: {len(qs)} dependency questions from a 9-workload product; one question moves a type's mean by 1/7 or 1/8.
- The dependency graph is the default `kubernetes-manifests/` deployment. Other variants in the repository
  (Cloud SQL in `extras/cloudsql`, the `ledgermonolith`) wire things differently; their documents stay in the
  corpus as distractors (the ledgermonolith README also describes ledger services).
- The top-level README's service table and `docs/` mention every service, so they are strong distractors for
  every question; only the per-service READMEs are gold.
- No gold set is larger than 5, so a perfect retriever reaches R@5 = 1 on both types.
- Name form 2 relies on corpus vocabulary; the forms actually used are listed in the catalog table above.
"""


if __name__ == "__main__":
    main()
