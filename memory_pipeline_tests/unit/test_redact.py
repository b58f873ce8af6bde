"""Secrets never reach an error text: lib.text.redact."""

from memory_pipeline.lib.text import redact


def test_redact_blanks_secrets_and_url_passwords():
    text = "key sk-abcdef in postgresql://memory:hunter2@db.internal:5432/m and redis://:pw9@cache:6379/0"
    assert redact(text, ["sk-abcdef", None, "k"]) == (
        "key *** in postgresql://memory:***@db.internal:5432/m and redis://:***@cache:6379/0"
    )
    assert redact("a key of k", ["k"]) == "a key of k"  # too short to be searched for
