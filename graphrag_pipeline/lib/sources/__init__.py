"""Reading configured sources into ``Document`` records, one module per source kind.

* ``folder``: Markdown, text and HTML files under a directory, front matter as metadata (``folder``, ``html_text``).
* ``eval_set``: a benchmark folder's ``corpus.jsonl`` passages and precomputed ``extraction.jsonl`` (``eval_set``).
* ``confluence``: pages of Confluence spaces over the Cloud or Data Center REST API, read incrementally
  (``confluence``).
* ``catalog``: service-catalog YAML and Backstage ``catalog-info.yaml`` entities with their exact typed facts
  (``catalog``; its ``extract_with_catalogs`` gives catalog chunks those facts at extraction).

Every kind has a reader (the ``SourceReader`` protocol in ``reader``): a cheap change scan for sensors, a read that
returns a ``SourceScan`` and a default poll interval. ``registry`` maps each kind to its reader; the ingest stage,
change detection and the sensors' poll intervals go through it and never name a kind. A new kind is its module, its
line in ``registry``, its configuration model in the ``SourceConfig`` union (``lib.config``) and its sensor line in
``defs/automation/sensors.py``.

Readers never crash on one bad input: it becomes a ``Quarantined`` record with the reason, and the read goes on. A
document's id is its source name plus an id that survives edits (a path, a passage, page or entity id), so an edited
item keeps its id and is "changed", not new.

This package's ``__init__`` imports nothing, so that importing one reader does not import them all.
"""
