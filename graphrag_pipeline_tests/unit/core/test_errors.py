"""One root for the pipeline's errors: every error class it raises on purpose is a ``GraphRAGError`` of a kind, so
a caller catches them all and the HTTP API and the CLI map them by kind."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import get_args

import graphrag_pipeline
from graphrag_pipeline.lib.core.errors import ErrorKind, GraphRAGError
from graphrag_pipeline.server.app import STATUS_OF_KIND

# the HTTP API's own vehicle for a status and message, not an error of the pipeline
NOT_PIPELINE_ERRORS = {"graphrag_pipeline.server.app.ApiError"}


def pipeline_error_classes() -> list[type[BaseException]]:
    found = []
    for module_info in pkgutil.walk_packages(graphrag_pipeline.__path__, "graphrag_pipeline."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__
                    and not name.startswith("_") and f"{module.__name__}.{name}" not in NOT_PIPELINE_ERRORS):
                found.append(value)
    return found


def test_every_public_error_class_is_a_graphrag_error_of_a_known_kind():
    classes = pipeline_error_classes()
    assert len(classes) >= 15
    assert [c.__qualname__ for c in classes if not issubclass(c, GraphRAGError)] == []
    assert {c.kind for c in classes} <= set(get_args(ErrorKind))


def test_every_kind_has_an_http_status_and_the_builtin_bases_stay():
    assert set(STATUS_OF_KIND) == set(get_args(ErrorKind))
    from graphrag_pipeline.lib.core.config import ConfigError
    from graphrag_pipeline.lib.stores.sqlite_files import DamagedStoreError
    from graphrag_pipeline.query import IndexNotFoundError

    assert issubclass(ConfigError, ValueError) and issubclass(IndexNotFoundError, FileNotFoundError)
    assert DamagedStoreError.kind == "damaged" and STATUS_OF_KIND["damaged"] == 503
