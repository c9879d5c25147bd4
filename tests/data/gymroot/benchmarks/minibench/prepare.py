"""Offline prepare script of the test benchmark ``minibench``: writes 3 mcqa rows (expected B, C, E)."""

import json
from pathlib import Path

ROWS = [("B", "Which letter is second?"), ("C", "Which letter is third?"), ("E", "Which letter is fifth?")]


def prepare() -> Path:
    out = Path(__file__).parent / "data" / "minibench.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for answer, question in ROWS:
            prompt = f"Answer with \\boxed{{LETTER}}. {question}\nA: a\nB: b\nC: c\nD: d\nE: e"
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
                "options": [{letter: letter.lower()} for letter in "ABCDE"],
                "expected_answer": answer,
            }
            fh.write(json.dumps(row) + "\n")
    return out
