"""The repository's top conftest: the code blocks of README.md and docs/*.md are
collected as tests (Sybil; how they run: tests/docs/sybil_docs.py). The suite's
own fixtures are in tests/conftest.py."""

from __future__ import annotations

import pytest

from tests.docs.sybil_docs import DOCS, mark_documents

pytest_collect_file = DOCS.pytest()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_documents(items)
