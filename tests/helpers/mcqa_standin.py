"""A Gym that answers multiple-choice rows like mcqa, for the reviewer's-view tests (known failures, answer
diffs, comments, history) that need no real Gym: the one stand-in Gym (``tests.helpers.standin``), its
``/run`` scripted to answer each row with a letter (``answers``: question -> letter, else ``default``), the
reward 1.0 exactly when the letter is the row's ``expected_answer``, and the answer shaped as Gym's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.standin import Request, StandinGym, serving

AGENT = "fake_agent"

#: The five questions and the letters they expect (as Gym's mcqa example: B, C, I, E, E).
EXPECTED = ["B", "C", "I", "E", "E"]


def rows(n: int = 5) -> list[dict[str, Any]]:
    return [
        {
            "responses_create_params": {"input": [{"role": "user", "content": f"Question {i}: pick a letter."}]},
            "expected_answer": EXPECTED[i % len(EXPECTED)],
        }
        for i in range(n)
    ]


def write_dataset(folder: Path, n: int = 5, name: str = "data.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(n)), encoding="utf-8")
    return path


class McqaGym:
    """The fake Gym and what it answers; change ``default``/``answers`` between runs."""

    def __init__(self, server: StandinGym) -> None:
        self.server = server
        self.default = "E"
        self.answers: dict[int, str] = {}
        server.routes["/run"] = self._run

    @property
    def url(self) -> str:
        return self.server.base_url

    def _run(self, request: Request) -> tuple[int, bytes]:
        body = request.json()
        content = body["responses_create_params"]["input"][0]["content"]
        question = int(content.split()[1].rstrip(":"))
        letter = self.answers.get(question, self.default)
        text = f"The answer is \\boxed{{{letter}}}."
        answer = {
            "responses_create_params": body["responses_create_params"],
            "response": {
                "output": [
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                ],
                "usage": {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27},
            },
            "reward": 1.0 if letter == body.get("expected_answer") else 0.0,
            "expected_answer": body.get("expected_answer"),
            "extracted_answer": letter,
        }
        return 200, json.dumps(answer).encode()


@contextmanager
def mcqa_gym() -> Iterator[McqaGym]:
    with serving(AGENT) as server:
        yield McqaGym(server)


def attach(gym: McqaGym, *args: str, dataset: str = "data.jsonl") -> tuple[str, ...]:
    return ("--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", dataset, "-p", "no:cacheprovider", *args)


def run(pytester: pytest.Pytester, gym: McqaGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*attach(gym, *args))
