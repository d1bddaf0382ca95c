"""The project's own sample (``data/corpus`` + ``data/catalog``) as an eval set, for the questions only a catalog with
owners and runbook links can ask: ``python evalsets/sre-sample/make_set.py`` (then
``python evalsets/context_questions.py evalsets/sre-sample``). Deterministic.

- ``corpus.jsonl``: every file under ``data/corpus`` but the LICENSE files, id = its path there; the title is the
  front matter's ``title``, else the first ``# `` heading, else the file name; the text is the file without its
  front matter (what the folder source indexes).
- ``catalog/catalog-info.yaml``: ``data/catalog/catalog-info.yaml`` as it is (its owners, teams and runbook links are
  illustrative: ``data/catalog/README.md``).
- ``LICENSES/``: the sample's LICENSE files.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)


def passage(path: Path, corpus: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    title = ""
    if match := FRONT_MATTER.match(text):
        meta = yaml.safe_load(match.group(1)) or {}
        title = str(meta.get("title") or "") if isinstance(meta, dict) else ""
        text = text[match.end():]
    if not title:
        title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    return {"id": path.relative_to(corpus).as_posix(), "title": title, "text": text}


def main() -> None:
    corpus = ROOT / "data" / "corpus"
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "LICENSE")
    (HERE / "corpus.jsonl").write_text("".join(json.dumps(passage(p, corpus)) + "\n" for p in files),
                                       encoding="utf-8")
    (HERE / "catalog").mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "data" / "catalog" / "catalog-info.yaml", HERE / "catalog" / "catalog-info.yaml")
    (HERE / "LICENSES").mkdir(exist_ok=True)
    for license_file in sorted(corpus.rglob("LICENSE")):
        shutil.copyfile(license_file, HERE / "LICENSES" / f"{license_file.parent.name}-LICENSE")
    shutil.copyfile(ROOT / "data" / "catalog" / "LICENSE", HERE / "LICENSES" / "catalog-LICENSE")
    questions = HERE / "questions.jsonl"
    if not questions.exists():
        questions.write_text("", encoding="utf-8")


if __name__ == "__main__":
    main()
