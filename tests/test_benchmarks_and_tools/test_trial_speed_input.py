"""The trial-speed benchmark refuses a point it cannot run in one line, before it builds a base tree or starts a
trial (regression: ``--set learning_rate=1e-3``, a string to YAML, ended the first trial with a traceback)."""

from __future__ import annotations

import pytest

from benchmarks import trial_speed


def test_a_mistyped_point_is_refused_in_one_line_before_any_trial(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def no_tree(*args: object) -> None:
        raise AssertionError("a base tree was built")

    monkeypatch.setattr(trial_speed, "base_tree", no_tree)
    with pytest.raises(SystemExit) as stopped:
        trial_speed.main(["--set", "learning_rate=1e-3", "beta=0.02", "num_generations=8", "cliprange=0.2"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "learning_rate" in lines[-1] and "'1e-3'" in lines[-1], lines
