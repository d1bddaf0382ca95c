"""`graphrag-pipeline serve`: the query module over HTTP for agents and people on other hosts.

One open index answers every request (``query.open_index``: thread-safe, and it moves to a newly published version
between questions, so the server needs no restart after a rebuild). Callers authenticate with an API key that the
configuration maps to access groups (``auth``); every endpoint answers with the access rule of ``query.access``.
"""
