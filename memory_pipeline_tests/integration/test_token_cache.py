"""The memory server's bearer-token check on a SQLite file keeps a token's answer until the next
commit to the file: repeated requests do not read the store, and a revocation made by another
process (`memory-pipeline tokens revoke`) is seen from the next request on. On PostgreSQL every
request reads the store."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_pipeline import domains
from memory_pipeline.access import tokens
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.server.auth import StoreTokenVerifier

CLI = str(Path(sys.executable).parent / "memory-pipeline")


def _counting(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = tokens.verify
    monkeypatch.setattr(tokens, "verify", lambda store, token: reads.append(token) or real(store, token))
    return reads


def test_a_kept_answer_lasts_until_another_process_revokes_the_token(tmp_path, monkeypatch):
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    _, token = tokens.create(lite, ["wa"], name="bot")
    verifier = StoreTokenVerifier(lite)
    reads = _counting(monkeypatch)
    first = asyncio.run(verifier.verify_token(token))
    assert first.client_id == "bot" and first.claims == {"worlds": ["wa"]}
    for _ in range(5):
        assert asyncio.run(verifier.verify_token(token)).client_id == "bot"
    assert asyncio.run(verifier.verify_token("mp_unknown")) is None
    assert asyncio.run(verifier.verify_token("mp_unknown")) is None
    assert reads == [token, "mp_unknown"]  # one store read per token while nothing was committed
    env = os.environ | {"MEMORY_DATABASE_URL": lite.url}
    done = subprocess.run([CLI, "tokens", "revoke", "bot"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert asyncio.run(verifier.verify_token(token)) is None
    assert reads[-1] == token


def test_on_postgresql_every_request_reads_the_store(store, monkeypatch):
    _, token = tokens.create(store, ["wa"], name="bot")
    verifier = StoreTokenVerifier(store)
    reads = _counting(monkeypatch)
    for _ in range(3):
        assert asyncio.run(verifier.verify_token(token)).client_id == "bot"
    assert reads == [token] * 3
    tokens.revoke(store, "bot")
    assert asyncio.run(verifier.verify_token(token)) is None


@pytest.mark.parametrize("junk", [None, 5, "", "x" * 300])
def test_malformed_tokens_are_refused(tmp_path, junk):
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    assert asyncio.run(StoreTokenVerifier(lite).verify_token(junk)) is None
