"""The chaos suite's short form: an endpoint with a network for the daemon's workers (moto: tests/conftest.py)."""

from __future__ import annotations

import logging

import pytest

from wire_lab.chaos.harness import Moto


@pytest.fixture(scope="session")
def chaos_moto(moto_endpoint) -> Moto:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    return Moto.attach(moto_endpoint)
