"""Every setting of the plugin: one declaration, one help text, one lookup order.

Lookup order for each setting: the command line, then a suite file (when the
setting may appear there), then the ini file (``gym_<name>``), then the default.
Standard library only: ``plugin.py`` registers the options from this table on
every pytest start, before anything shows that pytest-gym is in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["str", "int", "float", "list", "flag"]


@dataclass(frozen=True)
class Spec:
    """How one setting is spelled on the command line and in the ini file."""

    name: str
    help: str
    kind: Kind = "str"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    is_path: bool = False

    @property
    def flag(self) -> str:
        return "--gym-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "gym_" + self.name

    @property
    def dest(self) -> str:
        return "gym_" + self.name


SPECS: tuple[Spec, ...] = (
    Spec(
        "dataset",
        "jsonl dataset to run as tests; repeatable (ini: gym_dataset, one path a line, relative to rootdir)",
        "list",
        "PATH",
        is_path=True,
    ),
    Spec("repeats", "trials per task, reported as [r0], [r1], ... (default 1)", "int", "N"),
    Spec("url", "attach to a running Gym head server (e.g. http://127.0.0.1:11000); starts nothing", metavar="URL"),
    Spec("config", "Gym config file for `gym env start --config`; repeatable", "list", "PATH", is_path=True),
    Spec("resources_server", "resources server to start (`gym env start --resources-server`)", metavar="NAME"),
    Spec("model_type", "model server type to start (default openai_model)", metavar="TYPE"),
    Spec(
        "set",
        "extra Gym setting KEY=VALUE, passed as Hydra +KEY=VALUE (write ++KEY=VALUE to override); repeatable",
        "list",
        "KEY=VALUE",
    ),
    Spec(
        "model_url",
        "policy model base URL (OpenAI-compatible, e.g. http://host:8000/v1); key from $GYM_POLICY_API_KEY",
        metavar="URL",
    ),
    Spec("model", "policy model name", metavar="NAME"),
    Spec(
        "agent",
        "agent to route every row to (sets agent_ref); default: the row's own, else the only agent",
        metavar="NAME",
    ),
    Spec(
        "policy",
        "built-in policy: 'scripted' starts a deterministic local model server; 'record' puts a recording "
        "proxy in front of --gym-model-url (answers saved to cassette.jsonl in the run folder); 'replay' "
        "serves the answers of --gym-cassette with no model at all (default none)",
        choices=("none", "scripted", "record", "replay"),
    ),
    Spec(
        "cassette",
        "recorded model answers for --gym-policy replay: a cassette.jsonl or the run folder of a recording",
        metavar="PATH",
        is_path=True,
    ),
    Spec(
        "replay_miss",
        "a model call with no recording under --gym-policy replay: 'error' (the trial errors, naming the "
        "differing request field) or 'passthrough' (sent to --gym-model-url and recorded) (default error)",
        choices=("error", "passthrough"),
    ),
    Spec("policy_answer", "what the scripted policy answers (default \\boxed{A})", metavar="TEXT"),
    Spec("policy_latency_ms", "latency the scripted policy adds to each call, in ms (default 0)", "float", "MS"),
    Spec("cli", "the gym executable (default: `gym` on PATH)", metavar="PATH"),
    Spec(
        "server_venv",
        "run every Gym server in this venv instead of building one each ('auto': the gym CLI's own venv)",
        metavar="PATH|auto",
        is_path=True,
    ),
    Spec(
        "run_dir",
        "folder for this run's Gym log and artifacts: new or empty (default: a new folder under .pytest_gym/runs)",
        metavar="PATH",
        is_path=True,
    ),
    Spec(
        "trajectories",
        "'on' (default): Gym captures every model call into the run folder and the records get Gym's "
        "ng_trajectory/ng_perf, as `gym eval run` writes them (for gym eval export/health-check); 'off'",
        choices=("on", "off"),
    ),
    Spec("startup_timeout", "seconds to wait for Gym to be ready (default 240)", "float", "S"),
    Spec("shutdown_grace", "seconds Gym gets to stop after SIGINT before SIGTERM/SIGKILL (default 30)", "float", "S"),
    Spec(
        "reuse",
        "keep the Gym this run starts running in folder DIR for later runs with the same start settings, and "
        "attach to one kept there; it stops when unused (--gym-reuse-idle), when your terminal session or CI job "
        "ends, or now: python -m pytest_gym stop-kept DIR",
        metavar="DIR",
        is_path=True,
    ),
    Spec("reuse_idle", "seconds a kept Gym (--gym-reuse) may stay unused before it stops (default 900)", "float", "S"),
    Spec("trial_timeout", "seconds one rollout may take (default 600)", "float", "S"),
    Spec(
        "concurrency",
        "rollouts in flight for the whole run, across all xdist workers together (default 8)",
        "int",
        "C",
    ),
    Spec("reward_key", "field of Gym's answer that holds the reward (default reward)", metavar="KEY"),
    Spec("min_reward", "a trial passes when its reward is at least this (default 1.0)", "float", "X"),
    Spec(
        "retries",
        "attempts after an infrastructure fault, with jittered exponential backoff; never for a low reward (default 0)",
        "int",
        "N",
    ),
    Spec(
        "max_errors",
        "once more trials than N (or P% of the run's) errored, report the rest as errors at once",
        metavar="N|P%",
    ),
    Spec(
        "resume",
        "reuse the finished trials of an earlier run folder (same agent, model and environment)",
        metavar="RUN_DIR",
        is_path=True,
    ),
    Spec(
        "rescore",
        "re-verify the saved answers of an earlier run folder with the current resources server (Gym's /verify); "
        "no model is called, the trials report the new rewards",
        metavar="RUN_DIR",
        is_path=True,
    ),
    Spec(
        "rescore_force",
        "with --gym-rescore: re-verify even resources servers whose verification is not stateless",
        "flag",
    ),
    Spec("progress_interval", "seconds between progress lines on long runs (default 10; -q hides them)", "float", "S"),
    Spec(
        "gate",
        "suite gate '<metric> <op> <number>'; metrics: mean_reward, pass@K, pass^K, error_rate, "
        "ci_low(mean_reward); repeatable",
        "list",
        "EXPR",
    ),
    Spec(
        "verdict",
        "'trial': every low-reward trial fails (default); "
        "'gate': low rewards are xfail, only gates, regressions and errors fail the run; "
        "'task': one test per task (<dataset>::<hash>), its repeats judged together by --gym-task-pass",
        choices=("trial", "gate", "task"),
    ),
    Spec(
        "baseline",
        "baseline file to compare this run with (per-task results by content hash)",
        metavar="PATH",
        is_path=True,
    ),
    Spec("update_baseline", "write this run's results to --gym-baseline (atomically)", "flag"),
    Spec(
        "baseline_run",
        "an earlier run folder to compare answer by answer: the report's Changes section and the terminal show "
        "both answers of every task that flipped or moved; with --gym-update-baseline, the run folder the "
        "baseline file remembers for later runs (default: the one it remembers)",
        metavar="RUN_DIR",
        is_path=True,
    ),
    Spec(
        "known_failures",
        "YAML list of known failures (task: hash prefix or node id, reason:, link:, expires:): their failing "
        "trials xfail, their passing ones XPASS ('fixed: remove from the list'), gates leave them out",
        metavar="PATH",
        is_path=True,
    ),
    Spec("known_failures_strict", "a listed task's passing trial fails the run (XPASS strict)", "flag"),
    Spec(
        "max_regression",
        "a drop of mean reward shown larger than this (one-sided p < 0.05) fails the run (default 0.0)",
        "float",
        "X",
    ),
    Spec("export", "exporter to run at the end (summary, mlflow, github, or a plugin's); repeatable", "list", "NAME"),
    Spec(
        "export_opt",
        "exporter setting NAME.KEY=VALUE (credentials come from the environment); repeatable",
        "list",
        "NAME.KEY=VALUE",
    ),
    Spec("export_soft", "a failed export is reported but does not fail the run", "flag"),
    Spec(
        "summary",
        "write the run summary (suite metrics, gates, baseline) as JSON here as well",
        metavar="PATH",
        is_path=True,
    ),
    Spec(
        "html",
        "write the HTML report here as well (it is always written into the run folder as report.html)",
        metavar="PATH",
        is_path=True,
    ),
    # -- judging: task-pass rule, prices, row fields as keywords and markers --------------------------
    Spec(
        "task_pass",
        "when a task passes, for new_failures/fixed, baselines, --gym-verdict task and adaptive repeats: 'all' "
        "its trials reach --gym-min-reward (default), a 'majority' of them, 'any', or at least a share of them "
        "(0.8, or a count such as 4/5)",
        metavar="all|majority|any|0.8|4/5",
    ),
    Spec("price_in", "price per million input tokens: adds the cost to the suite totals", "float", "PRICE"),
    Spec("price_out", "price per million output tokens: adds the cost to the suite totals", "float", "PRICE"),
    Spec(
        "keyword_field",
        "row field whose short string value (or list of strings) -k matches, as VALUE and FIELD:VALUE; "
        "repeatable, replaces the defaults id, task_id, uuid, category, name, difficulty, tags",
        "list",
        "NAME",
    ),
    Spec(
        "marker_field",
        "row field whose value (or each string of a list) becomes a marker on the row's trials, for -m "
        "(made an identifier: other characters become _)",
        metavar="NAME",
    ),
    # -- sharding across CI jobs (issue 15) --
    Spec(
        "shard",
        "run only shard I of N (1-based) of every dataset's tasks, split by task hash; 'auto': from the CI's "
        "variables (CI_NODE_INDEX/CI_NODE_TOTAL, BUILDKITE_PARALLEL_JOB/_COUNT, CIRCLE_NODE_INDEX/_TOTAL); "
        "gates and baselines are deferred to the merge",
        metavar="I/N|auto",
    ),
    Spec("shard_verdicts", "judge gates and baselines in a shard anyway (on the shard's part of the suite)", "flag"),
    Spec(
        "merge",
        "judge the union of these shard run folders as one run (starts no Gym, runs no rollout); repeatable",
        "list",
        "RUN_DIR",
        is_path=True,
    ),
    Spec("merge_allow_missing", "with --gym-merge: deselect trials no shard ran instead of failing", "flag"),
    # -- a Gym on another host (issue 15) --
    Spec(
        "header",
        "HTTP header NAME sent with every request to the --gym-url origin (and each --gym-header-origin), its "
        "value read from environment variable ENVVAR (e.g. Authorization=GYM_AUTH); repeatable",
        "list",
        "NAME=ENVVAR",
    ),
    Spec(
        "header_origin",
        "another origin (scheme://host:port) that gets the --gym-header headers, e.g. a Gym server the head "
        "lists elsewhere; repeatable (default: only the --gym-url origin)",
        "list",
        "URL",
    ),
    Spec(
        "ca_file", "trust this CA bundle (PEM) for https Gym URLs (default: the system's)", metavar="PATH", is_path=True
    ),
)

# -- Gym fidelity: the gym process's environment, Hydra parameters, run timeout, benchmarks ----------
SPECS += (
    Spec(
        "env",
        "environment variable KEY=VALUE for the gym processes (a secret-looking KEY is refused: pass its "
        "value by name with --gym-secret-env); repeatable",
        "list",
        "KEY=VALUE",
    ),
    Spec(
        "secret_env",
        "environment variable passed through to Gym by name (it must be set); its value is masked everywhere "
        "and never written (Gym reads it with ${oc.env:NAME}); repeatable",
        "list",
        "NAME",
    ),
    Spec(
        "bind_resources_server",
        "bind a composable agent that leaves resources_server.name unset (e.g. simple_agent.yaml) to the "
        "config's only resources server ('auto', the default), to NAME, or not at all ('off')",
        metavar="auto|off|NAME",
    ),
    Spec(
        "hydra",
        "Gym setting DOTTED.KEY=VALUE (VALUE read as YAML), passed as ++DOTTED.KEY=VALUE quoted for Hydra; "
        "suite files: a nested 'hydra:' mapping; repeatable",
        "list",
        "KEY=VALUE",
    ),
    Spec(
        "run_timeout",
        "seconds the whole collection may take; trials not finished by then error ('run timeout'), Gym is stopped",
        "float",
        "S",
    ),
    Spec(
        "benchmark",
        "Gym benchmark to run as a suite named after it (`gym env start --benchmark`, data from "
        "`gym eval prepare`); repeatable",
        "list",
        "NAME",
    ),
    Spec(
        "search_dir",
        "extra root where Gym looks for benchmarks/NAME and configs (`--search-dir`); repeatable",
        "list",
        "DIR",
        is_path=True,
    ),
    Spec(
        "benchmark_data",
        "the prepared jsonl of --gym-benchmark (one benchmark), when `gym eval prepare` cannot run here (offline)",
        metavar="PATH",
        is_path=True,
    ),
)

# -- Gym-native depth: rollout health, traces, rate limits, Gym's next shapes (issue 25) ----------
SPECS += (
    Spec(
        "health_check",
        "'on' (default): every answer is checked as it comes (no completion tokens, a hollow turn, a failed model "
        "call are errors naming Gym's check) and Gym's own health checks run on the run folder at the end, in "
        "Gym's interpreter (gate metrics health_clean_rate, unhealthy_trials); 'off'",
        choices=("on", "off"),
    ),
    Spec(
        "trace_url",
        "link to a trial's trace, with {trace_id} (e.g. https://jaeger.example/trace/{trace_id}): in failure "
        "messages, JUnit properties and the report (every /run carries a W3C traceparent, one trace per trial)",
        metavar="TEMPLATE",
    ),
    Spec("tracestate", "W3C tracestate sent with every /run beside its traceparent (key=value,...)", metavar="TEXT"),
    Spec(
        "concurrency_adaptive",
        "'on' (default): on HTTP 429/503 the run's concurrency limit halves and then grows back by one per "
        "window up to --gym-concurrency, shared by all xdist workers; 'off': a fixed --gym-concurrency",
        choices=("on", "off"),
    ),
    Spec(
        "agent_type",
        "agent (NAME or NAME/FLAVOR) that runs the benchmarks and environments Gym starts (`--agent-type`)",
        metavar="NAME",
    ),
)

# -- affordable runs (issue 22): budgets, adaptive repeats, sequential gates ------------------------------
SPECS += (
    Spec(
        "max_cost",
        "stop dispatching once the run's trials cost this much (needs --gym-price-in/--gym-price-out); trials in "
        "flight finish, the rest are skipped; suite files: max_cost, the suite's own budget",
        "float",
        "USD",
    ),
    Spec(
        "max_tokens",
        "stop dispatching once the run's trials used this many tokens (Gym's usage); trials in flight finish, the "
        "rest are skipped; suite files: max_tokens, the suite's own budget",
        "int",
        "N",
    ),
    Spec(
        "repeats_adaptive",
        "stop a task's repeats once its verdict under --gym-task-pass cannot change; the repeats not run are "
        "skipped ('decided')",
        "flag",
    ),
    Spec(
        "sequential",
        "run each suite's tasks in a seeded random order and stop once every gate is decided for the whole suite "
        "at 95% (anytime-valid confidence sequences); the rest are skipped ('decided')",
        "flag",
    ),
    Spec(
        "seed", "seed of --gym-sequential's task order (default: from the run folder's name, new each run)", "int", "N"
    ),
)

SPEC_BY_NAME: dict[str, Spec] = {spec.name: spec for spec in SPECS}


#: A suite file: a dataset plus its settings, collected wherever pytest looks for tests.
SUITE_SUFFIX = ".gym.yaml"


def is_suite_file(path: Path) -> bool:
    return path.name.endswith(SUITE_SUFFIX)
