"""Piecewise schedules: the value in force at each update against a slow reference, the first update where two
schedules differ, the config's refusals in one line, and a scheduler's peak set at any step."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import get_scheduler

from ppo_core.config.checks import ConfigError
from ppo_core.config.io import load_config
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import first_difference, shown_schedule, value_at
from ppo_core.run.scheduled_values import set_peak_learning_rate


def reference_values(schedule: list[list[float]] | None, default: float, last: int) -> list[float]:
    """The value in force at updates 1..last, by walking the updates and switching wherever a pair starts."""
    starts = {int(update): value for update, value in schedule or []}
    values, current = [], default
    for update in range(1, last + 1):
        current = starts.get(update, current)
        values.append(current)
    return values


def random_schedule(rng: random.Random) -> list[list[float]] | None:
    if rng.random() < 0.2:
        return None
    updates = sorted(rng.sample(range(1, 15), rng.randint(0, 5)))
    return [[float(update), rng.choice([0.0, 1e-5, 2e-5, 3e-5])] for update in updates]


@pytest.mark.parametrize("seed", range(200))
def test_value_at_and_first_difference_match_the_slow_reference(seed: int) -> None:
    rng = random.Random(seed)
    one, other, last = random_schedule(rng), random_schedule(rng), rng.randint(1, 16)
    default = rng.choice([1e-5, 3e-5])
    expected = reference_values(one, default, last)
    assert [value_at(one, default, update) for update in range(1, last + 1)] == expected
    theirs = reference_values(other, default, last)
    differing = [update for update, (a, b) in enumerate(zip(expected, theirs, strict=True), 1) if a != b]
    assert first_difference(one, other, default, last) == (differing[0] if differing else None)


def test_a_schedule_that_only_restates_the_default_differs_from_none_nowhere() -> None:
    assert first_difference([[1, 3e-6]], None, 3e-6, 10) is None
    assert first_difference([[5, 1e-6]], None, 3e-6, 4) is None  # the change comes after the last update compared
    assert first_difference([[5, 1e-6]], None, 3e-6, 5) == 5


def test_a_yaml_schedule_loads_as_float_pairs(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("learning_rate_schedule: [[13, 2.0e-5], [19, 1.6e-5]]\nkl_coef_schedule: [[4, 0]]\n")
    config = load_config(path)
    assert config.learning_rate_schedule == [[13.0, 2e-5], [19.0, 1.6e-5]]
    assert config.kl_coef_schedule == [[4.0, 0.0]]
    assert shown_schedule(config.learning_rate_schedule) == "[[13, 2e-05], [19, 1.6e-05]]"
    assert load_config(None, ["learning_rate_schedule=[[2, 1e-5]]"]).learning_rate_schedule == [[2.0, 1e-5]]


@pytest.mark.parametrize(("values", "message"), [
    ({"learning_rate_schedule": [[3]]}, r"learning_rate_schedule: each entry must be a pair \[update, value\]"),
    ({"learning_rate_schedule": [[3, 1e-5, 2]]}, "learning_rate_schedule: each entry must be a pair"),
    ({"learning_rate_schedule": [[0, 1e-5]]}, "learning_rate_schedule: each update must be a whole number >= 1"),
    ({"learning_rate_schedule": [[2.5, 1e-5]]}, "learning_rate_schedule: each update must be a whole number >= 1"),
    ({"learning_rate_schedule": [[5, 1e-5], [5, 2e-5]]},
     "learning_rate_schedule: the updates must be strictly ascending, got 5 after 5"),
    ({"learning_rate_schedule": [[5, 1e-5], [3, 2e-5]]}, "learning_rate_schedule: the updates must be strictly"),
    ({"learning_rate_schedule": [[5, 0.0]]}, "learning_rate_schedule: each value must be a finite number > 0"),
    ({"learning_rate_schedule": [[5, float("inf")]]}, "learning_rate_schedule: must be finite numbers"),
    ({"learning_rate_schedule": [[5, "fast"]]}, "learning_rate_schedule: expected list of list of float or null"),
    ({"learning_rate_schedule": [5, 1e-5]}, "learning_rate_schedule: expected list of list of float or null"),
    ({"learning_rate_schedule": [[True, 1e-5]]}, "learning_rate_schedule: expected list of list of float or null"),
    ({"kl_coef_schedule": [[2, -0.1]]}, "kl_coef_schedule: each value must be a finite number >= 0"),
    ({"kl_coef_schedule": [[2, 0.1]], "kl_target": 6.0}, "kl_coef_schedule: cannot be set together with kl_target"),
])
def test_a_bad_schedule_is_refused_in_one_line_naming_the_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        PPOConfig(**values)
    assert "\n" not in str(raised.value)


def test_a_zero_kl_coefficient_and_an_empty_schedule_are_allowed() -> None:
    assert PPOConfig(kl_coef_schedule=[[3, 0]]).kl_coef_schedule == [[3.0, 0.0]]
    assert PPOConfig(learning_rate_schedule=[]).learning_rate_schedule == []


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # no optimizer steps here
def test_a_new_peak_set_mid_run_is_kept_by_later_steps_as_a_scheduler_built_with_it_would() -> None:
    def scheduler(learning_rate: float) -> Any:
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=learning_rate)
        return get_scheduler("cosine", optimizer, num_warmup_steps=2, num_training_steps=10)

    moved, built = scheduler(3e-3), scheduler(1e-3)
    for _ in range(4):
        moved.step()
        built.step()
    set_peak_learning_rate(moved, 1e-3)
    set_peak_learning_rate(moved, 1e-3)  # idempotent
    assert moved.get_last_lr() == built.get_last_lr() == [group["lr"] for group in moved.optimizer.param_groups]
    for _ in range(3):
        moved.step()
        built.step()
        assert moved.get_last_lr() == built.get_last_lr()
