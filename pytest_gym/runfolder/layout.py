"""Every file of a run folder, named once: Gym's own four, pytest-gym's records, logs and coordination files.

A run folder is ``.pytest_gym/runs/<stamp>/`` (or ``--gym-run-dir``); Gym's tools read its first four files
as their own. Everything else that reads or writes a run folder takes the names from here.
"""

from __future__ import annotations

# -- Gym's layout (what `gym eval run -o D/rollouts.jsonl` writes) ----------------------------------------------
ROLLOUTS_FILE = "rollouts.jsonl"
FAILURES_FILE = "rollouts_failures.jsonl"
MATERIALIZED_FILE = "rollouts_materialized_inputs.jsonl"
AGGREGATE_FILE = "rollouts_aggregate_metrics.json"
#: Gym's model-call captures (``--gym-trajectories``), one file per rollout.
CAPTURE_DIR = "model_calls"
#: What Gym's health checks write into the folder they check (``nemo_gym/health/types.py``).
HEALTH_SUMMARY_FILE = "quality_summary.json"
HEALTH_VERDICTS_FILE = "rollout_verdicts.jsonl"

# -- pytest-gym's records ---------------------------------------------------------------------------------------
#: What the rollouts depended on (the resume/merge basis), a shard's part and datasets.
RUN_INFO_FILE = "pytest_gym_run.json"
#: Held while the run info is written (its task ranges and its settings come from different processes).
RUN_INFO_LOCK = ".run_info.lock"
#: Every suite's numbers, gates and baseline comparison (``SuiteSummary``).
SUMMARY_FILE = "pytest_gym_summary.json"
REPORT_FILE = "report.html"
#: Gym's own aggregate metrics for each benchmark suite.
BENCHMARK_METRICS_FILE = "gym_benchmark_metrics.json"
#: --gym-rescore: the re-verified answers, and what the rescore moved.
RESCORED_FILE = "rescored.jsonl"
RESCORE_INFO_FILE = "rescore.json"
#: --gym-rescore: the empty cassette Gym's model points at (a replay server that refuses every call).
NO_MODEL_CASSETTE = "rescore_no_model.jsonl"
#: Recorded model calls (--gym-policy record) and the calls a replay could not answer.
CASSETTE_FILE = "cassette.jsonl"
MISSES_FILE = "replay_misses.jsonl"

# -- logs -------------------------------------------------------------------------------------------------------
GYM_LOG = "gym_env.log"
PREPARE_LOG = "gym_prepare.log"
POLICY_LOG = "policy.log"
RECORDER_LOG = "recorder.log"

# -- coordination between the processes of one run --------------------------------------------------------------
#: The deployment this run started or attached to (any process reads it; the owner stops it).
STATE_FILE = "deployment.json"
DEPLOYMENT_LOCK = ".deployment.lock"
#: Created by the one trial (of any process) that reports why Gym is unavailable; the others say "not run".
UNAVAILABLE_REPORTED = ".gym-unavailable-reported"
BENCHMARKS_LOCK = ".benchmarks.lock"
#: In attach mode, the servers a worker discovered: the controller asks for the aggregate metrics there.
ATTACHED_FILE = "attached.json"
#: When a run with --gym-run-timeout started (seconds since the epoch): xdist workers read the owner's.
RUN_STARTED_FILE = "run_started"
#: Trials that errored, counted across processes (--gym-max-errors).
ERRORS_FILE = ".errors"
#: The run's adaptive concurrency limit, shared by the processes of the run, and its log (--gym-concurrency-adaptive).
CONCURRENCY_STATE = ".concurrency"
CONCURRENCY_LOG = "concurrency.jsonl"
#: Finished trials (suite, task, repeat, reward, usage), appended by the process that ran each one and read
#: by every process: budgets, adaptive repeats and sequential gates decide from it (``rollout.ledger``).
LEDGER_FILE = ".ledger"
#: One claim file per trial under xdist.
BOARD_DIR = ".xdist-trials"
POLICY_PORT_FILE = "policy.port"
RECORDER_PORT_FILE = "recorder.port"

#: Run-folder files handed to exporters (the ones that exist).
EXPORTED_FILES = (
    ROLLOUTS_FILE,
    FAILURES_FILE,
    MATERIALIZED_FILE,
    AGGREGATE_FILE,
    SUMMARY_FILE,
    REPORT_FILE,
    GYM_LOG,
    PREPARE_LOG,
    BENCHMARK_METRICS_FILE,
    POLICY_LOG,
    HEALTH_SUMMARY_FILE,
    HEALTH_VERDICTS_FILE,
)
