"""The study database, with ppo-tune's own tables beside Optuna's, stays readable by optuna-dashboard."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import optuna_dashboard  # type: ignore[import-untyped]  # ships no type information (no py.typed)
import pytest
from helpers.studies import TESTS_DIR, write_study

from tuner.run.worker import run_worker
from tuner.store.database import create_engine
from tuner.store.records import count_rows
from tuner.study.study_file import load_study_spec


def get_json(app: object, path: str) -> tuple[str, dict]:
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    captured: dict[str, str] = {}

    def start_response(status: str, headers: list, exc_info: object = None) -> None:
        captured["status"] = status

    body = b"".join(app(environ, start_response))  # type: ignore[operator]
    return captured["status"], json.loads(body)


def test_optuna_dashboard_reads_a_ppo_tune_study(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=2))
    run_worker(spec, n_trials=2, timeout=None, threads=None)
    assert count_rows(create_engine(spec.storage), spec.name)[0] > 0  # our tables are in the same file

    app = optuna_dashboard.wsgi(spec.storage)
    status, studies = get_json(app, "/api/studies")
    assert status.startswith("200")
    (summary,) = studies["study_summaries"]
    assert summary["study_name"] == spec.name
    status, detail = get_json(app, f"/api/studies/{summary['study_id']}")
    assert status.startswith("200")
    assert [trial["state"] for trial in detail["trials"]] == ["Complete", "Complete"]
    assert all(trial["intermediate_values"] for trial in detail["trials"])
