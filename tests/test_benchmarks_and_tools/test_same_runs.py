"""tools.same_runs: which metrics it compares between two commits' runs, and its one-line refusals. (Its runs are
real ppo-tune train runs of each commit's own code; the suite does not train twice for it.)"""

from __future__ import annotations

import math

import pytest

from tools.same_runs import first_difference, main


def test_timings_are_left_out_and_the_first_other_difference_is_named() -> None:
    base = [{"update": 1, "objective/kl": 0.5, "time/update_s": 1.0, "precision/sampling_bf16": 1.0}]
    assert first_difference(base, [{**base[0], "time/update_s": 9.0}]) is None  # the machine's, not the run's
    assert first_difference(base, [{**base[0], "objective/kl": 0.5000001}]) == \
        "update 1, objective/kl: 0.5 at the base, 0.5000001 at the head"
    # A run that chose bf16 on one side is another run, though precision is no timing.
    assert first_difference(base, [{**base[0], "precision/sampling_bf16": 0.0}]) is not None
    assert first_difference([{"x": math.nan}], [{"x": math.nan}]) is None
    assert first_difference(base, base * 2) == "1 updates at the base, 2 at the head"
    # A metric one side lacks describes nothing the other measured: not a difference.
    assert first_difference(base, [{**base[0], "eval/new_metric": 3.0}]) is None


@pytest.mark.parametrize(("argv", "says"), [
    (["not-a-commit"], "base 'not-a-commit' is no commit of this repository"),
    (["HEAD", "--config", "studies/missing.yaml"], "no config 'studies/missing.yaml' in the repository"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"same_runs: {says}"
