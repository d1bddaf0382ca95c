"""Prompt templates: text files under ``graphrag_pipeline/prompts`` with ``{name}`` placeholders.

A template declares the placeholders its caller fills; the file is checked against that set when it is loaded, so a
typo in a prompt fails the run at start-up instead of producing a prompt with a hole in it. Literal braces (JSON
examples) are written ``{{`` and ``}}``. A template's ``version`` is a hash of its text and part of every cache key,
so editing a prompt re-runs exactly the calls that used it.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from graphrag_pipeline.lib.core.ids import content_hash

VERSION_CHARS = 12


class PromptTemplate:
    def __init__(self, name: str, text: str, placeholders: Iterable[str]):
        self.name = name
        self.text = text
        self.placeholders = frozenset(placeholders)
        found = template_placeholders(text, name)
        missing, unexpected = self.placeholders - found, found - self.placeholders
        if missing or unexpected:
            problems = []
            if missing:
                problems.append(f"missing placeholders {sorted(missing)}")
            if unexpected:
                problems.append(f"unexpected placeholders {sorted(unexpected)} (write literal braces as {{{{ }}}})")
            raise ValueError(f"prompt template {name!r}: {'; '.join(problems)}")
        self.version = content_hash(text)[:VERSION_CHARS]

    @classmethod
    def load(cls, name: str, placeholders: Iterable[str], directory: str | Path | None = None) -> "PromptTemplate":
        """``<name>.txt`` from ``directory``, else from the packaged prompts."""
        if directory is not None:
            text = (Path(directory) / f"{name}.txt").read_text(encoding="utf-8")
        else:
            text = resources.files("graphrag_pipeline").joinpath(f"prompts/{name}.txt").read_text(encoding="utf-8")
        return cls(name, text, placeholders)

    def format(self, **values: object) -> str:
        given = set(values)
        if given != self.placeholders:
            raise ValueError(
                f"prompt template {self.name!r} needs {sorted(self.placeholders)}; "
                f"missing {sorted(self.placeholders - given)}, unexpected {sorted(given - self.placeholders)}"
            )
        return self.text.format(**values)  # substituted values are not re-parsed: braces in them are safe

    def __repr__(self) -> str:
        return f"PromptTemplate({self.name!r}, version={self.version!r})"


@functools.lru_cache(maxsize=None)
def packaged_template(name: str, placeholders: frozenset[str]) -> PromptTemplate:
    """A packaged template, read and validated once per process."""
    return PromptTemplate.load(name, placeholders)


def template_placeholders(text: str, name: str = "") -> frozenset[str]:
    """The ``{name}`` fields of a template; positional, attribute, index, format-spec and conversion fields and
    unbalanced braces are errors (a prompt only ever substitutes whole strings)."""
    found: set[str] = set()
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ValueError(f"prompt template {name!r}: {error} (write literal braces as {{{{ }}}})") from error
    for _, field_name, format_spec, conversion in fields:
        if field_name is None:
            continue
        if not field_name.isidentifier() or format_spec or conversion:
            raise ValueError(
                f"prompt template {name!r}: placeholder {{{field_name}}} must be a plain name such as {{text}}"
                " (write literal braces as {{ }})"
            )
        found.add(field_name)
    return frozenset(found)
