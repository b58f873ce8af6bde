"""The config file's sections: each domain reads its own ``memory.<section>``, and a key that no
domain reads (a misspelt section, a stray top-level key) is refused by every domain's load, naming
it, rather than leaving the settings meant there at their defaults without a word."""

from pathlib import Path

import pytest

from memory_pipeline import domains
from memory_pipeline.analyst import config as analyst_config
from memory_pipeline.conversation import config as conversation_config
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.objects import config as objects_config
from memory_pipeline.sleep import config as sleep_config
from memory_pipeline.temporal import config as temporal_config
from memory_pipeline.tower import config as tower_config

LOADERS = [temporal_config, tower_config, sleep_config, conversation_config, objects_config, analyst_config]
PRODUCTION = Path(__file__).resolve().parents[2] / "deploy" / "production" / "memory.yaml"


def test_the_declared_sections_are_the_ones_the_domains_read():
    assert sorted(m.SECTION for m in LOADERS) == sorted(domains.CONFIG_SECTIONS)


@pytest.mark.parametrize("module", LOADERS, ids=lambda m: m.SECTION)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "memory:\n  temporal_sumary:\n    chunk_max_chars: 5\n",
            "unknown section(s) memory.temporal_sumary (the sections: analyst, conversation, objects, sleep,"
            " temporal_summary, tower)",
        ),
        ("memroy:\n  temporal_summary:\n    enabled: false\n", "unknown top-level key(s) memroy"),
        ("memory:\n  tower: {}\nsleep:\n  enabled: false\n", "unknown top-level key(s) sleep"),
    ],
)
def test_a_key_no_domain_reads_is_refused_by_every_domains_load(tmp_path, module, body, message):
    path = tmp_path / "memory.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        module.load(path)
    assert str(raised.value).startswith(f"{path}: {message}"), raised.value


@pytest.mark.parametrize("module", LOADERS, ids=lambda m: m.SECTION)
def test_every_section_together_loads(tmp_path, module):
    path = tmp_path / "memory.yaml"
    path.write_text("memory:\n" + "".join(f"  {s}: {{}}\n" for s in domains.CONFIG_SECTIONS), encoding="utf-8")
    assert module.load(path) == module.load(None)
    module.load(PRODUCTION)  # the production file names only sections the domains read


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("chars_per_token", ".nan", "chars_per_token: must be a positive finite number, got nan"),
        ("chars_per_token", ".inf", "chars_per_token: must be a positive finite number, got inf"),
        ("retry_backoff_seconds", ".nan", "retry_backoff_seconds: must be a finite number, not negative, got nan"),
    ],
)
def test_objects_floats_are_finite(tmp_path, key, value, said):
    """YAML's .nan passed every comparison (every batch then crashed on it); .inf made every token
    estimate 0, so compaction never ran."""
    path = tmp_path / "memory.yaml"
    path.write_text(f"memory:\n  objects:\n    {key}: {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"memory.objects.{said}"):
        objects_config.load(path)
