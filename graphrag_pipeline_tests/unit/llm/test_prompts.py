"""Prompt templates: placeholders checked when a template is loaded and when it is filled."""

from __future__ import annotations

import pytest

from graphrag_pipeline.lib.llm.prompts import PromptTemplate, packaged_template

PACKAGED = {
    "extract_graph": {"entity_types", "relationship_types", "title", "text"},
    "glean_graph": {"entity_types", "relationship_types", "title", "text", "previous"},
    "repair_json": {"schema", "error", "raw"},
    "summarize_descriptions": {"name", "descriptions"},
    "community_report": {"title_hint", "entities", "relationships"},
}


@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_templates_declare_exactly_their_placeholders(name):
    template = packaged_template(name, frozenset(PACKAGED[name]))
    assert template.placeholders == PACKAGED[name] and len(template.version) == 12


def test_missing_and_unexpected_placeholders_are_named():
    with pytest.raises(ValueError, match=r"missing placeholders \['title'\]"):
        PromptTemplate("t", "Text: {text}", {"text", "title"})
    with pytest.raises(ValueError, match=r"unexpected placeholders \['txet'\]"):
        PromptTemplate("t", "Text: {txet}", {"text"})


@pytest.mark.parametrize("text", ["{}", "{0}", "{text.upper}", "{text[0]}", "{text!r}", "{text:>10}", "{ text }"])
def test_placeholders_must_be_plain_names(text):
    with pytest.raises(ValueError, match="plain name"):
        PromptTemplate("t", text, {"text"})


def test_unbalanced_braces_are_rejected():
    with pytest.raises(ValueError, match="literal braces"):
        PromptTemplate("t", 'Answer {"a": 1} about {text}', {"text"})


def test_escaped_braces_are_literal_and_values_are_not_reparsed():
    template = PromptTemplate("t", 'Answer {{"a": 1}} about {text}', {"text"})
    assert template.format(text="{b} and {{c}}") == 'Answer {"a": 1} about {b} and {{c}}'


def test_format_needs_exactly_the_declared_values():
    template = PromptTemplate("t", "{a} {b}", {"a", "b"})
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        template.format(a="1")
    with pytest.raises(ValueError, match=r"unexpected \['c'\]"):
        template.format(a="1", b="2", c="3")


def test_version_is_a_hash_of_the_text():
    assert PromptTemplate("x", "{a}!", {"a"}).version == PromptTemplate("y", "{a}!", {"a"}).version
    assert PromptTemplate("x", "{a}!", {"a"}).version != PromptTemplate("x", "{a}?", {"a"}).version


def test_templates_load_from_a_directory(tmp_path):
    (tmp_path / "custom.txt").write_text("Custom {text}", encoding="utf-8")
    assert PromptTemplate.load("custom", {"text"}, tmp_path).format(text="x") == "Custom x"
