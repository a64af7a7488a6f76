"""The equal-work check: both sides' counted work per PPO update, side by side."""

from __future__ import annotations

from typing import Any

# Relative tolerance for parameter elements stepped: ppo_core's value head has a bias (1 element)
# that TRL's sequence-classification score head lacks.
PARAMETER_TOLERANCE = 1e-3


def _per_update(counts: dict[str, dict[str, int]], network: str, key: str, updates: int) -> float:
    return counts.get(network, {}).get(key, 0) / updates


def _optimizer_steps(counts: dict[str, dict[str, int]], side: str, updates: int) -> dict[str, float]:
    """Optimizer steps each network receives: ppo_core has one optimizer per network, TRL one for both."""
    if side == "ppo_core":
        return {
            "policy": _per_update(counts, "policy_optimizer", "optimizer_steps", updates),
            "value": _per_update(counts, "value_optimizer", "optimizer_steps", updates),
        }
    joint = _per_update(counts, "optimizer", "optimizer_steps", updates)
    return {"policy": joint, "value": joint}


def _parameters_stepped(counts: dict[str, dict[str, int]], updates: int) -> float:
    return sum(values.get("parameters_stepped", 0) for values in counts.values()) / updates


def compare(core: dict[str, Any], trl: dict[str, Any]) -> dict[str, Any]:
    """Rows of (quantity, ppo_core, TRL, equal) per PPO update, and whether every row is equal.

    The policy's no-grad rows compare ppo_core with TRL plus one reference-shaped scoring pass (see below).
    """
    core_counts, trl_counts = core["counts"], trl["counts"]
    core_updates, trl_updates = core["updates"], trl["updates"]
    rows: list[dict[str, Any]] = []

    def add(quantity: str, core_value: float, trl_value: float, tolerance: float = 0.0) -> None:
        scale = max(abs(core_value), abs(trl_value), 1.0)
        rows.append({
            "quantity": quantity,
            "ppo_core": core_value,
            "trl": trl_value,
            "equal": abs(core_value - trl_value) <= tolerance * scale,
        })

    def add_count(quantity: str, network: str, key: str) -> None:
        add(quantity, _per_update(core_counts, network, key, core_updates),
            _per_update(trl_counts, network, key, trl_updates))

    add_count("generated tokens", "policy", "generated_tokens")
    add_count("generate calls", "policy", "generate_calls")
    # A known difference, counted exactly: ppo_core scores its samples with one full forward pass, the same
    # inputs as the reference's, rather than reusing generate()'s cached logits, which differ from the update's
    # forward under bf16. Its count is TRL's plus one reference-shaped pass.
    for key, quantity in (("forward_calls_no_grad", "policy no-grad forwards (generation + one scoring pass)"),
                          ("forward_tokens_no_grad", "policy no-grad forward tokens (generation + scoring)")):
        add(quantity, _per_update(core_counts, "policy", key, core_updates),
            _per_update(trl_counts, "policy", key, trl_updates) + _per_update(trl_counts, "reference", key,
                                                                             trl_updates))
    for network in ("reference", "value", "reward"):
        add_count(f"{network} no-grad forwards", network, "forward_calls_no_grad")
        add_count(f"{network} no-grad forward tokens", network, "forward_tokens_no_grad")
    for network in ("policy", "value"):
        add_count(f"{network} forwards with grad", network, "forward_calls_grad")
        add_count(f"{network} forward tokens with grad", network, "forward_tokens_grad")
        add_count(f"{network} backward passes", network, "backward_calls")
        add_count(f"{network} backward tokens", network, "backward_tokens")
    core_steps = _optimizer_steps(core_counts, "ppo_core", core_updates)
    trl_steps = _optimizer_steps(trl_counts, "trl", trl_updates)
    for network in ("policy", "value"):
        add(f"{network} optimizer steps", core_steps[network], trl_steps[network])
    add("parameter elements stepped", _parameters_stepped(core_counts, core_updates),
        _parameters_stepped(trl_counts, trl_updates), PARAMETER_TOLERANCE)
    return {"rows": rows, "all_equal": all(row["equal"] for row in rows)}
