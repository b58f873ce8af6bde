"""`eval locomo` end to end on a LoCoMo file the test writes: a fresh store, every domain as Dagster
runs, the recall table, its rows in the run's store and the project's store (PostgreSQL here), the
refusal of a store that already holds events, and each index's attribution of memory to days."""

import json
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.store import Store
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.operations.recall_eval import EvalError, run_locomo
from memory_pipeline.recall import days as day_index
from memory_pipeline.recall.metric import Index
from memory_pipeline.recall.tables import recall_eval_results, recall_eval_runs
from memory_pipeline.sleep.tables import semantic_memories
from memory_pipeline_tests.conftest import CST, write_locomo

runner = CliRunner()
TOPICS = [
    ("pottery", "I went to a pottery class and made a blue bowl."),
    ("marathon", "I ran the city marathon for the animal shelter."),
    ("violin", "I started violin lessons with an old teacher."),
    ("camping", "We went camping by the lake and saw a moose."),
    ("adoption", "We met the adoption agency about a second child."),
]


def _doc() -> dict:
    """Five sessions on five days, each about one thing; one question per session names it."""
    doc: dict = {"speaker_a": "Caroline", "speaker_b": "Melanie"}
    qa = []
    for n, (word, line) in enumerate(TOPICS, start=1):
        doc[f"session_{n}_date_time"] = f"1:56 pm on {n + 7} May, 2023"
        doc[f"session_{n}"] = [
            {"speaker": "Caroline", "dia_id": f"D{n}:1", "text": "Hi Melanie, how have you been this week?"},
            {"speaker": "Melanie", "dia_id": f"D{n}:2", "text": "Good, thanks! What did you do?"},
            {"speaker": "Caroline", "dia_id": f"D{n}:3", "text": line},
        ]
        qa.append({"question": f"When did Caroline do the {word}?", "evidence": [f"D{n}:3"], "category": 2})
    qa.append({"question": "What did Melanie never say?", "answer": "n/a", "category": 5})
    doc["qa"] = qa
    return doc


@pytest.fixture
def project(monkeypatch, store, tmp_path):
    """The operator's store is PostgreSQL; the eval builds elsewhere and records in both."""
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "project-data"))
    monkeypatch.delenv("MEMORY_LLM_MODEL", raising=False)
    return store


def test_eval_builds_every_domain_and_measures_each_index(project, tmp_path):
    path = write_locomo(tmp_path, _doc(), "26.json")
    report = run_locomo([path], directory=tmp_path / "run")
    assert not report.failed_runs, report.failed_runs
    assert {r.name.split()[0] for r in report.runs} >= {
        "day",
        "sleep",
        "objects_compaction_job",
        "objects_organize_job",
        "conversation_rolling_summary_job",
    }
    assert report.questions == 5 and report.left_out == {"category 5 (adversarial)": 1}
    assert report.worlds == 1 and report.days == 5
    scores = {s.index: s for s in report.scores}
    assert list(scores) == list(Index)  # every row of the table, in order
    # The raw anchor: each question's rare word is said on one day only.
    assert scores[Index.RAW].recall(1) == 1.0
    assert scores[Index.RANDOM].recall(1) == pytest.approx(1 / 5) and scores[Index.RANDOM].recall(5) == 1.0
    raw_chars = sum(len(t["text"]) for n in range(1, 6) for t in _doc()[f"session_{n}"])
    assert scores[Index.RAW].chars_per_day == pytest.approx((raw_chars + 2 * 5) / 5)  # a day's 3 turns, 2 line breaks
    assert scores[Index.DAY_SUMMARIES].chars_per_day > 0  # the offline model summarized the days
    # memory_search finds each question's day first: the day summary of that day names the topic
    assert scores[Index.MEMORY_SEARCH].questions == 5 and scores[Index.MEMORY_SEARCH].recall(1) == 1.0
    assert report.llm_calls > 0 and report.model.startswith("offline/")
    assert report.tokens_in > 0 and report.cost_usd is None  # the offline model has no price

    # Recorded where the run built its memory and in the operator's store.
    run_store = Store(report.store_url)
    assert report.store_url.startswith("sqlite:///") and str(tmp_path / "run") in report.store_url
    for where in (run_store, project):
        with where.connect() as conn:
            run = conn.execute(select(recall_eval_runs).where(recall_eval_runs.c.run_id == report.run_id)).one()
            rows = conn.execute(select(recall_eval_results).where(recall_eval_results.c.run_id == report.run_id)).all()
        assert run.questions == 5 and run.llm_calls == report.llm_calls and run.failed_runs == []
        assert {r.index_name: r.r_at_1 for r in rows}[Index.RAW.value] == 1.0
        assert len(rows) == len(Index)
    with project.connect() as conn:  # the operator's own memory was not touched
        assert conn.execute(select(semantic_memories)).first() is None


def test_a_store_that_already_holds_events_is_refused_before_anything_is_built(project, tmp_path):
    path = write_locomo(tmp_path, _doc(), "26.json")
    run_locomo([path], directory=tmp_path / "first")
    used = f"sqlite:///{tmp_path / 'first' / 'memory.sqlite'}"
    with pytest.raises(EvalError, match=r"already holds 15 raw events"):
        run_locomo([path], store_url=used, directory=tmp_path / "second")
    assert not (tmp_path / "second").exists()
    result = runner.invoke(app, ["eval", "locomo", str(path), "--store", used])
    assert result.exit_code == 2 and "already holds 15 raw events" in result.output


def test_a_project_store_that_cannot_take_the_results_loses_nothing_of_the_run(project, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_DATABASE_URL", "postgresql+psycopg2://nobody:secret@127.0.0.1:1/none")
    path = write_locomo(tmp_path, _doc(), "26.json")
    report = run_locomo([path], directory=tmp_path / "run")
    assert "nobody:***@127.0.0.1:1/none: OperationalError" in report.not_recorded
    with Store(report.store_url).connect() as conn:  # the run's store has them
        assert conn.execute(select(recall_eval_runs.c.run_id)).scalar_one() == report.run_id


def test_two_files_that_would_make_one_world_are_refused(project, tmp_path):
    a = write_locomo(tmp_path, _doc(), "26.json")
    (tmp_path / "copy").mkdir()
    b = write_locomo(tmp_path / "copy", _doc(), "26.json")
    with pytest.raises(EvalError, match="same world 'locomo-26'"):
        run_locomo([a, b], directory=tmp_path / "run")


def test_the_command_prints_the_table_and_writes_json(project, tmp_path):
    path = write_locomo(tmp_path, _doc(), "26.json")
    out = tmp_path / "recall.json"
    result = runner.invoke(app, ["eval", "locomo", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    for index in Index:
        assert index.value in result.output
    assert "5 questions over 1 world(s), 5 candidate days" in result.output
    data = json.loads(out.read_text())
    rows = {r["index"]: r for r in data["indexes"]}
    assert rows["raw messages"]["r_at_1"] == 1.0 and rows["random ranking"]["chars_per_day"] is None
    assert data["llm"]["calls"] > 0 and data["questions_left_out"] == {"category 5 (adversarial)": 1}


def test_memory_is_attributed_to_the_days_of_the_events_it_came_from(store, ingest):
    """A semantic memory to its source sessions' days, an object to its attached events' days; a
    deprecated memory and an archived object are not what a reader gets, so they count nowhere."""
    from memory_pipeline_tests.conftest import event

    ingest(
        [
            event("w", "w.s1", "user", "pottery class", datetime(2023, 5, 8, 13, 0, tzinfo=CST), mid="m1"),
            event("w", "w.s2", "user", "marathon", datetime(2023, 5, 9, 13, 0, tzinfo=CST), mid="m2"),
            event("w", "w.s2", "user", "late night", datetime(2023, 5, 10, 0, 30, tzinfo=CST), mid="m3"),
        ]
    )
    now = datetime.now(UTC)
    memory = {"world_id": "w", "type": "experience", "observed_at": now, "version": 1, "created_by": "light_sleep"}
    obj = {"world_id": "w", "type": "knowledge", "aliases": [], "summary": "", "cues": [], "version": 1, "revision": 1}
    with store.begin() as conn:
        conn.execute(
            semantic_memories.insert(),
            [
                memory
                | {"memory_id": "a", "content": "ran a marathon", "source_sessions": ["w.s2"], "status": "active"},
                memory | {"memory_id": "b", "content": "old fact", "source_sessions": ["w.s1"], "status": "deprecated"},
            ],
        )
        conn.execute(
            objects_objects.insert(),
            [
                obj | {"object_id": "o1", "name": "Pottery", "body": "a class", "status": "active"},
                obj | {"object_id": "o2", "name": "Gone", "body": "x", "status": "archived"},
            ],
        )
        conn.execute(
            objects_attachments.insert(),
            [
                {"world_id": "w", "object_id": "o1", "event_id": "m1", "revision": 1},
                {"world_id": "w", "object_id": "o2", "event_id": "m2", "revision": 1},
            ],
        )
    texts = day_index.day_texts(store, ["w"], CST, "agent/activity")
    d8, d9, d10 = date(2023, 5, 8), date(2023, 5, 9), date(2023, 5, 10)
    assert texts[Index.SEMANTIC]["w"] == {d9: "ran a marathon", d10: "ran a marathon"}  # the session spans two days
    assert texts[Index.OBJECTS]["w"] == {d8: "Pottery a class"}
    assert texts[Index.RAW]["w"][d10] == "late night"
    assert texts[Index.ALL_MEMORY]["w"][d9] == "ran a marathon"
    assert day_index.world_days(store, ["w"], CST) == {"w": {d8, d9, d10}}


def test_a_bad_file_is_refused_naming_it_before_anything_is_written(project, tmp_path):
    good = write_locomo(tmp_path, _doc(), "26.json")
    doc = _doc()
    doc["session_2"][1]["text"] = 7  # a turn whose text is not a string
    bad = write_locomo(tmp_path, doc, "30.json")
    with pytest.raises(EvalError, match=r"30.json:\$\.session_2\[1\]\.text: field 'text': must be a string"):
        run_locomo([good, bad], directory=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # not even the first file was imported anywhere
    unreadable = write_locomo(tmp_path, b"{not json", "41.json")
    with pytest.raises(EvalError, match=r"41.json:1: field '<file>': malformed JSON"):
        run_locomo([unreadable], directory=tmp_path / "run")
    no_questions = _doc()
    del no_questions["qa"]
    with pytest.raises(EvalError, match=r"42.json:\$\.qa: missing"):
        run_locomo([write_locomo(tmp_path, no_questions, "42.json")], directory=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_evidence_that_is_not_a_list_of_dia_ids_is_refused_before_any_domain_is_built(project, tmp_path):
    good = write_locomo(tmp_path, _doc(), "26.json")
    for name, evidence, where, said in (
        ("30.json", "D2:3", r"\$\.qa\[1\]\.evidence", r'expected a list of dia ids \(like \["D1:3"\]\), got "D2:3"'),
        ("41.json", None, r"\$\.qa\[1\]\.evidence", r"expected a list of dia ids .*got null"),
        ("42.json", ["D2:3", 7], r"\$\.qa\[1\]\.evidence\[1\]", r'expected a dia id string \(like "D1:3"\), got 7'),
    ):
        doc = _doc()
        doc["qa"][1]["evidence"] = evidence
        with pytest.raises(EvalError, match=rf"{name}:{where}: {said}"):
            run_locomo([good, write_locomo(tmp_path, doc, name)], directory=tmp_path / "run")
        assert not (tmp_path / "run").exists()  # no store, no import, no Dagster run
    with project.connect() as conn:
        assert conn.execute(select(recall_eval_runs)).first() is None  # nothing recorded either


def test_nothing_to_measure_is_refused_before_any_domain_is_built(project, tmp_path, monkeypatch):
    """An eval that cannot measure says so up front: no question left to ask (all adversarial, or
    evidence naming no turn), or a domain the configuration turns off (its index would hold no
    memory and score as the random order, recorded as a measurement)."""
    doc = _doc()
    doc["qa"] = [q for q in doc["qa"] if q["category"] == 5] + [
        {"question": "Who?", "evidence": ["D9:9"], "category": 1}
    ]
    with pytest.raises(
        EvalError,
        match=r"no question to measure recall with \(left out: 1 category 5 \(adversarial\), "
        r"1 evidence names no imported turn\)",
    ):
        run_locomo([write_locomo(tmp_path, doc, "26.json")], directory=tmp_path / "run")
    good = write_locomo(tmp_path, _doc(), "30.json")
    config = tmp_path / "off.yaml"
    config.write_text("memory:\n  objects:\n    enabled: false\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    with pytest.raises(EvalError, match=r"memory\.objects\.enabled is false in the configuration"):
        run_locomo([good], directory=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with project.connect() as conn:
        assert conn.execute(select(recall_eval_runs)).first() is None


def _eval_with_every_call_failing(tmp_path, monkeypatch, objects_settings: str = ""):
    """An eval of the test's file whose every model call the provider answers with HTTP 500 (no
    retries); the few turns are over the compaction threshold, so compaction calls the model too."""
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
    config = tmp_path / "small.yaml"
    config.write_text("memory:\n  objects:\n    compact_threshold_tokens: 20\n" + objects_settings)
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    with FakeOpenAI() as fake:
        fake.step = lambda _body: ("status", 500)
        monkeypatch.setenv("MEMORY_LLM_API_BASE", fake.api_base)
        monkeypatch.setenv("MEMORY_LLM_API_KEY", "k")
        return run_locomo([write_locomo(tmp_path, _doc(), "26.json")], model="openai/fake", directory=tmp_path / "r")


def test_a_run_that_succeeded_degraded_counts_against_the_measurement(project, tmp_path, monkeypatch):
    """The objects worker's run stands when its batches fail (the failed ones are retried later) but
    says so (``degraded``): the eval counts it with the failed runs, never as clean memory."""
    # the breaker off: a provider failing every call then fails claims until the job ends (with it
    # on, the breaker stops the run, which fails outright)
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "0")
    report = _eval_with_every_call_failing(tmp_path, monkeypatch, "    retry_backoff_seconds: 0\n")
    degraded = [r for r in report.runs if r.success and r.degraded]
    assert degraded and {r.name for r in degraded} <= {"objects_compaction_job", "objects_organize_job"}
    assert all(r.error.startswith("degraded: ") and "failed claim(s)" in r.error for r in degraded)
    assert set(map(id, degraded)) <= set(map(id, report.failed_runs))
    with project.connect() as conn:
        (failed,) = conn.execute(select(recall_eval_runs.c.failed_runs)).one()
    assert any(": degraded: " in line for line in failed)


def test_a_store_that_cannot_be_opened_is_refused_by_name(project, tmp_path):
    path = write_locomo(tmp_path, _doc(), "26.json")
    url = "postgresql+psycopg2://nobody:secret@127.0.0.1:1/none"
    with pytest.raises(
        EvalError, match=r"--store postgresql\+psycopg2://nobody:\*\*\*@127.0.0.1:1/none: cannot open it"
    ):
        run_locomo([path], store_url=url, directory=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # A driver that is not installed (SQLAlchemy knows the dialect; its module is missing): the same
    # refusal, not an ImportError's traceback.
    with pytest.raises(EvalError, match=r"--store postgresql\+pg8000://.*: cannot open it: ModuleNotFoundError"):
        run_locomo([path], store_url="postgresql+pg8000://u@127.0.0.1/x", directory=tmp_path / "run")
    with pytest.raises(EvalError, match=r"26.json: no such file"):
        run_locomo([tmp_path / "26.json", tmp_path / "missing" / "26.json"], directory=tmp_path / "run")
    with pytest.raises(EvalError, match=r": a folder, not a LoCoMo JSON file"):
        run_locomo([tmp_path], directory=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_command_refuses_a_json_path_it_could_not_write_before_any_run(project, tmp_path):
    path = write_locomo(tmp_path, _doc(), "26.json")
    for out, said in (
        (tmp_path / "nowhere" / "out.json", "no folder"),
        (tmp_path, "is a folder, not a file"),
        (path, "is one of the LoCoMo files given (the results would overwrite it)"),
    ):
        result = runner.invoke(app, ["eval", "locomo", str(path), "--json", str(out)])
        assert result.exit_code == 2 and f"--json {out}: {said}" in result.output, result.output
        assert "wall time" not in result.output  # nothing was built
    assert json.loads(path.read_text(encoding="utf-8")) == _doc()  # the input file is as it was
    with project.connect() as conn:
        assert conn.execute(select(recall_eval_runs)).first() is None


def test_only_the_runs_own_sqlite_files_skip_fsync_and_only_while_it_builds(tmp_path):
    from sqlalchemy import create_engine, text

    from memory_pipeline.operations.recall_eval import scratch_sqlite

    run, elsewhere = tmp_path / "run", tmp_path / "project"
    for folder in (run, elsewhere):
        folder.mkdir()

    def synchronous(folder) -> int:
        engine = create_engine(f"sqlite:///{folder / 'x.sqlite'}")
        with engine.connect() as conn:
            value = int(conn.execute(text("PRAGMA synchronous")).scalar() or 0)
        engine.dispose()
        return value

    with scratch_sqlite(run):
        assert synchronous(run) == 0  # OFF: the run's store and Dagster instance are scratch
        assert synchronous(elsewhere) == 2  # FULL, SQLite's default: the project's store is not
    assert synchronous(run) == 2  # the listener is gone with the run


def test_the_output_says_failed_calls_failed_and_breaker_refusals_are_no_calls(store, tmp_path, capsys):
    """Three calls the provider failed (no answer, no tokens) and two the open breaker refused
    without a request: the eval's LLM line says "3 calls (3 failed)", never "5 calls, 0 tokens"
    as if they were answers that cost nothing; its JSON counts them apart."""
    from memory_pipeline.cli.recall import print_report
    from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMProviderDown, LLMRequest
    from memory_pipeline.operations.recall_eval import EvalReport, _ledger
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as fake:
        for _ in range(3):
            fake.push("status", 500)
        llm = LLMClient(
            store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0, breaker_failures=3
        )
        for i in range(5):
            req = LLMRequest(task="day", system="s", user=f"material {i}", prompt_version="t")
            with pytest.raises(LLMProviderDown if i >= 3 else LLMHardFailure):
                llm.complete(req)
    report = EvalReport("r1", ["26.json"], "openai/fake", "postgresql://u:s3cret@127.0.0.1/runs", tmp_path)
    _ledger(store, report)
    print_report(report)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("LLM: "))
    assert line.startswith("LLM: 3 calls (3 failed) + 2 refused by the open breaker (no request), 0 tokens in"), line
    # No token was used: no price is missing (it read "cost unknown (no price for this model)").
    assert line.endswith("0 out, cost none (no tokens used)"), line
    # The store's password stays out of the output, as in the JSON and the recorded run.
    assert "s3cret" not in out and "store postgresql://u:***@127.0.0.1/runs" in " ".join(out.split())
    assert (report.llm_calls, report.llm_failed, report.llm_refused) == (3, 3, 2)
    assert report.as_json()["llm"] | {"prompt_versions": {}} == {
        "calls": 3,
        "failed": 3,
        "refused_by_breaker": 2,
        "tokens_in": 0,
        "tokens_out": 0,
        "cost_usd": None,
        "prompt_versions": {},
    }


def test_an_interrupt_inside_a_run_stops_the_eval_and_records_nothing(project, tmp_path):
    """SIGINT while a Dagster run of the eval waits on the model: Dagster's run took the signal (and
    reset it when the run ended), so the eval went on to measure, print the table, exit 0 and record
    a clean run. It now stops after that run, says so in one line, exits 130 and records nothing."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from memory_pipeline_tests.fake_openai import FakeOpenAI

    path = write_locomo(tmp_path, _doc(), "26.json")
    cli = str(Path(sys.executable).parent / "memory-pipeline")
    with FakeOpenAI() as fake:
        fake.hold("pottery")  # the first day's summary call waits until released
        env = {
            **os.environ,
            "MEMORY_LLM_API_BASE": fake.api_base,
            "MEMORY_LLM_API_KEY": "k",
            "TMPDIR": str(tmp_path),  # the eval's own folder, under the test's
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        proc = subprocess.Popen(
            [cli, "eval", "locomo", str(path), "--model", "openai/fake"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert fake.held.wait(timeout=300), "the eval never reached the held call"
            proc.send_signal(signal.SIGINT)
            fake.release()
            out, errors = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
    said = " ".join(errors.split())
    assert proc.returncode == 130, (proc.returncode, out, errors)
    assert "interrupted (SIGINT) during the day runs: the eval stopped and recorded nothing" in said, said
    assert "wall time" not in out and "measuring recall" not in said
    with project.connect() as conn:
        assert conn.execute(select(recall_eval_runs)).first() is None


def test_a_model_litellm_cannot_call_is_refused_before_anything_is_built(project, tmp_path, monkeypatch):
    """A model string naming no provider was found out by every run's calls: minutes of runs, a
    table of near-random numbers and Dagster's stack traces. It is one refusal before any folder."""
    path = write_locomo(tmp_path, _doc(), "26.json")
    with pytest.raises(EvalError, match=r"^--model 'nonsense-model': names no provider litellm knows"):
        run_locomo([path], model="nonsense-model", directory=tmp_path / "run")
    monkeypatch.setenv("MEMORY_LLM_MODEL", "nonsense-model")
    result = runner.invoke(app, ["eval", "locomo", str(path)])
    assert result.exit_code == 2, result.output
    assert "MEMORY_LLM_MODEL 'nonsense-model': names no provider litellm knows" in " ".join(result.output.split())
    assert "Provider List" not in result.output
    assert not (tmp_path / "run").exists()


def test_runs_that_fail_on_the_provider_say_it_in_one_line_without_dagsters_stack_traces(
    project, tmp_path, monkeypatch, capfd
):
    """Every call fails (HTTP 500): the day, sleep and objects runs fail, each said in one line. The
    objects and rolling summary jobs printed Dagster's STEP_FAILURE with its stack trace (some 40
    lines each) on the console: they run with the operator's console now, as the others did."""
    report = _eval_with_every_call_failing(tmp_path, monkeypatch)
    failed = {r.name.split()[0] for r in report.runs if not r.success}
    assert {"day", "objects_compaction_job"} <= failed, report.runs
    said = capfd.readouterr().err
    assert "Stack Trace" not in said and "STEP_FAILURE" not in said and 'File "' not in said, said


def test_a_file_that_leaves_no_question_to_measure_is_named(tmp_path):
    """Two files, the second's questions all adversarial: the eval measures the first and says the
    second adds no question (it ran without a word, as if both had been measured)."""
    from memory_pipeline.operations.recall_eval import _checked_files

    quiet = _doc()
    quiet["qa"] = [q for q in quiet["qa"] if q["category"] == 5]
    said: list[str] = []
    checked = _checked_files(
        [write_locomo(tmp_path, _doc(), "26.json"), write_locomo(tmp_path, quiet, "30.json")], CST, said.append
    )
    assert [p.name for p, _ in checked] == ["26.json", "30.json"]
    assert said == ["30.json: no question of it can be measured (its conversation is built all the same)"]
