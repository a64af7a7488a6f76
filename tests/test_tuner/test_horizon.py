"""The rules that carry a tuned configuration to a longer run, on hand-built configs whose answers are known."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tuner.production.horizon import (
    HORIZON_SHARE,
    PILOT_EXPONENT,
    POLICY_FIELD,
    RULES,
    UPDATES_EXPONENT,
    as_tuned,
    composed,
    kl_held,
    kl_pilot,
    on_model,
    pilot_kl,
    pilot_learning_rate,
    power_law,
    step_mass,
    updates_of,
)


def tuned(**changes: Any) -> dict[str, Any]:
    """A trial's resolved config, as ``trial_config`` gives it: 1,536 episodes in updates of 16."""
    return {"learning_rate": 2e-5, "total_episodes": 1536, "per_device_train_batch_size": 16,
            "gradient_accumulation_steps": 1, "num_ppo_epochs": 4, "num_mini_batches": 2, "kl_coef": 0.05,
            "kl_target": None, "kl_horizon": 10000, "seed": 3, **changes}


def mass(config: dict[str, Any]) -> float:
    updates = math.ceil(config["total_episodes"] / (config["per_device_train_batch_size"]
                                                    * config["gradient_accumulation_steps"]))
    return config["learning_rate"] * updates * config["num_ppo_epochs"] * config["num_mini_batches"]


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_the_step_mass_rule_keeps_the_mass_and_as_tuned_multiplies_it(factor: int) -> None:
    config = tuned()
    longer = 1536 * factor
    kept = step_mass(config, longer, 1.5)
    assert kept.config["total_episodes"] == longer and kept.config["learning_rate"] == pytest.approx(2e-5 / factor)
    assert mass(kept.config) == pytest.approx(mass(config))
    unchanged = as_tuned(config, longer, 1.5)
    assert mass(unchanged.config) == pytest.approx(factor * mass(config))
    assert unchanged.config == {**config, "total_episodes": longer}
    assert [c.name for c in unchanged.changes] == ["total_episodes"]
    assert [(c.name, c.tuned, c.carried) for c in kept.changes] == [
        ("total_episodes", 1536, longer), ("learning_rate", 2e-5, kept.config["learning_rate"])]


def test_the_power_law_keeps_lr_times_updates_to_its_exponent() -> None:
    config = tuned(per_device_train_batch_size=8, gradient_accumulation_steps=4)  # 32 episodes an update: u = 48
    carried = power_law(config, 4 * 1536, 2.0)
    assert updates_of(config, 1536) == 48 and updates_of(config, 4 * 1536) == 192
    assert carried.config["learning_rate"] * 192 ** UPDATES_EXPONENT == pytest.approx(2e-5 * 48 ** UPDATES_EXPONENT)
    # Between the tuned lr and the mass-keeping one: a longer run moves further, but less than in proportion.
    assert 2e-5 / 4 < carried.config["learning_rate"] < 2e-5


def test_updates_round_up_as_the_trainer_counts_them() -> None:
    config = tuned()
    assert updates_of(config, 1540) == 97  # 96 full updates and a last one
    assert step_mass(config, 1540, 1.0).config["learning_rate"] == pytest.approx(2e-5 * 96 / 97)


def test_kl_held_aims_the_controller_at_the_tuned_runs_final_kl() -> None:
    config = tuned()
    carried = kl_held(config, 8 * 1536, 1.7)
    assert carried.config["kl_target"] == 1.7 and carried.config["kl_coef"] == 0.05
    assert carried.config["kl_horizon"] == math.ceil(HORIZON_SHARE * 8 * 1536) == 1229
    assert carried.config["learning_rate"] == config["learning_rate"]
    assert {c.name: (c.tuned, c.carried) for c in carried.changes} == {
        "total_episodes": (1536, 12288), "kl_target": (None, 1.7), "kl_horizon": (10000, 1229)}
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="final KL"):
            kl_held(config, 3072, bad)


def test_every_rule_is_named_and_leaves_the_tuned_config_alone() -> None:
    config = tuned()
    before = dict(config)
    for name, rule in RULES.items():
        carried = rule(config, 3072, 1.2)
        assert carried.rule == name and carried.config["total_episodes"] == 3072
        assert all(carried.config[c.name] == c.carried and before.get(c.name) == c.tuned for c in carried.changes)
        assert {k: v for k, v in carried.config.items() if k not in {c.name for c in carried.changes}} == \
            {k: v for k, v in before.items() if k not in {c.name for c in carried.changes}}
    assert config == before


@pytest.mark.parametrize(("tuned_kl", "pilot_kl", "exponent"), [(2.0, 4.0, 1.0), (1.5, 0.5, 1.0), (2.0, 8.0, 2.0)])
def test_the_pilot_rule_lands_a_known_power_law_back_on_the_tuned_kl(tuned_kl: float, pilot_kl: float,
                                                                       exponent: float) -> None:
    # A landscape with a known answer: KL = c · lr^s at the pilot's length and model. The pilot ran at the tuned lr
    # and ended at pilot_kl, so c = pilot_kl / lr^s; the carried lr must give tuned_kl back.
    config = tuned()
    lr = pilot_learning_rate(config["learning_rate"], tuned_kl, pilot_kl, exponent)
    c = pilot_kl / config["learning_rate"] ** exponent
    assert c * lr ** exponent == pytest.approx(tuned_kl)
    carried = kl_pilot(config, 1536 * 4, tuned_kl, pilot_kl) if exponent == PILOT_EXPONENT else None
    if carried is not None:
        assert carried.config["learning_rate"] == pytest.approx(lr)
        assert carried.config["total_episodes"] == 1536 * 4 and carried.rule == "kl_pilot"
        assert [c.name for c in carried.changes] == ["total_episodes", "learning_rate"]
        assert f"{pilot_kl:.3g} nats" in carried.changes[1].why
    assert config == tuned()  # the tuned config is left alone


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_the_pilot_rule_refuses_a_kl_it_cannot_invert(bad: float) -> None:
    for args in ((bad, 2.0), (2.0, bad)):
        with pytest.raises(ValueError, match="kl_pilot needs"):
            pilot_learning_rate(2e-5, *args)
        with pytest.raises(ValueError, match="kl_pilot needs"):
            kl_pilot(tuned(), 1536, *args)


def test_a_pilots_kl_is_the_mean_of_its_runs() -> None:
    assert pilot_kl([1.0, 2.0, 4.5]) == pytest.approx(2.5)
    assert pilot_kl([3.0]) == 3.0
    with pytest.raises(ValueError, match="at least one run"):
        pilot_kl([])


def test_a_configuration_on_another_policy_then_rescaled_by_its_pilot_names_each_change_once() -> None:
    # Tuned on the task's own policy (no sft_model_path), carried 4x by step_mass, moved to a larger policy, where a
    # pilot at the carried lr ended at twice the KL the trial ended at: the lr is halved once more.
    config = tuned(sft_model_path=None)
    lengthened = step_mass(config, 1536 * 4, math.nan)
    moved = on_model(lengthened, "/models/large")
    assert moved.config[POLICY_FIELD] == "/models/large" and moved.rule == "step_mass"
    assert moved.config["learning_rate"] == lengthened.config["learning_rate"]
    final = composed(moved, kl_pilot(moved.config, 1536 * 4, 1.5, 3.0))
    assert final.rule == "step_mass+kl_pilot"
    assert final.config["learning_rate"] == pytest.approx(2e-5 / 4 / 2)
    changes = {c.name: c for c in final.changes}
    assert list(changes) == ["total_episodes", "learning_rate", POLICY_FIELD]  # each once, in the order made
    # Each change runs from the tuned value to the last carried one, with both reasons.
    assert changes["learning_rate"].tuned == 2e-5 and changes["learning_rate"].carried == pytest.approx(2.5e-6)
    assert "step mass" in changes["learning_rate"].why and "3 nats" in changes["learning_rate"].why
    assert (changes["total_episodes"].tuned, changes["total_episodes"].carried) == (1536, 6144)
    assert config == tuned(sft_model_path=None)  # the tuned config is left alone


def test_at_its_own_length_only_the_policy_and_the_pilots_learning_rate_change() -> None:
    config = tuned(sft_model_path="/models/small")
    moved = on_model(as_tuned(config, 1536, math.nan), "/models/large")
    assert moved.rule == "as_tuned"
    assert [(c.name, c.tuned, c.carried) for c in moved.changes] == [(POLICY_FIELD, "/models/small", "/models/large")]
    final = composed(moved, kl_pilot(moved.config, 1536, 2.0, 1.0))
    assert final.rule == "kl_pilot"  # as_tuned is no rule beside another
    assert [c.name for c in final.changes] == [POLICY_FIELD, "learning_rate"]
    assert final.config["learning_rate"] == pytest.approx(4e-5)
    # A setting carried back to its tuned value is no change.
    back = composed(final, kl_pilot(final.config, 1536, 1.0, 2.0))
    assert [c.name for c in back.changes] == [POLICY_FIELD]
