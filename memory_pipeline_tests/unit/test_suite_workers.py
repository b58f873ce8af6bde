"""The suite under pytest-xdist: each worker flushes a Redis database of its own, never the Celery
broker's nor database 0, from the default base (CI) and from any other (a developer's); every run
ends with its 15 slowest tests."""

import pytest

from memory_pipeline_tests.conftest import worker_redis_url

BROKER = ("redis://127.0.0.1:6379/9",)


@pytest.mark.parametrize(
    ("base", "dbs"),
    [
        ("redis://127.0.0.1:6379/15", [15, 14, 13, 12]),
        ("redis://127.0.0.1:6379/10", [10, 8, 7, 6]),
        ("redis://127.0.0.1:6379/2", [2, 1, 15, 14]),
    ],
)
def test_each_worker_has_its_own_database(base, dbs):
    urls = [worker_redis_url(base, f"gw{i}", BROKER) for i in range(4)]
    assert urls == [f"redis://127.0.0.1:6379/{db}" for db in dbs]
    assert worker_redis_url(base, None, BROKER) == urls[0]  # no xdist: the base itself


def test_the_url_keeps_its_password_and_host():
    assert worker_redis_url("redis://:pw@cache:6380/15", "gw1", BROKER) == "redis://:pw@cache:6380/14"


@pytest.mark.parametrize("base", ["redis://127.0.0.1:6379/9", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379"])
def test_a_base_on_the_broker_or_database_0_is_refused(base):
    with pytest.raises(ValueError, match="TEST_REDIS_URL"):
        worker_redis_url(base, "gw0", BROKER)


def test_more_workers_than_databases_is_refused():
    with pytest.raises(ValueError, match="gw14"):
        worker_redis_url("redis://127.0.0.1:6379/15", "gw14", BROKER)


def test_every_run_ends_with_its_15_slowest_tests(tmp_path):
    """The suite's own configuration (pyproject's addopts), run as `make test` runs it (xdist
    workers, loadgroup), prints the 15 slowest tests of 16 at the end."""
    import os
    import re
    import subprocess
    import sys

    from memory_pipeline.lib.settings import REPO_ROOT

    (tmp_path / "test_sixteen.py").write_text(
        "import time, pytest\n\n"
        "@pytest.mark.parametrize('n', range(16))\n"
        "def test_sleeps(n):\n"
        "    time.sleep(0.02 + n / 1000)\n"
    )
    # The configuration's own addopts: an operator's PYTEST_ADDOPTS (say --durations=0) would win.
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + ["-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", str(tmp_path / "test_sixteen.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "slowest 15 durations" in done.stdout, done.stdout
    # The block's entries, whatever their phase: on a loaded machine a set-up can outlast a call.
    block = done.stdout.split("slowest 15 durations", 1)[1].split("\n=", 1)[0]
    listed = re.findall(r"^\d+\.\d+s (?:setup|call|teardown) +.*test_sleeps\[\d+\]$", block, flags=re.M)
    assert len(listed) == 15, done.stdout
    assert any(" call " in line for line in listed), done.stdout
