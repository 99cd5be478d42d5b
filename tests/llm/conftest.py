"""Fixtures: a real model server on 127.0.0.1 (see servers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.servers import ModelServer


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server
