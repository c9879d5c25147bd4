"""``--gym-export wandb``: offline, with no server, the run directory wandb writes holds the suite's scalars, the
per-task table, the gates and the run folder as an artifact, read back with the wandb library (its protobuf
records), and no secret; the API key is taken only from the environment.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.exporters.api import ExportRun
from pytest_gym.exporters.wandb import WandbExporter, WandbSettings, wandb_run_id
from tests.helpers.standin import StandinGym, reply, serving

pytest.importorskip("wandb")

AGENT = "fake_agent"
MARKER = "sk-pytestgym-WANDB-5e1d"
_BLOCK, _HEADER = 32 * 1024, 7


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a ``.wandb`` file (LevelDB log framing: 32 KiB blocks, 7-byte record headers), parsed
    with the wandb library's own protobuf."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 0:
            break
        if kind in (2, 3):  # first and middle parts of a record that spans blocks
            pending = chunk if kind == 2 else pending + chunk
            continue
        if kind == 4:
            chunk, pending = pending + chunk, b""
        record = pb.Record()
        record.ParseFromString(chunk)
        yield record


def summary_of(run_dir: Path) -> dict[str, Any]:
    """The run's final summary: every summary update in the file, applied in order."""
    summary: dict[str, Any] = {}
    for record in wandb_records(next(run_dir.glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return summary


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        # a verifier that echoes the key back: what is exported must be masked
        server.routes["/run"] = lambda request: reply(
            {"reward": float("good" in json.dumps(request.json())), "echo": MARKER,
             "response": {"usage": {"input_tokens": 2, "output_tokens": 1, "total_tokens": 3}}}
        )  # fmt: skip
        yield server


def test_offline_run_directory_holds_scalars_task_table_and_no_secret(
    pytester: pytest.Pytester, gym: StandinGym, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    monkeypatch.setenv("WANDB_MODE", "online")  # the exporter's own setting wins: offline, no server
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    pytester.makeini("[pytest]\n")
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": c}]}} for c in ("good", "bad", "good 2")]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = (
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "--gym-gate", "mean_reward>=0.5", "--gym-export", "wandb", "--gym-export-opt", "wandb.mode=offline",
        "--gym-export-opt", "wandb.dir=wb", "--gym-run-dir", "run", "-p", "no:cacheprovider", "-p", "no:randomly",
    )  # fmt: skip
    result = pytester.runpytest_subprocess(*args, timeout=600)
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines(["export wandb: succeeded - logged * suite scalars, 3 tasks, the gates and * files*"])
    found = list((pytester.path / "wb" / "wandb").glob("offline-run-*"))
    assert len(found) == 1
    run_dir = found[0]
    assert run_dir.name.endswith(wandb_run_id("run"))

    summary = summary_of(run_dir)
    assert summary["data.jsonl/mean_reward"] == pytest.approx(2 / 3)
    assert summary["data.jsonl/trials"] == 6
    assert summary["data.jsonl/gate/mean_reward_ge_0.5"] == 1.0
    tables = {p.name.split("_")[0]: json.loads(p.read_text()) for p in (run_dir / "files").rglob("*.table.json")}
    tasks = tables["tasks"]
    assert tasks["columns"][:3] == ["suite", "task", "trials"]
    assert sorted((row[3], row[5]) for row in tasks["data"]) == [(2, 0.0), (2, 1.0), (2, 1.0)]
    assert tables["gates"]["data"][0][:3] == ["data.jsonl", "mean_reward>=0.5", True]
    artifacts = [
        r for r in wandb_records(next(run_dir.glob("run-*.wandb"))) if r.WhichOneof("record_type") == "artifact"
    ]
    names = {entry.path for record in artifacts for entry in record.artifact.manifest.contents}
    assert {"rollouts.jsonl", "pytest_gym_summary.json"} <= names
    leaked = [
        str(p) for p in pytester.path.joinpath("wb").rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()
    ]
    assert leaked == []


def test_exporting_twice_is_skipped_and_online_needs_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    (run_dir / "pytest_gym_summary.json").write_text(json.dumps({"run_dir": str(run_dir), "suites": {}}))
    run = ExportRun.from_run_dir(run_dir, {"reward_key": "reward"}, 0)
    exporter = WandbExporter(WandbSettings(mode="offline", dir=str(tmp_path / "wb")))
    assert exporter.export(run).status == "succeeded"
    second = exporter.export(run)
    assert second.status == "skipped"
    assert "already W&B run" in second.message
    online = WandbExporter(WandbSettings(mode="online")).export(run)
    assert online.status == "failed"
    assert "WANDB_API_KEY" in online.message


def test_the_api_key_is_refused_on_the_command_line(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text('{"responses_create_params": {"input": "q"}}\n')
    result = pytester.runpytest_subprocess(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "data.jsonl", "--gym-export", "wandb",
        "--gym-export-opt", f"wandb.api_key={MARKER}",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "read only from $WANDB_API_KEY" in result.stderr.str()
    assert MARKER not in result.stdout.str() + result.stderr.str()
