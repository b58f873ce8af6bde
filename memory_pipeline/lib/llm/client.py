"""The one way to call a model: litellm (or the offline model), retries, a response cache, and a
ledger row per call (asset, partition, model, tokens, latency, outcome).

Batch mode (set-based range runs): ``prefetch`` reads the cached answers of many requests in one
query, and while ``buffering`` the ledger rows and new cache rows are kept in the client and
written by ``write_pending(conn)`` in the caller's transaction (with the rows they produced), then
dropped by ``clear_pending()`` once that transaction committed. A transaction that failed keeps
them, so the retry writes them again: no call loses its ledger row. Only the offline model's rows
are buffered: a provider's paid call is recorded at once (see ``_write_now``).

Output length: a request may ask for ``max_tokens`` output tokens; the result's ``finish_reason``
is ``length`` when the answer stopped there (``truncated``), and ``output_limit`` says how many a
call may ask for at most (the model's max output and the context left after the prompt). Token
counts are the provider's usage when it reports one, otherwise estimates; each ledger row says
which (``tokens_source``), so estimates are never taken for billing.

Circuit breaker: the clients of one process share a breaker per provider endpoint (model and
api_base). After ``breaker_failures`` consecutive calls failed after their retries (429, 5xx,
timeouts, connection errors, a key refused, a model unknown), every further call is refused at once, without a request, with one
line naming the provider and its last error (LLMProviderDown, ledger outcome ``breaker_open``):
the run stops instead of paying each call's retries across a whole range. After
``breaker_cooldown_seconds`` one call may try again; a success closes the breaker."""

from __future__ import annotations

import copy
import email.utils
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, select
from sqlalchemy.exc import SQLAlchemyError

from memory_pipeline.lib import settings
from memory_pipeline.lib.kinds import LedgerOutcome, TokensSource
from memory_pipeline.lib.llm import offline, offline_tools
from memory_pipeline.lib.store import Store, insert_rows, upsert
from memory_pipeline.lib.store.retry import StoreUnavailable, retry_transient
from memory_pipeline.lib.store.tables import llm_cache, llm_ledger
from memory_pipeline.lib.text import hard_cut, redact, short_hash

log = logging.getLogger(__name__)


FINISH_LENGTH = "length"  # the OpenAI finish reason litellm reports for a truncated answer
FINISH_FILTERED = "content_filter"  # the provider's filter cut or withheld the answer
PAID_WRITE_ATTEMPTS = 5  # a paid answer's ledger and cache rows: backoff 0.5, 1, 2, 4 s


class LLMHardFailure(RuntimeError):
    """The model could not answer after retries (or the error is not retryable). ``provider_fault``:
    the provider or its configuration failed (counted by the breaker), not this request."""

    def __init__(self, message: str, *, provider_fault: bool = False):
        super().__init__(message)
        self.provider_fault = provider_fault


class LLMProviderDown(RuntimeError):
    """The provider's breaker is open: the call was refused without a request. Not an
    LLMHardFailure on purpose: callers record those per world and go on, while this one stops the
    run; its text names the provider and its last error, and ``stopping`` adds what the caller
    leaves for the next run (each domain says it in its own terms)."""

    def stopping(self, left: str) -> str:
        """The run's one line: the provider's state, then what is left (``left``) for the next run."""
        return f"{self}; stopping: {left}"


@dataclass
class _Breaker:
    """Consecutive failed calls of one provider endpoint, shared by every client of the process."""

    failures: int = 0
    last_error: str = ""
    opened_at: float | None = None  # time.monotonic() it opened (or let its last trial call through)
    lock: threading.Lock = field(default_factory=threading.Lock)


_BREAKERS: dict[tuple[str, str | None], _Breaker] = {}
_BREAKERS_LOCK = threading.Lock()


def _breaker(model: str, api_base: str | None) -> _Breaker:
    with _BREAKERS_LOCK:
        return _BREAKERS.setdefault((model, api_base), _Breaker())


def forget_breakers() -> None:
    """Every breaker closed, as in a new process (for tests: a new fake server may reuse a port)."""
    with _BREAKERS_LOCK:
        _BREAKERS.clear()


@dataclass(frozen=True)
class LLMRequest:
    task: str
    system: str
    user: str
    prompt_version: str
    max_chars: int | None = None  # prompt target; the answer is hard-cut at ceil(1.5 x)
    world_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    # Several user messages (and tool-call turns) after the system prompt; when set, ``user`` is
    # not sent (it may carry a label for the ledger). Each item is an OpenAI chat message.
    conversation: tuple[dict[str, Any], ...] | None = None
    # The offline model's answer for a task that needs structured output (a tool call): the
    # calling domain's documented deterministic rules, used only when the model is offline.
    offline_answer: Callable[[LLMRequest], tuple[str, list[dict[str, Any]]]] | None = field(
        default=None, compare=False, repr=False
    )
    # Output tokens this call may produce (None: the provider's default). An answer that reaches
    # it stops there with finish_reason "length".
    max_tokens: int | None = None
    # time.monotonic() by which the call must have ended (the caller's time limit): each attempt
    # waits at most the time left (and the client's timeout), and no attempt starts past it.
    deadline: float | None = field(default=None, compare=False)

    def messages(self) -> list[dict[str, Any]]:
        if self.conversation is not None:
            return [{"role": "system", "content": self.system}, *self.conversation]
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass
class LLMResult:
    text: str
    cached: bool
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None  # stop, tool_calls, length (truncated), ...; None when cached
    tokens_source: TokensSource | None = None  # None when cached (no tokens spent)

    @property
    def truncated(self) -> bool:
        """The answer stopped at ``max_tokens`` (or the model's own output limit)."""
        return self.finish_reason == FINISH_LENGTH


@dataclass
class CallStats:
    calls: int = 0
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    failures: int = 0
    refused: int = 0  # by the open breaker, without a request
    # Answers the provider cut (finish_reason length): the caller got the text as cut. Never cached,
    # so a caller that writes one must say so (and not reuse what it wrote as if it were whole).
    truncated: int = 0

    def add(self, other: CallStats) -> None:
        """``other``'s counts added to these (a run's threads, each with a client of its own)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def ledger_rows(self) -> int:
        """Every call this client made, one ledger row each: answered (after its retries), served
        from the cache, failed, or refused by the open breaker."""
        return self.calls + self.cache_hits + self.failures + self.refused


class MalformedAnswer(ValueError):
    """HTTP 200 with a chat completion litellm read but that holds no answer (no choice, no
    message): the provider misbehaving, as a body that is no JSON is (retried, and counted by the
    breaker), not this request."""


def _is_retryable(exc: Exception) -> bool:
    import litellm

    retryable: tuple[type[Exception], ...] = (
        MalformedAnswer,
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.APIConnectionError,
        litellm.Timeout,
    )
    return isinstance(exc, retryable)


PROVIDER_TOKENS_MAX = 100_000_000  # a usage report beyond this (or negative) is no call's
RETRY_AFTER_MAX_SECONDS = 60.0  # a longer wait asked for is not waited (as OpenAI's own client)


def retry_after_seconds(exc: Exception) -> float | None:
    """The wait a refusal's Retry-After header asks for (seconds, or an HTTP date), or None."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
    except (AttributeError, TypeError):
        return None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (email.utils.parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
        except (TypeError, ValueError):
            return None
    return seconds if 0 < seconds <= RETRY_AFTER_MAX_SECONDS else None


def _is_provider_fault(exc: Exception) -> bool:
    """A failure of the provider or of its configuration, the same for every call (counted by the
    breaker): the retryable ones, a key refused (401, 403), a model or endpoint not found (404),
    a model naming no provider litellm knows. A request-specific refusal (400: context too long,
    content policy) is not: the next call may pass."""
    import litellm

    if _is_retryable(exc):
        return True
    configuration: tuple[type[Exception], ...] = (
        litellm.AuthenticationError,
        litellm.PermissionDeniedError,
        litellm.NotFoundError,
    )
    if isinstance(exc, configuration) or getattr(exc, "status_code", None) in (401, 403, 404):
        return True  # (litellm reports some providers' 403 as a bare APIError with its status)
    # litellm's own refusal of a model string naming no provider, raised before any request
    return "LLM Provider NOT provided" in str(exc)


def model_problem(model: str) -> str | None:
    """Why litellm cannot call ``model`` at all (it names no provider litellm knows), else None: said
    before a run, not as a failed call in each of its steps. The offline model is always callable."""
    if model == offline.NAME:
        return None
    import litellm

    litellm.suppress_debug_info = True  # its "Provider List" banner on stdout
    try:
        litellm.get_llm_provider(model)
    except Exception as exc:  # noqa: BLE001 - litellm raises BadRequestError, or a bare ValueError
        if "LLM Provider NOT provided" in str(exc):
            return "names no provider litellm knows (write it as provider/model, e.g. openai/gpt-4o-mini)"
        return " ".join(str(exc).split())[:300]
    return None


def configured_model() -> str:
    """MEMORY_LLM_MODEL, else the offline model; a model litellm cannot call is refused here
    (ConfigError, one line) before any run or command starts, as the eval refuses it: otherwise
    each call of each step failed on litellm's several-line text."""
    model = settings.env(settings.ENV_LLM_MODEL) or settings.OFFLINE_MODEL
    problem = model_problem(model)
    if problem:
        raise settings.ConfigError(f"{settings.ENV_LLM_MODEL} {model!r}: {problem}")
    return model


class LLMClient:
    def __init__(
        self,
        store: Store,
        model: str = offline.NAME,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
        backoff_seconds: float = 1.0,
        use_cache: bool = True,
        asset: str | None = None,
        partition: str | None = None,
        breaker_failures: int | None = None,
        breaker_cooldown_seconds: float | None = None,
    ):
        self.store = store
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.use_cache = use_cache
        self.asset = asset
        self.partition = partition
        self.stats = CallStats()
        # None: the environment's (MEMORY_LLM_BREAKER_FAILURES, MEMORY_LLM_BREAKER_COOLDOWN_SECONDS).
        self.breaker_failures = settings.llm_breaker_failures() if breaker_failures is None else breaker_failures
        self.breaker_cooldown_seconds = (
            settings.llm_breaker_cooldown_seconds() if breaker_cooldown_seconds is None else breaker_cooldown_seconds
        )
        self._breaker = _breaker(model, api_base)
        # Batch mode: cached answers read ahead (key -> response, None: known to be absent), and
        # ledger / cache rows waiting for the caller's transaction while ``buffering``.
        self.buffering = False
        self._known: dict[str, str | None] = {}
        self._pending_ledger: list[dict[str, Any]] = []
        self._pending_cache: dict[str, dict[str, Any]] = {}
        # A paid answer's rows could not be written (the store is down): no further provider request
        # until they are, so no more answers are paid that could be lost with the run.
        self._unwritten: Exception | None = None

    @classmethod
    def from_settings(cls, store: Store, asset: str | None = None, partition: str | None = None) -> LLMClient:
        """The client the environment configures (what the Dagster resource holds), for callers
        outside a run; its ledger rows still name ``asset``."""
        return cls(
            store,
            model=configured_model(),
            api_base=settings.env(settings.ENV_LLM_API_BASE),
            api_key=settings.env(settings.ENV_LLM_API_KEY),
            timeout_seconds=settings.llm_timeout_seconds(),
            max_retries=settings.llm_max_retries(),
            asset=asset,
            partition=partition,
        )

    def fork(self) -> LLMClient:
        """A client for another thread of the same run: the same endpoint, settings, ledger names
        and breaker (one per endpoint in the process, locked), with its own batch buffers, read-ahead
        and counts. A client is one thread's: ``buffering``, ``partition`` and the buffered rows
        belong to the batch it is in. The fork's ``stats`` are its own; add them back
        (``stats.add``) when its thread is done."""
        twin = copy.copy(self)
        twin.stats = CallStats()
        twin.buffering = False
        twin._known, twin._pending_ledger, twin._pending_cache = {}, [], {}
        return twin

    def adopt(self, fork: LLMClient) -> None:
        """``fork``'s buffered ledger and cache rows join this client's, to be written in its caller's
        transaction, and its counts are added to this client's (a world asked in another thread)."""
        self._pending_ledger.extend(fork._pending_ledger)
        self._pending_cache.update(fork._pending_cache)
        fork._pending_ledger, fork._pending_cache = [], {}
        self.stats.add(fork.stats)
        fork.stats = CallStats()

    @property
    def is_offline(self) -> bool:
        return self.model.startswith("offline/")

    def _cache_key(self, req: LLMRequest) -> str:
        parts: list[Any] = [self.model, req.prompt_version, req.messages(), req.tools, req.max_chars]
        if req.max_tokens is not None:  # only then: the keys of requests without it stay as they were
            parts.append(req.max_tokens)
        return short_hash(parts, length=64)

    def output_limit(self, req: LLMRequest) -> int | None:
        """The most output tokens a call of ``req`` may ask for: the model's max output (litellm's
        model info, when the model is known there) and its context window less the prompt
        (litellm's token count, an estimate), whichever is smaller; None when neither is known
        (the offline model has no limit)."""
        if self.is_offline:
            return None
        settings.offline_litellm()
        import litellm

        try:
            info = litellm.get_model_info(self.model)
        except Exception:  # noqa: BLE001 - a model litellm does not know: no known limit
            return None
        limits = []
        most = info.get("max_output_tokens")
        if most:
            limits.append(int(most))
        window = info.get("max_input_tokens")
        if window:
            limits.append(max(0, int(window) - self._estimate_prompt(req)))
        return min(limits) if limits else None

    def prefetch(self, reqs: list[LLMRequest], conn: Connection | None = None) -> int:
        """Read the cached answers of ``reqs`` in one query (batches of 1,000 keys); ``complete``
        then serves them, and knows the others are absent, without a query. Returns the hits."""
        if not self.use_cache:
            return 0
        keys = sorted({self._cache_key(r) for r in reqs if not r.tools} - set(self._known))
        if not keys:
            return 0
        found: dict[str, str] = {}

        def read(c: Connection) -> None:
            for i in range(0, len(keys), 1000):
                q = select(llm_cache.c.cache_key, llm_cache.c.response).where(
                    llm_cache.c.cache_key.in_(keys[i : i + 1000])
                )
                found.update({k: v for k, v in c.execute(q).all()})

        if conn is not None:
            read(conn)
        else:
            with self.store.connect() as c:
                read(c)
        for k in keys:
            self._known[k] = found.get(k)
        return len(found)

    def _cached(self, key: str) -> str | None:
        if key in self._known:
            return self._known[key]
        with self.store.connect() as conn:
            hit = conn.execute(select(llm_cache.c.response).where(llm_cache.c.cache_key == key)).first()
        return hit[0] if hit is not None else None

    def write_pending(self, conn: Connection) -> None:
        """Write the buffered ledger and cache rows in the caller's transaction (kept until
        ``clear_pending``: a transaction that rolled back writes them again on its retry)."""
        if self._pending_ledger:
            insert_rows(conn, llm_ledger, self._pending_ledger)
        if self._pending_cache:
            upsert(conn, llm_cache, list(self._pending_cache.values()), keys=["cache_key"])

    def clear_pending(self) -> None:
        self._pending_ledger = []
        self._pending_cache = {}

    @property
    def pending(self) -> int:
        return len(self._pending_ledger) + len(self._pending_cache)

    def complete(self, req: LLMRequest, *, force: bool = False) -> LLMResult:
        key = self._cache_key(req)
        if self.use_cache and not force and not req.tools:
            response = self._cached(key)
            if response is not None:
                self.stats.cache_hits += 1
                self._ledger(req, key, LedgerOutcome.CACHE_HIT, 0, 0, 0, 0, None)
                return LLMResult(response, cached=True)

        self._refuse_if_open(req, key)
        self._refuse_if_unrecorded(req)
        if not self.is_offline:
            # a process's first import of litellm takes seconds: not the provider's latency
            import litellm  # noqa: F401
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            timeout = self.timeout_seconds
            try:
                timeout = self._attempt_timeout(req)
                text, tin, tout, tool_calls, cost, finish, source = self._call(req, timeout)
                break
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised as hard failure
                no_key = self._no_key(exc)
                retry = attempts <= self.max_retries and not self.is_offline and _is_retryable(exc) and not no_key
                said = self._redacted(self._explained(exc, timeout, no_key))
                delay = self.backoff_seconds * (2 ** (attempts - 1)) * (1 + random.random() * 0.1)
                delay = max(delay, retry_after_seconds(exc) or 0.0)  # the wait the provider asked for
                if retry and req.deadline is not None and time.monotonic() + delay >= req.deadline:
                    retry = False  # the next attempt would start past the caller's deadline
                if retry:
                    log.warning(
                        "LLM %s attempt %s failed (%s) [%s]; retrying in %.2fs",
                        req.task,
                        attempts,
                        said,
                        self._where(req),
                        delay,
                    )
                    time.sleep(delay)
                    continue
                latency = int((time.monotonic() - started) * 1000)
                self.stats.failures += 1
                self._ledger(req, key, LedgerOutcome.ERROR, 0, 0, latency, attempts, f"{type(exc).__name__}: {said}")
                fault = not self.is_offline and _is_provider_fault(exc)  # the provider failing, not the request
                if fault:
                    self._failed(f"{type(exc).__name__}: {said}")
                # Not chained: the provider's exception (and any traceback printing it) may carry
                # the key; its type and redacted text are all that is kept.
                raise LLMHardFailure(  # one line: litellm's texts run over several
                    f"{self.model} failed for {req.task} after {attempts} attempt(s): {type(exc).__name__}: "
                    + " ".join(said.split()),
                    provider_fault=fault,
                ) from None
            except BaseException as exc:
                # Ctrl-C or SIGTERM (Dagster's interrupt) during the call: the request was sent and
                # may be billed, so it has its row too; the interrupt goes on as it came.
                if not self.is_offline:
                    latency = int((time.monotonic() - started) * 1000)
                    self.stats.failures += 1
                    why = f"interrupted during the call ({type(exc).__name__})"
                    self._ledger(req, key, LedgerOutcome.ERROR, 0, 0, latency, attempts, why)
                raise

        if req.max_chars:
            text = hard_cut(text, req.max_chars)
        latency = int((time.monotonic() - started) * 1000)
        self._succeeded()
        if finish == FINISH_FILTERED:
            # Paid for (its tokens in the ledger) but no answer to keep: what the filter left is no
            # summary, and written or cached it would stand for ever. A failure of this request
            # alone (the provider answered: not the breaker's), asked again by the next run.
            said = f"the provider's content filter cut or withheld the answer (finish_reason {finish})"
            self.stats.failures += 1
            self._ledger(req, key, LedgerOutcome.ERROR, tin, tout, latency, attempts, said, cost, finish, source)
            raise LLMHardFailure(f"{self.model} failed for {req.task} after {attempts} attempt(s): {said}")
        self.stats.calls += 1
        self.stats.tokens_in += tin
        self.stats.tokens_out += tout
        self._ledger(req, key, LedgerOutcome.OK, tin, tout, latency, attempts, None, cost, finish, source)
        if finish == FINISH_LENGTH:
            self.stats.truncated += 1
            log.warning(
                "%s: answer for %s cut at the output limit (finish_reason length, %s output tokens%s): %s %s%s",
                self.model,
                req.task,
                tout,
                f" of max_tokens {req.max_tokens}" if req.max_tokens else "",
                self.asset,
                self.partition or "(no partition)",
                f", world {req.world_id}" if req.world_id else "",
            )
        # A truncated answer (at the caller's max_tokens or the provider's own limit) is not kept:
        # a cached answer carries no finish reason, so no caller could tell it was cut and ask again.
        # Nor is an empty one (a provider's hiccup or filter): read back, it would stand for ever.
        keep = finish != FINISH_LENGTH and bool(text.strip())
        if self.use_cache and not req.tools and keep:
            row = {
                "cache_key": key,
                "model": self.model,
                "prompt_version": req.prompt_version,
                "response": text,
                "tokens_in": tin,
                "tokens_out": tout,
            }
            if self.buffering:
                self._known[key] = text  # the same prompt again in this batch is a cache hit
            if not self._write_now(lambda conn: upsert(conn, llm_cache, [row], keys=["cache_key"])):
                self._pending_cache[key] = row
        return LLMResult(
            text,
            cached=False,
            tokens_in=tin,
            tokens_out=tout,
            tool_calls=tool_calls,
            finish_reason=finish,
            tokens_source=source,
        )

    def _refuse_if_unrecorded(self, req: LLMRequest) -> None:
        """No provider request while an earlier paid answer waits to be written: write it first
        (the store may be back); a store still down stops the caller (StoreUnavailable, one line)."""
        if self._unwritten is None or self.is_offline:
            return
        try:
            with self.store.begin() as conn:
                self.write_pending(conn)
            self.clear_pending()
            self._unwritten = None
        except SQLAlchemyError as exc:
            self._unwritten = exc
            raise StoreUnavailable(f"LLM ledger (before the {req.task} call)", PAID_WRITE_ATTEMPTS + 1, exc) from None

    def _refuse_if_open(self, req: LLMRequest, key: str) -> None:
        """Refuse the call (no request) while the breaker is open; past the cooldown, one call at a
        time goes through to try the provider again (the others stay refused meanwhile)."""
        if self.is_offline or self.breaker_failures <= 0:
            return
        b = self._breaker
        with b.lock:
            if b.failures < self.breaker_failures:
                return
            now = time.monotonic()
            if b.opened_at is None or now - b.opened_at >= self.breaker_cooldown_seconds:
                b.opened_at = now  # this call is the trial; a failure keeps it open from now
                return
            message = self.breaker_message(b.last_error, b.failures)
        self.stats.refused += 1
        self._ledger(req, key, LedgerOutcome.BREAKER_OPEN, 0, 0, 0, 0, message)
        raise LLMProviderDown(message)

    def breaker_message(self, last_error: str, failures: int) -> str:
        where = self._redacted(self.api_base) if self.api_base else "its default endpoint"
        error = " ".join(last_error.split())  # one line, whatever the provider's text looked like
        return f"LLM provider {self.model} at {where} is failing: {error[:300]} ({failures} consecutive failures)"

    def _failed(self, error: str) -> None:
        b = self._breaker
        with b.lock:
            b.failures += 1
            b.last_error = error
            if self.breaker_failures > 0 and b.failures >= self.breaker_failures:
                b.opened_at = time.monotonic()
                opened = b.failures == self.breaker_failures
            else:
                opened = False
        if opened:  # info: the run's own stop line says it (the console shows WARNING and up: not twice)
            log.info(
                "%s; further calls are refused without a request for %g s",
                self.breaker_message(error, self.breaker_failures),
                self.breaker_cooldown_seconds,
            )

    def _succeeded(self) -> None:
        b = self._breaker
        if b.failures:
            with b.lock:
                b.failures, b.opened_at = 0, None

    def _redacted(self, text: str) -> str:
        """An error text as it may be stored, logged or raised: without the API key, the password
        of the api_base URL, or any other ``user:password@`` in a URL."""
        secrets = [self.api_key]
        if self.api_base:
            try:
                secrets.append(urlsplit(self.api_base).password)
            except ValueError:
                pass
        return redact(text, secrets)

    def _no_key(self, exc: Exception) -> bool:
        """No key was given and the provider's own variable is not set either: litellm reports it as
        an internal server error (retried, and its text names only the provider's variable)."""
        return self.api_key is None and "Missing credentials" in str(exc)

    def _explained(self, exc: Exception, timeout: float, no_key: bool) -> str:
        """The provider's text, with what it leaves out: the setting for a missing key, the endpoint
        of a connection that failed, the limit of a timeout."""
        import litellm

        text = str(exc)
        if no_key:
            return f"no API key: MEMORY_LLM_API_KEY is unset or empty ({text})"
        if isinstance(exc, litellm.Timeout):  # (a deadline passed before the call is no timeout of it)
            return f"{text} (after {timeout:g} s: MEMORY_LLM_TIMEOUT_SECONDS)"
        if "Connection error" in text:
            return f"{text} (endpoint {self.api_base or 'the provider default'})"
        # litellm reports an answer it cannot read (HTTP 200, a body that is no chat completion) as
        # an InternalServerError, the parser's message buried in its response objects' reprs
        answered = re.search(r"OpenAIException - (?:error - )?(.*?), Received response - <APIResponse \[(\d+)", text)
        if answered:
            return (
                f"malformed answer: HTTP {answered[2]} with a body that is no chat completion ({answered[1]}) "
                f"(endpoint {self.api_base or 'the provider default'})"
            )
        return text

    def _where(self, req: LLMRequest) -> str:
        """What the call was for, for a retry's log line: asset, partition, world."""
        parts = [self.asset or "no asset", self.partition or "no partition"]
        if req.world_id:
            parts.append(f"world {req.world_id}")
        return ", ".join(parts)

    def _attempt_timeout(self, req: LLMRequest) -> float:
        """The client's timeout, or less: the time left before the request's deadline."""
        if req.deadline is None:
            return self.timeout_seconds
        left = req.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the deadline of {req.task} passed before the call started")
        return min(self.timeout_seconds, left)

    def _call(
        self, req: LLMRequest, timeout: float
    ) -> tuple[str, int, int, list[dict[str, Any]], float | None, str | None, TokensSource]:
        """(text, tokens in, tokens out, tool calls, cost, finish reason, where the tokens come from).
        A tool call is {id, name, arguments (parsed; the text when it is not JSON), raw_arguments
        (the arguments string exactly as received)}."""
        if self.is_offline:
            return self._call_offline(req)

        settings.offline_litellm()
        import litellm  # heavy: imported only when a real model is configured

        litellm.suppress_debug_info = True  # no "Give Feedback" banners around errors on stdout

        kwargs: dict[str, Any] = dict(
            model=self.model,
            messages=req.messages(),
            timeout=timeout,
            num_retries=0,
        )
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if req.tools:
            kwargs["tools"] = req.tools
        if req.max_tokens is not None:
            kwargs["max_tokens"] = req.max_tokens
        resp = litellm.completion(**kwargs)
        try:
            choice = resp.choices[0]
            message = choice.message
            text = message.content or ""
            finish = getattr(choice, "finish_reason", None)
            usage = getattr(resp, "usage", None)
            tin = int(getattr(usage, "prompt_tokens", 0) or 0)
            tout = int(getattr(usage, "completion_tokens", 0) or 0)
        except (AttributeError, IndexError, TypeError) as exc:
            raise MalformedAnswer(
                f"malformed answer: HTTP 200 with a chat completion holding no answer ({exc}) "
                f"(endpoint {self.api_base or 'the provider default'})"
            ) from exc
        tool_calls = []
        for tc in getattr(message, "tool_calls", None) or []:
            raw = tc.function.arguments or "{}"
            try:
                arguments: Any = json.loads(raw)
            except ValueError:
                arguments = raw  # kept as text: the caller refuses the call by name, not the whole answer
            tool_calls.append({"id": tc.id, "name": tc.function.name, "arguments": arguments, "raw_arguments": raw})
        source = TokensSource.PROVIDER
        if not (0 <= tin <= PROVIDER_TOKENS_MAX and 0 <= tout <= PROVIDER_TOKENS_MAX):
            # A usage report no call can have (negative, or beyond any model's window): not billing
            # to add up in the ledger and `status`, so estimated as for an answer without usage.
            log.warning(
                "%s: usage report for %s ignored (prompt_tokens %s, completion_tokens %s): tokens estimated",
                self.model,
                req.task,
                tin,
                tout,
            )
            tin = tout = 0
        if tin == 0 and tout == 0:
            # No usage in the answer (litellm then reports zeros): estimated, and recorded as such.
            source = TokensSource.ESTIMATED
            tin = self._estimate_prompt(req)
            tout = offline.approx_tokens(text + (json.dumps(tool_calls, ensure_ascii=False) if tool_calls else ""))
        try:
            cost = litellm.completion_cost(completion_response=resp)
        except Exception:  # noqa: BLE001 - unknown models have no price
            cost = None
        return text, tin, tout, tool_calls, cost, str(finish) if finish else None, source

    def _estimate_prompt(self, req: LLMRequest) -> int:
        """The prompt's tokens as litellm counts them for this model (an estimate of the provider's)."""
        settings.offline_litellm()
        import litellm

        tools: Any = req.tools
        try:
            return int(litellm.token_counter(model=self.model, messages=req.messages(), tools=tools))
        except Exception:  # noqa: BLE001 - no tokenizer for this model: characters / 4
            return offline.approx_tokens(json.dumps(req.messages(), ensure_ascii=False))

    def _call_offline(
        self, req: LLMRequest
    ) -> tuple[str, int, int, list[dict[str, Any]], float | None, str | None, TokensSource]:
        """The offline model: its tokens are estimates (characters / 4). Like a provider it stops at
        ``max_tokens``: a longer answer is cut there with finish_reason "length", and its tool calls,
        which would be incomplete, are dropped."""
        if req.offline_answer is not None:
            text, calls = req.offline_answer(req)
            tin, tout = offline.approx_tokens(req.system + req.user), offline.approx_tokens(text)
        elif req.tools:
            text, calls = offline_tools.respond(req.task, req.messages(), req.tools)
            prompt = "".join(str(m.get("content") or "") for m in req.messages())
            tin, tout = offline.approx_tokens(prompt), offline.approx_tokens(text + json.dumps(calls))
        else:
            text, calls = offline.headline(req.user, req.max_chars or 200), []
            tin, tout = offline.approx_tokens(req.system + req.user), offline.approx_tokens(text)
        finish = "tool_calls" if calls else "stop"
        if req.max_tokens is not None and tout > req.max_tokens:
            text, calls, tout, finish = text[: req.max_tokens * 4], [], req.max_tokens, FINISH_LENGTH
        return text, tin, tout, calls, None, finish, TokensSource.ESTIMATED

    def _ledger(
        self,
        req: LLMRequest,
        key: str,
        outcome: LedgerOutcome,
        tin: int,
        tout: int,
        latency: int,
        attempts: int,
        error: str | None,
        cost: float | None = None,
        finish: str | None = None,
        source: TokensSource | None = None,
    ) -> None:
        row = dict(
            at=datetime.now(UTC),
            asset=self.asset,
            partition=self.partition,
            task=req.task,
            world_id=req.world_id,
            model=self.model,
            prompt_version=req.prompt_version,
            tokens_in=tin,
            tokens_out=tout,
            cost_usd=cost,
            latency_ms=latency,
            attempts=attempts,
            outcome=outcome,
            error=error,
            cache_key=key,
            tokens_source=str(source) if source is not None else None,
            finish_reason=finish,
            max_tokens=req.max_tokens,
        )
        if not self._write_now(lambda conn: conn.execute(llm_ledger.insert().values(**row))):
            self._pending_ledger.append(row)

    def _write_now(self, write: Callable[[Connection], object]) -> bool:
        """Write a ledger or cache row at once (True), or leave it to the batch's transaction
        (False). While buffering, only the offline model's rows wait: it is free and deterministic,
        so a batch lost to a crash costs nothing to redo. A provider's call was paid: its ledger row
        and its answer are written at once, so a run killed mid-batch (SIGKILL) still accounts for
        it and the re-run reuses the answer instead of paying again. A transient database error is
        retried (PAID_WRITE_ATTEMPTS, about 15 s: a paid answer is worth the wait); should the write
        still fail, the row waits for the batch's transaction and no further provider request is
        made until it is written (``_refuse_if_unrecorded``): a store that went down costs at most
        the call in flight, never a run of paid answers lost with the batch."""
        if self.buffering and self.is_offline:
            return False

        def once() -> None:
            with self.store.begin() as conn:
                write(conn)

        try:
            if self.is_offline:
                once()
            else:
                retry_transient(once, PAID_WRITE_ATTEMPTS, what="LLM ledger", backoff_seconds=0.5)
        except (SQLAlchemyError, StoreUnavailable) as exc:
            if not self.buffering:
                raise
            self._unwritten = exc
            return False
        return True
