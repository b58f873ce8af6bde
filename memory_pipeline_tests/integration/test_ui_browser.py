"""What a person sees in the Dagster UI after the day range was backfilled (the stack and backfill of
test_webserver_e2e, shared through the package fixture): headless Chromium (Debian's package,
driven by Playwright without a browser download) opens the asset page, its partitions, the day
check's partitions and the backfill page, and saves a screenshot of each under
memory_pipeline_tests/artifacts/ui/."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_pipeline_tests.integration.conftest import (
    DAY_ASSET,
    DAY_CHECK,
    E2E_DAYS,
    STRICT_PER_PARTITION_CHECKS,
    artifacts_dir,
)


def _unavailable(reason: str) -> None:
    """A missing browser is a failure, never a skip: `make test` installs both (the lock, apt)."""
    pytest.fail(f"{reason}; `make test` installs it", pytrace=False)


try:
    from playwright import sync_api
except ImportError:
    _unavailable("playwright is not installed (requirements.lock)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    _unavailable("Debian's chromium is not installed (apt-get install -y chromium)")

# One deployment (the package-scoped `deployed`) serves both modules: under pytest-xdist they run
# in one worker (--dist loadgroup), which starts it once.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dagster_stack")]

WAIT_MS = 60_000  # the first page loads the UI's bundle; two shared cores are slow at it
sync_api.expect.set_options(timeout=WAIT_MS)
STATUS = re.compile(
    r"(Execution Failed|In Progress|Materializing|Materialized|Missing|Skipped|Passed|Failed)\s*\(([\d,]+)\)"
)


def status_counts(text: str) -> dict[str, int]:
    """The partition status filters' counts as shown: {"Materialized": 4, "Missing": 1790, ...}."""
    return {m.group(1): int(m.group(2).replace(",", "")) for m in STATUS.finditer(text)}


@pytest.fixture(scope="module")
def browser_context(deployed) -> Iterator[object]:
    """One headless Chromium context for the module: its pages share the UI bundle's cache."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = browser.new_context(base_url=deployed.stack.url, viewport={"width": 1400, "height": 1000})
            # The "Join the Dagster community" dialog, dismissed as the browser remembers it.
            context.add_init_script("window.localStorage.setItem('communityNux', '1')")
            yield context
            context.close()
        finally:
            browser.close()


@pytest.fixture
def page(browser_context, request):
    page = browser_context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    # Also when the test failed: what the page showed then.
    page.screenshot(path=artifacts_dir("ui") / f"{request.node.name}.png", full_page=True)
    page.close()


def test_the_asset_page_shows_the_backfilled_day_partitions(page):
    page.goto(f"/assets/{DAY_ASSET}")
    expect = sync_api.expect
    expect(page.get_by_text("Latest materialization")).to_be_visible()
    # Its partition: the newest of the range (the value loads after the heading).
    expect(page.get_by_text(E2E_DAYS[-1], exact=True).first).to_be_visible()
    expect(page.get_by_text(DAY_ASSET).first).to_be_visible()
    expect(page.get_by_text("memory_pipeline", exact=True).first).to_be_visible()  # the code location
    expect(page.get_by_text("Postgres", exact=True)).to_be_visible()  # the store's kind: MEMORY_DATABASE_URL
    page.screenshot(path=artifacts_dir("ui") / "asset_overview.png")

    page.goto(f"/assets/{DAY_ASSET}?view=partitions")
    expect(page.get_by_text("Partitions Selected")).to_be_visible()
    expect(page.get_by_text(re.compile(r"Materialized\s*\(\d+\)"))).to_be_visible()
    counts = status_counts(page.inner_text("body"))
    assert counts["Materialized"] == len(E2E_DAYS) and counts["Failed"] == 0, counts


def test_the_day_checks_partitions_view_shows_no_failure(page):
    expect = sync_api.expect
    page.goto(f"/assets/{DAY_ASSET}?view=checks&checkDetail={DAY_CHECK}")
    expect(page.get_by_role("tab", name="Execution history")).to_be_visible()
    # The asset's own tabs have a "Partitions" too: the check's is the last.
    page.get_by_role("tab", name="Partitions").last.click()
    expect(page.get_by_text("Partitions Selected")).to_be_visible()
    expect(page.get_by_text(re.compile(r"Passed\s*\(\d+\)"))).to_be_visible()
    counts = status_counts(page.inner_text("body"))
    assert counts["Failed"] == 0 and counts["Execution Failed"] == 0 and counts["In Progress"] == 0, counts
    if STRICT_PER_PARTITION_CHECKS:
        # "Passed" counts only evaluations that name their target materialization; others show
        # as "Missing" even though GraphQL lists them as succeeded.
        assert counts["Passed"] == len(E2E_DAYS) and counts["Skipped"] == 0, counts
    else:  # today: one evaluation without a partition, so the range's partitions show as skipped
        assert counts["Passed"] + counts["Skipped"] == len(E2E_DAYS), counts


def test_the_backfill_page_shows_it_succeeded_for_the_range(page, deployed):
    expect = sync_api.expect
    page.goto(f"/runs/b/{deployed.backfill_id}")
    expect(page.get_by_text("Partition selection")).to_be_visible()
    expect(page.get_by_text(f"{E2E_DAYS[0]}...{E2E_DAYS[-1]}")).to_be_visible()
    expect(page.get_by_text("Succeeded", exact=True).first).to_be_visible()  # the status tag
    expect(page.get_by_text("100% completed")).to_be_visible()
    # The asset's row reads: name, progress bar, then partitions targeted / in progress / succeeded / failed.
    after_bar = page.inner_text("body").split("100% completed", 1)[1].split()[:4]
    assert after_bar == [str(len(E2E_DAYS)), "0", str(len(E2E_DAYS)), "0"], after_bar
