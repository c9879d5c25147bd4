"""The Gym-format run folder: Gym's record formats and safe concurrent appends (Gym's own tools reading it:
tests/gym/test_gym_tools_read_our_run_folder.py)."""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.masking import Masker
from pytest_gym.judge.messages import clean_outcome
from pytest_gym.rollout.transport import TrialFault, encode
from pytest_gym.runfolder.layout import AGGREGATE_FILE, FAILURES_FILE, MATERIALIZED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter, aggregate_entry, aggregate_request, write_aggregate_metrics
from tests.helpers.paths import ROOT
from tests.helpers.run_records import AGENT, SERVER, faulted, request_for, rewarded

STAMPS = ["_ng_task_index", "_ng_rollout_index", "agent_ref", "_ng_environment_server", "_ng_result_type"]


ROW: dict[str, Any] = {
    "responses_create_params": {"input": [{"role": "user", "content": "Which letter? \\boxed{}"}]},
    "options": [{"A": "one"}, {"B": "two"}],
    "expected_answer": "B",
}
ANSWER: dict[str, Any] = {
    "responses_create_params": {"input": [{"role": "user", "content": "Which letter? \\boxed{}", "type": "message"}]},
    "response": {
        "id": "resp_1",
        "object": "response",
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "\\boxed{B}"}]}
        ],
        "usage": {"input_tokens": 12, "output_tokens": 4, "total_tokens": 16},
        "incomplete_details": None,
    },
    "reward": 1.0,
    "mask_sample": False,
    "failure_kind": None,
    "failure_reason": None,
    "options": [{"A": "one"}, {"B": "two"}],
    "expected_answer": "B",
    "extracted_answer": "B",
}


def lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n")
    return data.splitlines()


# -- record formats ---------------------------------------------------------------------------------------------


def test_rollout_record_is_gyms_answer_plus_the_collectors_stamps_in_its_order(tmp_path: Path) -> None:
    request = request_for(ROW, 3, 1)
    with RunFolderWriter(tmp_path, servers={AGENT: SERVER}) as writer:
        writer.record(rewarded(copy.deepcopy(ANSWER), request))

    [raw] = lines(tmp_path / ROLLOUTS_FILE)
    record = json.loads(raw)
    ours = ["_pytest_gym_nodeid", "_pytest_gym_task_hash", "_pytest_gym_attempts", "_pytest_gym_latency_s"]
    assert list(record) == [*ANSWER, *STAMPS, *ours]
    assert record == {
        **ANSWER,
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": AGENT},
        "_ng_environment_server": "mcqa_environment_server",
        "_ng_result_type": "legacy_agent",
        "_pytest_gym_nodeid": record["_pytest_gym_nodeid"],
        "_pytest_gym_task_hash": record["_pytest_gym_task_hash"],
        "_pytest_gym_attempts": 1,
        "_pytest_gym_latency_s": 0.02,
    }
    # One compact line, the way orjson.dumps writes it, non-ASCII as UTF-8.
    assert raw == json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
    [materialized] = lines(tmp_path / MATERIALIZED_FILE)
    assert json.loads(materialized) == request
    assert list(json.loads(materialized))[-2:] == ["_ng_task_index", "_ng_rollout_index"]
    assert lines(tmp_path / FAILURES_FILE) == []


def test_echoed_keys_keep_their_place_and_take_the_requests_value(tmp_path: Path) -> None:
    answer = {"_ng_rollout_index": 99, **ANSWER, "agent_ref": {"name": "echoed"}}
    with RunFolderWriter(tmp_path) as writer:
        writer.record(rewarded(answer, request_for(ROW, 0, 2)))
    [record] = read_jsonl(tmp_path / ROLLOUTS_FILE)
    assert next(iter(record)) == "_ng_rollout_index"
    assert record["_ng_rollout_index"] == 2
    assert record["agent_ref"] == {"name": AGENT}
    assert "_ng_environment_server" not in record  # no server named: Gym's readers fall back to the agent's


def test_optional_request_stamps_follow_gyms_order(tmp_path: Path) -> None:
    extra = {"_ng_rollout_id": "r-7", "_ng_attempt_index": 1, "skills_ref": {"hash": "h"}, "task_source": "mcqa"}
    with RunFolderWriter(tmp_path) as writer:
        writer.record(rewarded(dict(ANSWER), request_for(ROW, 7, 0, **extra)))
    [record] = read_jsonl(tmp_path / ROLLOUTS_FILE)
    assert list(record)[len(ANSWER) :] == [
        "_ng_task_index",
        "_ng_rollout_index",
        "agent_ref",
        "task_source",
        "skills_ref",
        "_ng_attempt_index",
        "_ng_rollout_id",
        "_pytest_gym_nodeid",
        "_pytest_gym_task_hash",
        "_pytest_gym_attempts",
        "_pytest_gym_latency_s",
    ]


def test_non_finite_numbers_are_written_as_null_like_gyms_orjson(tmp_path: Path) -> None:
    answer = {**ANSWER, "judge_score": float("nan"), "nested": [{"x": float("inf")}], "text": "été ✓"}
    with RunFolderWriter(tmp_path) as writer:
        writer.record(rewarded(answer, request_for(ROW, 0, 0)))
    [raw] = lines(tmp_path / ROLLOUTS_FILE)
    record = json.loads(raw, parse_constant=lambda name: pytest.fail(f"{name} written to a jsonl file"))
    assert record["judge_score"] is None
    assert record["nested"] == [{"x": None}]
    assert "été ✓".encode() in raw


@pytest.mark.parametrize(
    ("error_class", "status", "failure_class"),
    [
        ("http_status", 500, "agent_run_error"),  # a Gym server answered: the rollout ran and broke
        ("http_status", 503, "agent_request_failed"),  # a gateway status says nothing about the rollout
        ("http_status", 429, "agent_request_failed"),
        ("timeout", None, "agent_request_failed"),  # no reply to take a status from
        ("connection", None, "agent_request_failed"),
        ("bad_body", 200, "agent_run_error"),
        ("no_reward", 200, "agent_run_error"),
    ],
)
def test_failure_row_has_gyms_sidecar_keys(
    tmp_path: Path, error_class: str, status: int | None, failure_class: str
) -> None:
    request = request_for(ROW, 3, 1)
    with RunFolderWriter(tmp_path, servers={AGENT: SERVER}) as writer:
        writer.record(faulted(request, error_class, status, "HTTP 5xx from http://x/run: boom", attempts=3))

    assert lines(tmp_path / ROLLOUTS_FILE) == []
    [row] = read_jsonl(tmp_path / FAILURES_FILE)
    assert row == {
        "_ng_failure_class": failure_class,
        "_ng_failure_type": error_class,
        "_ng_failure_message": "HTTP 5xx from http://x/run: boom",
        "_ng_failure_http_status": status,
        "_ng_failure_response_body": None,
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": AGENT},
        "_ng_environment_server": "mcqa_environment_server",
        "_ng_result_type": "legacy_agent",
        "_pytest_gym_nodeid": "data.jsonl::000000000003[r1]",
        "_pytest_gym_task_hash": "cd" * 32,
        "_pytest_gym_attempts": 3,
        "_pytest_gym_latency_s": 0.0,
    }
    # The row was sent, so it is a materialized input like any other.
    assert read_jsonl(tmp_path / MATERIALIZED_FILE) == [request]


def test_cancelled_trial_leaves_no_failure_row_as_gym_leaves_none(tmp_path: Path) -> None:
    with RunFolderWriter(tmp_path) as writer:
        writer.record(faulted(request_for(ROW, 3, 1), "cancelled", None, "cancelled: the run was stopped"))
    assert read_jsonl(tmp_path / FAILURES_FILE) == []
    assert read_jsonl(tmp_path / ROLLOUTS_FILE) == []
    assert len(read_jsonl(tmp_path / MATERIALIZED_FILE)) == 1


def test_fault_before_the_request_was_built_still_names_rollout_and_agent(tmp_path: Path) -> None:
    with RunFolderWriter(tmp_path) as writer:
        writer.record(faulted(None, "setup", None, "no agent for this row"))
    [row] = read_jsonl(tmp_path / FAILURES_FILE)
    assert row["_ng_failure_class"] == "agent_request_failed"
    assert "_ng_task_index" not in row  # unknown: Gym's resume skips such rows rather than guess
    assert row["_ng_rollout_index"] == 1
    assert row["agent_ref"] == {"name": AGENT}
    assert read_jsonl(tmp_path / MATERIALIZED_FILE) == []


def test_records_never_carry_the_policy_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("GYM_POLICY_API_KEY", key)
    answer = {**ANSWER, "response": {**ANSWER["response"], "echo": f"my key is {key}"}, "global_config_dict": {}}
    with RunFolderWriter(tmp_path) as writer:
        writer.record(rewarded(answer, request_for(ROW, 0, 0)))
        writer.record(
            faulted(request_for(ROW, 3, 1), "http_status", 401, f"HTTP 401: Bearer {key} and Bearer zz9Yx8Wv7")
        )

    everything = b"".join((tmp_path / name).read_bytes() for name in (ROLLOUTS_FILE, FAILURES_FILE, MATERIALIZED_FILE))
    assert key.encode() not in everything
    assert b"zz9Yx8Wv7" not in everything
    [record] = read_jsonl(tmp_path / ROLLOUTS_FILE)
    assert record["response"]["echo"] == "my key is ***"
    assert "global_config_dict" not in record
    [row] = read_jsonl(tmp_path / FAILURES_FILE)
    assert row["_ng_failure_message"] == "HTTP 401: Bearer *** and Bearer ***"


def test_record_after_close_is_refused(tmp_path: Path) -> None:
    writer = RunFolderWriter(tmp_path)
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.record(rewarded(dict(ANSWER), request_for(ROW, 0, 0)))


# -- concurrency ------------------------------------------------------------------------------------------------

CHILD = r"""
import hashlib, os, sys, time
from pathlib import Path
from pytest_gym.runfolder.rollouts import RunFolderWriter
from pytest_gym.core.outcome import TrialOutcome

run_dir, go = Path(sys.argv[1]), Path(sys.argv[2])
proc, count, size = (int(arg) for arg in sys.argv[3:6])
writer = RunFolderWriter(run_dir)  # a writer of its own, as every xdist worker has
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
for i in range(count):
    text = (hashlib.sha256(f"{proc}/{i}".encode()).hexdigest() * (size // 64 + 1))[:size]
    request = {"responses_create_params": {"input": "q"}, "agent_ref": {"name": "a"},
               "_ng_task_index": proc, "_ng_rollout_index": i}
    answer = {"response": {"text": text}, "reward": 1.0, "digest": hashlib.sha256(text.encode()).hexdigest()}
    writer.record(TrialOutcome(nodeid=f"d::{proc}[r{i}]", task_hash="0" * 64, repeat=i, line=proc, dataset="d",
                               reward=1.0, answer=answer, request=request, agent="a"))
writer.close()
"""


def check_rollouts(path: Path, expected: set[tuple[int, int]]) -> None:
    """Every line whole JSON with an intact payload; every expected rollout exactly once."""
    seen: list[tuple[int, int]] = []
    for raw in lines(path):
        record = json.loads(raw)
        assert hashlib.sha256(record["response"]["text"].encode()).hexdigest() == record["digest"]
        seen.append((record["_ng_task_index"], record["_ng_rollout_index"]))
    assert len(seen) == len(set(seen)), "duplicated lines"
    assert set(seen) == expected, "lost lines"


def test_processes_appending_at_once_never_tear_lose_or_duplicate_a_line(tmp_path: Path) -> None:
    procs, count, size = 4, 500, 20_000
    go = tmp_path / "go"
    pythonpath = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(go), str(p), str(count), str(size)], env=env)
        for p in range(procs)
    ]
    time.sleep(0.5)  # let them all import and wait at the start line
    go.touch()
    for child in children:
        assert child.wait(timeout=180) == 0

    expected = {(p, i) for p in range(procs) for i in range(count)}
    check_rollouts(tmp_path / ROLLOUTS_FILE, expected)
    assert (tmp_path / ROLLOUTS_FILE).stat().st_size > procs * count * size
    inputs = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_jsonl(tmp_path / MATERIALIZED_FILE)]
    assert sorted(inputs) == sorted(expected)


def test_threads_sharing_one_writer_never_tear_a_line(tmp_path: Path) -> None:
    size = 50_000
    writer = RunFolderWriter(tmp_path)

    def work(t: int) -> None:
        for i in range(100):
            text = (hashlib.sha256(f"{t}/{i}".encode()).hexdigest() * (size // 64 + 1))[:size]
            answer = {"response": {"text": text}, "reward": 0.0, "digest": hashlib.sha256(text.encode()).hexdigest()}
            writer.record(rewarded(answer, request_for({"responses_create_params": {}}, t, i)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    check_rollouts(tmp_path / ROLLOUTS_FILE, {(t, i) for t in range(8) for i in range(100)})


def test_a_write_that_fails_halfway_leaves_no_torn_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = RunFolderWriter(tmp_path)
    writer.record(rewarded(dict(ANSWER), request_for(ROW, 0, 0)))
    real_write = os.write
    calls = []

    def half_then_disk_full(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_disk_full)  # what the writer calls
    with pytest.raises(OSError, match="No space"):
        writer.record(rewarded(dict(ANSWER), request_for(ROW, 0, 1)))
    monkeypatch.undo()
    writer.record(rewarded(dict(ANSWER), request_for(ROW, 0, 2)))
    writer.close()
    assert [r["_ng_rollout_index"] for r in read_jsonl(tmp_path / MATERIALIZED_FILE)] == [0, 2]
    assert [r["_ng_rollout_index"] for r in read_jsonl(tmp_path / ROLLOUTS_FILE)] == [0, 2]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors of every ``os.write`` the writer makes (until ``monkeypatch.undo()``)."""
    made: list[int] = []
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        made.append(fd)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return made


def test_a_record_is_one_write_per_file_under_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: list[int]
) -> None:
    """The rollout thread's system calls per trial are its cost: a record asks nothing else of the file (no
    seek to learn where it starts: a failed write is cut back by what it wrote, see the test above)."""
    writer = RunFolderWriter(tmp_path)
    asked: list[str] = []
    for name in ("lseek", "fstat", "stat", "ftruncate"):
        monkeypatch.setattr(os, name, lambda *a, _name=name, **k: asked.append(_name))
    writer.record(rewarded(dict(ANSWER), request_for(ROW, 0, 0)))
    monkeypatch.undo()
    writer.close()
    assert asked == []
    assert len(writes) == 2  # the request, the rollout
    assert [r["_ng_rollout_index"] for r in read_jsonl(tmp_path / ROLLOUTS_FILE)] == [0]


def test_a_batch_of_trials_is_one_write_per_file_in_the_order_they_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: list[int]
) -> None:
    writer = RunFolderWriter(tmp_path)  # new files: opening them writes nothing
    batch = [rewarded(dict(ANSWER), request_for(ROW, task, 0)) for task in (2, 0, 1)]
    batch.insert(1, faulted(request_for(ROW, 3, 1), "http_status", 500))
    writer.record_all(batch)
    monkeypatch.undo()
    writer.close()
    assert len(writes) == 3  # the requests, the rollouts, the failure: not one write per trial and file
    assert [r["_ng_task_index"] for r in read_jsonl(tmp_path / MATERIALIZED_FILE)] == [2, 3, 0, 1]
    assert [r["_ng_task_index"] for r in read_jsonl(tmp_path / ROLLOUTS_FILE)] == [2, 0, 1]
    assert [r["_ng_task_index"] for r in read_jsonl(tmp_path / FAILURES_FILE)] == [3]


def test_a_trial_that_cannot_be_recorded_loses_no_other_trial_of_its_batch(tmp_path: Path) -> None:
    writer = RunFolderWriter(tmp_path)
    broken = rewarded(dict(ANSWER), request_for(ROW, 1, 0))
    broken.request = {"responses_create_params": {}}  # a rewarded trial without its indices: no record
    batch = [rewarded(dict(ANSWER), request_for(ROW, 0, 0)), broken, rewarded(dict(ANSWER), request_for(ROW, 2, 0))]
    with pytest.raises(ValueError, match="needs its answer and the request"):
        writer.record_all(batch)
    writer.close()
    assert [r["_ng_task_index"] for r in read_jsonl(tmp_path / ROLLOUTS_FILE)] == [0, 2]


# -- aggregate metrics --------------------------------------------------------------------------------------------

GYM_AGGREGATE_ANSWER: dict[str, Any] = {
    "group_level_metrics": [{"_ng_task_index": 0, "mean/reward": 0.5}, {"_ng_task_index": 1, "mean/reward": 1.0}],
    "agent_metrics": {"mean/reward": 0.75, "pass@2/accuracy": 100.0, "std/reward": float("nan")},
    "key_metrics": {"mean/reward": 0.75},
    "perf_summary": None,
    "repeat_level_metrics": [{"_ng_rollout_index": 0, "mean/reward": 0.5}],
}


def test_aggregate_metrics_file_has_gyms_shape(tmp_path: Path) -> None:
    entry = aggregate_entry(AGENT, GYM_AGGREGATE_ANSWER, "mcqa_environment_server")
    path = write_aggregate_metrics(tmp_path, [entry])
    assert path == tmp_path / AGGREGATE_FILE
    text = path.read_text()
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the metrics file"))
    assert isinstance(data, list)
    assert list(data[0]) == [
        "agent_ref",
        "_ng_environment_server",
        "agent_metrics",
        "key_metrics",
        "group_level_metrics",
        "repeat_level_metrics",
    ]
    assert data[0]["agent_ref"] == {"name": AGENT}
    assert data[0]["agent_metrics"]["std/reward"] is None
    assert text.startswith('[\n  {\n    "agent_ref": {\n      "name": ')  # orjson OPT_INDENT_2 layout
    entry = aggregate_entry(AGENT, {**GYM_AGGREGATE_ANSWER, "perf_summary": {"p50_ms": 3}})
    assert "_ng_environment_server" not in entry
    assert entry["perf_summary"] == {"p50_ms": 3}


def test_aggregate_metrics_file_is_replaced_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = [aggregate_entry(AGENT, GYM_AGGREGATE_ANSWER)]
    write_aggregate_metrics(tmp_path, first)
    before = (tmp_path / AGGREGATE_FILE).read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("power cut before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        write_aggregate_metrics(tmp_path, [aggregate_entry("other", GYM_AGGREGATE_ANSWER)])
    monkeypatch.undo()
    with pytest.raises(TypeError):
        write_aggregate_metrics(tmp_path, [{"agent_ref": {"name": "x"}, "agent_metrics": {"bad": object()}}])
    with pytest.raises(ValueError, match="agent_ref"):
        write_aggregate_metrics(tmp_path, [{"agent_metrics": {}}])

    assert (tmp_path / AGGREGATE_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [AGGREGATE_FILE], "a temporary file was left behind"
    assert json.loads(before)[0]["key_metrics"] == {"mean/reward": 0.75}


def test_aggregate_request_is_what_gyms_collector_posts() -> None:
    outcomes = [
        rewarded({**ANSWER, "reward": 0.0}, request_for(ROW, 1, 0)),
        faulted(request_for(ROW, 0, 1), "timeout", None),
        rewarded({**ANSWER, "ng_trajectory": {"turns": []}}, request_for(ROW, 0, 0)),
    ]
    body = aggregate_request(outcomes, servers={AGENT: SERVER})
    assert list(body) == ["verify_responses"]
    responses = body["verify_responses"]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in responses] == [(0, 0), (1, 0)]
    for entry in responses:
        assert entry["response"] == {"usage": ANSWER["response"]["usage"]}  # incomplete_details was None
        assert "responses_create_params" not in entry
        assert "ng_trajectory" not in entry
        assert entry["_ng_environment_server"] == "mcqa_environment_server"
    assert [r["reward"] for r in responses] == [1.0, 0.0]
    json.dumps(body, allow_nan=False)


# -- records made from the JSON made before --------------------------------------------------------------------

_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["password: hunter2-secret", "https://user:pw@host/x", "sk-proj-4fA9xQ2mZ7", "\ud800", "\U0001f600"]
    ),
)
_KEYS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["agent_ref", "_ng_task_index", "global_config_dict", "_pytest_gym_nodeid", "api_key", "reward"]),
)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def one_writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunFolderWriter]:
    with RunFolderWriter(tmp_path_factory.mktemp("run"), servers={AGENT: SERVER}) as writer:
        yield writer


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=st.dictionaries(_KEYS, _JSON, max_size=5), row=st.dictionaries(_KEYS, _JSON, max_size=4))
def test_records_made_from_the_json_made_before_are_byte_for_byte_the_records_made_anew(
    one_writer: RunFolderWriter, answer: dict[str, Any], row: dict[str, Any]
) -> None:
    """The writer reuses the POST's body and the answer's masking-check JSON for the request and rollout lines
    (one serialisation per trial): whatever the answer and the row hold (secrets, stamped keys, NaN, lone
    surrogates), the lines are those a writer serialising every record itself makes."""
    answer = {**answer, "reward": 1.0}
    request = request_for(row, 3, 1, _ng_rollout_id="r-1")
    made = rewarded(answer, request)
    with contextlib.suppress(TrialFault):
        made.request_bytes = (request, encode(request))
    clean_outcome(made, Masker())
    plain = copy.copy(made)
    plain.answer_text = plain.request_bytes = None
    assert one_writer.lines_of(made) == one_writer.lines_of(plain)


def test_a_trials_answer_and_row_are_serialised_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = request_for(ROW, 0, 0)
    outcome = rewarded(copy.deepcopy(ANSWER), request)
    outcome.request_bytes = (request, encode(request))
    clean_outcome(outcome, Masker())  # the answer's one serialisation: its masking check
    serialised: list[object] = []
    real_dumps = json.dumps

    def dumps(data: Any, **kwargs: Any) -> str:
        serialised.append(data)
        return real_dumps(data, **kwargs)

    monkeypatch.setattr(json, "dumps", dumps)
    with RunFolderWriter(tmp_path, servers={AGENT: SERVER}) as writer:
        writer.record(outcome)
    monkeypatch.undo()
    assert all("response" not in data and "responses_create_params" not in data for data in serialised), serialised
    assert len(serialised) == 1  # the stamps alone
    record = read_jsonl(tmp_path / ROLLOUTS_FILE)[0]
    assert record == {**ANSWER, **{k: record[k] for k in record if k not in ANSWER}}
    assert read_jsonl(tmp_path / MATERIALIZED_FILE) == [request]


def test_gyms_aggregate_metrics_are_written_masked_and_otherwise_as_gym_gave_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One check of the whole answer decides; an answer holding a secret is masked as data, key by key."""
    secret = "sk-pytestgym-AGGREGATE-1b2c3d"
    monkeypatch.setenv("GYM_POLICY_API_KEY", secret)
    plain = [{"agent_ref": {"name": "a"}, "agent_metrics": {"mean/input_tokens": 12.5, "std": float("nan")},
              "key_metrics": {"reward": 0.5}, "group_level_metrics": [{"note": "all fine"}]}]  # fmt: skip
    written = json.loads(write_aggregate_metrics(tmp_path, plain).read_text(encoding="utf-8"))
    assert written[0]["agent_metrics"] == {"mean/input_tokens": 12.5, "std": None}  # strict JSON: NaN is null
    assert written[0]["key_metrics"] == {"reward": 0.5}
    assert written[0]["group_level_metrics"] == [{"note": "all fine"}]
    leaky = [{"agent_ref": {"name": "a"}, "agent_metrics": {"echo": f"called with {secret}", "api_key": "abc123xyz789"},
              "key_metrics": {"reward": 1.0}}]  # fmt: skip
    text = write_aggregate_metrics(tmp_path, leaky).read_text(encoding="utf-8")
    assert secret not in text
    assert "abc123xyz789" not in text
    assert json.loads(text)[0]["key_metrics"] == {"reward": 1.0}
