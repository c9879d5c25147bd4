"""The one masking pass, bounded clean text, and the small defects around them (no Gym needed)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.dataset import DatasetError, read_tasks
from pytest_gym.core.masking import (
    _WORD_HINT_GROUPS,
    _WORD_HINTS,
    MAX_MESSAGE,
    clean_text,
    group_hints,
    holds_a_hint,
    json_depth_exceeds,
    mask_data,
    mask_secrets,
)
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.messages import clean_outcome, failure_message, fault_message
from pytest_gym.report.junit import postprocess_junit
from pytest_gym.runfolder.layout import ROLLOUTS_FILE, RUN_INFO_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter, aggregate_answer
from pytest_gym.runfolder.runinfo import load_reusable, write_run_info
from pytest_gym.runfolder.scrub import scrub_run_folder
from pytest_gym.runfolder.summary import write_summary
from tests.helpers.inner_runs import pytest_command
from tests.helpers.paths import ROOT

MARKER = "sk-pytestgym-MARKER-7f3a9c"


@pytest.fixture(autouse=True)
def policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)


# --- what is masked -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"the key {MARKER} here", "the key *** here"),
        (f"cut short: {MARKER[:11]}...", "cut short: ***..."),
        ("http://user:pa55word@host:8000/v1", "http://user:***@host:8000/v1"),
        ("https://ghp_abcdef123456@github.com/o/r", "https://***@github.com/o/r"),
        ("http://h/v1?api_key=abc123def&x=1&token=zzzzzz", "http://h/v1?api_key=***&x=1&token=***"),
        ("Authorization: Bearer abcdef123456", "Authorization: Bearer ***"),
        ('{"access_token": "ab\\"cdef", "n": 1}', '{"access_token": "***", "n": 1}'),
        ("{'api_key': 'hello-world-42', 'password': None}", "{'api_key': '***', 'password': None}"),
        ("password=hunter22 client_secret: s3cr3t!", "password=*** client_secret: ***"),
        ("curl -H 'x: Bearer abcDEFghijk'", "curl -H 'x: Bearer ***'"),
        # Counts and names that only look like credentials stay.
        ("input_tokens=12 max_tokens: 100 tokenizer=bpe reward_key=reward", None),
        ("policy_api_key: ${oc.env:GYM_POLICY_API_KEY,none}", None),
        ("--gym-export-opt custom.password=...: credentials are never taken", None),
        ("git@github.com:o/r.git and mailto:a@b", None),
        # Prose that only looks like a credential's context (issue 20): never touched.
        ("Explain HTTP Basic authentication", None),
        ("Basic Authentication, Bearer tokens and HTTP-Auth headers", None),
        ("The secret: the butler did it", None),
        ("Token: a unit of text.", None),
        ("Password: please enter it below; the client_secret: it is stored", None),
        ("a signal, a design, an assignment=done", None),
        ("ssh://git@github.com/o/r and https://pipelines.actions.githubusercontent.com/x", None),
        ("secret: /work/proj0/run and token: and/or", None),
        # ... and credentials in such text still are.
        ("Basic dXNlcjpwYXNzd29yZA==", "Basic ***"),
        ("authorization: bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", "authorization: bearer ***"),
        ("token=sk-abc123. And more", "token=***. And more"),
        ("client_secret: s3cr3t!", "client_secret: ***"),
        (
            "https://h.blob.core.windows.net/c/b?sv=2021&sig=AbC%2Bd",
            "https://h.blob.core.windows.net/c/b?sv=2021&sig=***",
        ),
        # A password holding "@" runs to the last "@" before the host, as URL parsers read it.
        (
            "ConnectError: https://judge:p@ss-9f8e7d@judge.example/v1",
            "ConnectError: https://judge:***@judge.example/v1",
        ),
        # A URL query's bare key (Google's ?key=AIza...), refused by the settings as a credential too.
        ("https://g.example/v1/m?key=AIzaSyD-0123456789abcdefGHIJ&alt=json", "https://g.example/v1/m?key=***&alt=json"),
        ("the key=value pair, ?key=1, a monkey=banana12345, ?turkey=club12345", None),
        # JSON quoted in a JSON string or a log line (an upstream error body Gym wraps).
        ('{\\"error\\": {\\"api_key\\": \\"escKEYabc123XYZ789\\"}}', '{\\"error\\": {\\"api_key\\": \\"***\\"}}'),
        (
            '\\"password\\":\\"hunter22\\", \\"token\\": \\"a unit of text\\"',
            '\\"password\\":\\"***\\", \\"token\\": \\"a unit of text\\"',
        ),
    ],
)
def test_mask_secrets(text: str, masked: str | None) -> None:
    assert mask_secrets(text) == (text if masked is None else masked)
    assert mask_secrets(mask_secrets(text)) == mask_secrets(text)  # idempotent: masking twice changes nothing


def test_mask_data_masks_credentials_under_secret_keys_and_known_secrets_everywhere() -> None:
    data = {
        "api_key": "sk-x1y2z3w4",
        "credentials": {"user": "u", "password": "pw-123456", "retries": 5},
        "auth": {"headers": {"x-token": "nested-token"}},
        "headers": {"Authorization": "Bearer abcDEF123456"},
        "out": ["Bearer abcdefgh1", {"text": f"echo {MARKER}"}],
        MARKER: 1,
        "input_tokens": 12,
        # A row's own fields named like secrets: prose and words are data, not credentials.
        "token": "a unit of text",
        "secret": "the butler did it",
        "token_ids": [101, 2023],
        "token_type": "word",
        "password_hint": "hunter",
        "policy_api_key": "${oc.env:GYM_POLICY_API_KEY}",
    }
    assert mask_data(data) == {
        "api_key": "***",
        "credentials": {"user": "u", "password": "***", "retries": 5},  # "u": no credential's length
        "auth": {"headers": {"x-token": "***"}},
        "headers": {"Authorization": "Bearer ***"},
        "out": ["Bearer ***", {"text": "echo ***"}],
        "***": 1,
        "input_tokens": 12,
        "token": "a unit of text",
        "secret": "the butler did it",
        "token_ids": [101, 2023],
        "token_type": "word",
        "password_hint": "hunter",
        "policy_api_key": "${oc.env:GYM_POLICY_API_KEY}",
    }


def test_masking_long_hostile_text_does_not_backtrack() -> None:
    """A hang guard, not a speed claim: a pattern that backtracks on these inputs takes hours on 2 MB (it took
    minutes on 200 kB before the patterns were anchored); linear masking takes well under a second, so 120 s
    tells the two apart on any machine, however loaded."""
    import threading

    texts = ("a" * 2_000_000, "token=" + "a" * 2_000_000, "http://" + "a." * 500_000, "a_" * 500_000 + "token")
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.extend(mask_secrets(text) for text in texts), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "masking backtracks on long hostile text"
    assert [len(r) for r in results[::2]] == [2_000_000, len(texts[2])]  # nothing to mask: unchanged


def test_clean_text_strips_control_characters_and_bounds() -> None:
    osc52 = "\x1b]52;c;ZXZpbA==\x07"
    text = clean_text(f"a{osc52}b\r\n\tc\ud800\u202e{MARKER}" + "x" * 5000, 2000)
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\r" not in text
    assert "\ud800" not in text
    assert "\u202e" not in text
    assert MARKER not in text
    assert text.startswith("a]52;c;ZXZpbA==b\n\tc***x")
    assert len(text) < 2100
    assert text.endswith("more characters]")


def test_json_depth() -> None:
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    assert json_depth_exceeds(deep)
    assert not json_depth_exceeds({"a": [{"b": 1}]})


# --- failure and fault messages ---------------------------------------------------------------------------------


def outcome(**fields: object) -> TrialOutcome:
    base: dict[str, object] = {
        "nodeid": "d.jsonl::abc[r0]",
        "task_hash": "ab" * 32,
        "repeat": 0,
        "line": 3,
        "dataset": "d.jsonl",
    }
    return TrialOutcome(**{**base, **fields})  # type: ignore[arg-type]


def test_failure_message_masks_and_bounds_verifier_fields() -> None:
    answer = {
        "reward": 0.0,
        "expected_answer": f"the key is {MARKER}",
        "api_key": "hunter2-not-in-env",
        "extracted_answer": "\x1b]52;c;ZXZpbA==\x07 pwned",
        "x" * 5000: "a long name",
        "blob": "y" * 2_000_000,
    }
    message = failure_message(outcome(reward=0.0, answer=answer), 1.0, "reward")
    assert MARKER not in message
    assert "hunter2" not in message
    assert "\x1b" not in message
    assert len(message) < MAX_MESSAGE
    assert "expected_answer: 'the key is ***'" in message


def test_fault_message_bounds_a_two_megabyte_error() -> None:
    message = fault_message(outcome(error="reward 'reward' is '" + "9" * 2_000_000 + f"{MARKER}'", error_class="x"))
    assert len(message) < 2_500
    assert MARKER[:8] not in message


def test_clean_outcome_masks_what_is_published_and_refuses_deep_answers() -> None:
    deep: dict[str, object] = {}
    for _ in range(200):
        deep = {"d": deep}
    leaky = outcome(reward=1.0, answer={"reward": 1.0, "text": MARKER}, agent=MARKER, error=None)
    clean_outcome(leaky)
    assert MARKER not in json.dumps(leaky.to_json())
    assert leaky.reward == 1.0
    assert leaky.ok
    hostile = outcome(reward=1.0, answer={"reward": 1.0, "deep": deep})
    clean_outcome(hostile)
    assert not hostile.ok
    assert hostile.error_class == "bad_body"
    assert hostile.answer is None


# --- writers ------------------------------------------------------------------------------------------------------


def test_run_folder_writer_masks_records(tmp_path: Path) -> None:
    request = {"responses_create_params": {"input": "hi"}, "_ng_task_index": 0, "_ng_rollout_index": 0}
    answer = {"reward": 1.0, "echo": f"key {MARKER}", "auth": {"password": "pw-123456"}, "url": "http://u:p4ss@h"}
    with RunFolderWriter(tmp_path) as writer:
        writer.record(outcome(reward=1.0, answer=answer, request=request))
        writer.record(outcome(error=f"HTTP 500: {MARKER}" + "z" * 100_000, error_class="http_status", request=request))
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert MARKER.encode() not in data
    assert b"pw-123456" not in data
    assert b"p4ss" not in data
    assert len(data) < 20_000  # the 100 kB error is bounded in the failures file
    assert json.loads((tmp_path / ROLLOUTS_FILE).read_text())["reward"] == 1.0


def test_summary_and_run_info_are_masked(tmp_path: Path) -> None:
    write_summary(tmp_path, {"s": {"mean_reward": 1.0}}, notes=[f"Gym said {MARKER}\x1b[2J" + "n" * 50_000])
    # Settings refuse such values (tests/unit/gym/test_startargs.py); the run info masks them all the same.
    unchecked = GymSettings.model_construct(model_url="http://u:pw-secret@host/v1", set=(f"+policy_api_key={MARKER}",))
    write_run_info(tmp_path, unchecked)
    text = (tmp_path / "pytest_gym_summary.json").read_text() + (tmp_path / RUN_INFO_FILE).read_text()
    assert MARKER not in text
    assert "pw-secret" not in text
    assert "\\u001b" not in text
    assert len(text) < 20_000


def test_junit_postprocess_masks_every_text(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1">'
        f'<testcase name="t" classname="c"><failure message="m {MARKER}">token={MARKER[::-1]}\x85</failure>'
        f"<system-out>Bearer abcdefghijk99</system-out></testcase></testsuite></testsuites>",
        encoding="utf-8",
    )
    postprocess_junit(xml, {}, keep_errors=True)
    text = xml.read_text(encoding="utf-8")
    assert MARKER not in text
    assert MARKER[::-1] not in text
    assert "abcdefghijk" not in text
    assert "\x85" not in text


def test_scrub_masks_foreign_files_in_place_and_keeps_their_length(tmp_path: Path) -> None:
    log = tmp_path / "gym_env.log"
    lines = [f"starting with key {MARKER}\n", "policy_base_url=http://u:pw-123456@h/v1\n", "x" * 3_000_000 + MARKER]
    log.write_text("".join(lines), encoding="utf-8")
    (tmp_path / "outputs" / "day").mkdir(parents=True)
    (tmp_path / "outputs" / "day" / "config.yaml").write_text(f"policy_api_key: {MARKER}\n", encoding="utf-8")
    (tmp_path / "venv-link").symlink_to(ROOT)  # never followed
    size = log.stat().st_size
    assert scrub_run_folder(tmp_path) == []
    data = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink())
    assert MARKER.encode() not in data
    assert b"pw-123456" not in data
    assert log.stat().st_size == size


def test_scrub_leaves_json_files_that_only_look_suspicious_as_gym_wrote_them(tmp_path: Path) -> None:
    """Prose or a field name that hints at a secret ("token_type", "the password is in the manual") makes a file
    worth parsing, not worth rewriting: Gym's files keep their bytes (formatting, key order) when nothing is masked."""
    compact = '{"token_type":"bearer","note":"the password is in the manual","n":[1,2]}'
    (tmp_path / "metrics.json").write_text(compact, encoding="utf-8")
    lines = '{"token_type": "bearer", "reward": 1.0}\n{"note":"the password is in the manual"}\n'
    (tmp_path / "extra.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "leak.json").write_text(f'{{"api_key":"{MARKER}","n":1}}', encoding="utf-8")
    assert scrub_run_folder(tmp_path) == []
    assert (tmp_path / "metrics.json").read_text(encoding="utf-8") == compact
    assert (tmp_path / "extra.jsonl").read_text(encoding="utf-8") == lines
    assert MARKER not in (tmp_path / "leak.json").read_text(encoding="utf-8")  # a secret is still masked


@pytest.fixture
def umask() -> Iterator[None]:
    before = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(before)


def test_new_files_respect_the_umask(tmp_path: Path, umask: None) -> None:
    write_atomically(tmp_path / "a.json", b"{}")
    with RunFolderWriter(tmp_path / "run"):
        pass
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "run" / ROLLOUTS_FILE).stat().st_mode) == 0o640
    (tmp_path / "a.json").chmod(0o600)
    write_atomically(tmp_path / "a.json", b"[]")  # an existing file keeps its mode
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o600


# --- smaller defects ----------------------------------------------------------------------------------------------


def test_lone_surrogate_is_a_dataset_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"responses_create_params": {"input": "ok"}}\n{"responses_create_params": {"input": "\\ud800"}}\n')
    with pytest.raises(DatasetError) as info:
        read_tasks(path)
    assert str(info.value).startswith(f"{path}:2: the row holds a lone UTF-16 surrogate")


def test_lone_surrogate_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("d.jsonl").write_text('{"responses_create_params": {"input": "\\udfff"}}\n')
    result = pytester.runpytest("--gym-dataset", "d.jsonl", "--co")
    result.stdout.fnmatch_lines(["*d.jsonl:1: the row holds a lone UTF-16 surrogate*", "*fix: replace the escape*"])
    assert "UnicodeEncodeError" not in result.stdout.str()


def _resume_folder(tmp_path: Path, reward: str) -> Path:
    folder = tmp_path / "earlier"
    write_run_info(folder, GymSettings())
    (folder / ROLLOUTS_FILE).write_text(
        '{{"reward": {}, "_pytest_gym_task_hash": "{}", "_ng_rollout_index": 0}}\n'.format(reward, "ab" * 32)
    )
    return folder


def test_resume_does_not_reuse_a_nan_reward(tmp_path: Path) -> None:
    assert load_reusable(_resume_folder(tmp_path, "1.0"), GymSettings()).take("ab" * 32, 0) is not None
    reusable = load_reusable(_resume_folder(tmp_path, "NaN"), GymSettings())
    assert reusable.take("ab" * 32, 0) is None
    assert "without a finite 'reward' are run again" in reusable.note


def test_resume_with_a_non_object_run_info_says_so(tmp_path: Path) -> None:
    folder = _resume_folder(tmp_path, "1.0")
    (folder / RUN_INFO_FILE).write_text("[1, 2]")
    reusable = load_reusable(folder, GymSettings())
    assert reusable.records == {}
    assert "holds a JSON list, not the object pytest-gym writes" in reusable.note


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"agent_metrics": [1], "key_metrics": {}}', "'agent_metrics' is a JSON list, not an object"),
        (b'{"agent_metrics": {}, "group_level_metrics": "x"}', "'group_level_metrics' is a JSON str, not a list"),
        (b'{"agent_metrics": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests deeper than"),
        (b'{"a": ' + b'{"a": ' * 100 + b"1" + b"}" * 101, "nests deeper than"),
        (b"{not json", "not JSON"),
    ],
)
def test_hostile_aggregate_answers_are_a_clear_value_error(answer: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        aggregate_answer(answer)


def test_proc_self_environ_as_a_dataset_does_not_print_the_key(tmp_path: Path) -> None:
    """A suite file pointing at /proc/self/environ: the collection error shows its start, masked."""
    (tmp_path / "leak.gym.yaml").write_text("dataset: /proc/self/environ\n", encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # The key first in the environment, so that the excerpt (the first 80 characters) holds it.
    env = {"GYM_POLICY_API_KEY": MARKER, "MY_SERVICE_TOKEN": "tok-abcdef123456", "PYTHONPATH": str(ROOT)}
    env.update({k: v for k, v in os.environ.items() if k not in env and "KEY" not in k and "TOKEN" not in k})
    result = subprocess.run(
        pytest_command("leak.gym.yaml"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert "leak.gym.yaml" in output, output
    assert "invalid JSON" in output, output
    assert MARKER not in output
    assert "tok-abcdef123456" not in output
    assert "GYM_POLICY_API_KEY=***" in output


def test_known_secrets_follow_every_change_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets are cached between calls; a variable set, changed or removed must still count at once."""
    from pytest_gym.core.masking import known_secrets

    monkeypatch.setenv("SERVICE_TOKEN", "first-secret-value")
    assert "first-secret-value" in known_secrets()
    monkeypatch.setenv("SERVICE_TOKEN", "second-secret-value")
    assert "second-secret-value" in known_secrets()
    assert "first-secret-value" not in known_secrets()
    monkeypatch.setenv("PLAIN_SETTING", "not-a-secret-value")
    assert "not-a-secret-value" not in known_secrets()
    monkeypatch.delenv("SERVICE_TOKEN")
    assert "second-secret-value" not in known_secrets()
    assert mask_secrets("say second-secret-value") == "say second-secret-value"
    monkeypatch.setenv("GYM_POLICY_API_KEY", "policy-key-value")
    assert mask_secrets("say policy-key-value") != "say policy-key-value"
    secrets = known_secrets()
    secrets.clear()  # a caller changing its copy must not change the next answer
    assert "policy-key-value" in known_secrets()


def test_a_variable_registered_as_secret_counts_at_once_though_no_variable_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The secret-named variables are found again only when the set of variables changes, or when a name is
    registered (``--gym-header NAME=ENVVAR``): the names already seen are no reason to miss the new one."""
    from pytest_gym.core import masking

    monkeypatch.setattr(masking, "_SECRET_ENV", set())
    monkeypatch.setenv("PLAIN_HEADER_VALUE", "header-value-123")
    assert "header-value-123" not in masking.known_secrets()
    masking.register_secret_env("PLAIN_HEADER_VALUE")
    assert "header-value-123" in masking.known_secrets()
    assert masking.mask_secrets("sent header-value-123") == "sent ***"


def test_url_and_path_valued_secret_variables_cut_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub Actions' OIDC URL and a service-account path are "secret-named" but hold no secret (issue 20)."""
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", "https://pipelines.actions.githubusercontent.com/abc/idtoken")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/work/proj0/gcp-sa.json")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "keys/aws.ini")
    monkeypatch.setenv("SERVICE_TOKEN_MODE", "disabled")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.payload42")
    text = "see https://pipelines.actions.githubusercontent.com/x and https://github.com, run /work/proj0/run, disabled"
    assert mask_secrets(text) == text
    assert mask_data({"url": text, "path": "/work/proj0/gcp-sa.json"}) == {
        "url": text,
        "path": "/work/proj0/gcp-sa.json",
    }
    # The credential among them still is masked, also when cut short, but not a word that only starts like it.
    assert mask_secrets("jwt eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.payload42!") == "jwt ***!"
    assert mask_secrets("cut eyJ0eXAiOiJKV1Qi...") == "cut ***..."
    assert mask_secrets("other eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9") == "other eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9"


def test_a_header_variable_is_masked_whole_and_its_token_when_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gym.core.masking import register_secret_env

    monkeypatch.setenv("PROXY_AUTH_VALUE", "Bearer tok-proxy-9f8e7d6c")
    register_secret_env("PROXY_AUTH_VALUE")
    assert mask_secrets("sent Bearer tok-proxy-9f8e7d6c") == "sent ***"
    assert mask_secrets("cut tok-proxy-9f8e...") == "cut ***..."
    assert mask_secrets("Bearer authentication, tok-proxy-other") == "Bearer authentication, tok-proxy-other"


_HINTS = ("api_key", "apikey", "access-key", "sig=", "sig:", "signature", "passw", "passphrase", "secret", "bearer")
_PIECES = st.sampled_from(["api", "_key", "key", "access", "-", "sig", "=", ":", "nature", "pass", "w", "phrase",
                           "secret", "bear", "er", "x", " ", "design", "signal"])  # fmt: skip


@given(st.lists(_PIECES, max_size=12).map("".join))
def test_the_grouped_hint_search_says_what_a_search_per_hint_says(text: str) -> None:
    """The cheap pre-check of every record and answer looks for a core ("sig") before its hints ("sig=",
    "signature"): it must never clear a text that a search for each hint would not."""
    groups = group_hints(_HINTS, ("api", "access", "sig", "pass"))
    assert holds_a_hint(text, groups) == any(hint in text for hint in _HINTS)


def test_every_hint_is_in_exactly_one_group() -> None:
    groups = group_hints(_WORD_HINTS, ("api", "access", "private", "sig", "pass", "key="))
    listed = [hint for core, members in groups for hint in (members or (core,))]
    assert sorted(listed) == sorted(_WORD_HINTS)
    assert all(core in hint for core, members in groups for hint in members)
    assert groups == _WORD_HINT_GROUPS
