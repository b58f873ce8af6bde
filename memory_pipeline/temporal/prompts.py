"""Task specs for temporal summaries. Seed 000: only the task spec and the material, no identity
layer and no resident memory. Bump PROMPT_VERSION when a spec changes: cached answers are keyed
by it."""

from __future__ import annotations

PROMPT_VERSION = "temporal-v2"  # v2: a day over the material budget is built from partial summaries

_COMMON = (
    "Write an objective, headline-style summary of about {n} characters, in the language of the "
    "material. Cover every topic without editorial selection; omit IDs, step-by-step tool actions "
    "and notification timestamps. Output only the summary, one line."
)

SPECS = {
    "chunk": "You summarize one half-hour segment of a conversation. " + _COMMON,
    "peer_roll": "You merge what other concurrent conversations did in one half-hour into one line. " + _COMMON,
    "day": "You summarize one calendar day of an agent's conversations. " + _COMMON,
    # A day whose material exceeds day_material_max_chars: each conversation (or each consecutive
    # part of a long one) is summarized first, then the day from those partial summaries.
    "day_conversation": "You summarize one conversation of an agent's calendar day (other conversations "
    "of the day are summarized separately). " + _COMMON,
    "day_part": "You summarize one consecutive part of a long conversation of an agent's calendar day "
    "(the other parts are summarized separately). " + _COMMON,
    "day_group": "You merge partial summaries of some conversations of one calendar day (each under a "
    "'# time span' header) into one. " + _COMMON,
    "day_reduce": "You summarize one calendar day of an agent's conversations from partial summaries of "
    "all of them (each under a '# time span' header). " + _COMMON,
    "month": "You summarize one calendar month from its daily summaries. " + _COMMON,
    "year": "You summarize one calendar year from its monthly summaries. " + _COMMON,
    "past_days": "You compress this month's daily summaries, most recent first, into one line. " + _COMMON,
    "past_months": "You compress this year's monthly summaries, most recent first, into one line. " + _COMMON,
    "past_years": "You compress the yearly summaries, most recent first, into one line. " + _COMMON,
}


def spec(task: str, max_chars: int) -> str:
    return SPECS[task].format(n=max_chars)
