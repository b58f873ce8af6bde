"""The example config the repository ships (deploy/production/memory.yaml) is one every domain
reads: each section it holds is valid, and its objects section states the defaults."""

from __future__ import annotations

from pathlib import Path

from memory_pipeline import domains
from memory_pipeline.objects import config as objects_config

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "production" / "memory.yaml"


def test_the_shipped_example_config_is_valid_for_every_section(monkeypatch):
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(EXAMPLE))
    domains.check_config()  # raises ConfigError naming the first key wrong
    assert objects_config.load(EXAMPLE) == objects_config.ObjectsConfig()
