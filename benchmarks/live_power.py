"""The power of a live comparison of two searches on a real model, worked out before it is run: from a replay of the
two on the task's curve table (the margin and the study-to-study spread of the winner's true value), the seeds'
own noise (what validating a winner on a few fresh seeds adds) and what one study costs here.

    python -m benchmarks.live_power --equal REPLAY.json [--half REPLAY_HALF.json] --matters MATTERS.json
        --study STUDY.json [--validation-seeds 3] [--out FILE] [--quick]

``--equal`` is a replay (``python -m benchmarks.replay --format json``) of both searches at the study's budget,
``--half`` one with the candidate at half of it. A pair of live studies (one per search, the same sampler seed)
ends in each search's winner validated on ``--validation-seeds`` fresh seeds; the pair's difference is the
replayed difference of the winners' true values plus each validation's seed noise. Two designs:

- superiority at equal budget: the candidate's validated gold minus random search's, 95% interval above zero;
- non-inferiority at half the budget: the candidate at half minus random search at the whole, 95% interval's lower
  end above ``-margin``.

For each: the pairs 80% power needs, the power the pairs one day of this machine buys reach, and the verdict the
pre-registration fixed (benchmarks/README.md, "Pre-registered: the tuner on the third text task"): run the live
comparison only at a design with at least 80% power within a day, else report the design instead of running it.
``--quick``: made-up replays and figures written here, no replay run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from statistics import NormalDist
from typing import Any

from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

REFERENCE = "random"
CANDIDATE = "frontier_budget_race_late"
ALPHA = 0.05
POWER = 0.8
DAY_SECONDS = 86_400.0
NON_INFERIORITY_MARGIN = 0.01
"""The margin the earlier live SmolLM2 comparison registered (frontier at half the budget, lower end above -0.01)."""


def paired_power(delta: float, sd: float, pairs: int, alpha: float = ALPHA) -> float:
    """Power of a two-sided paired test at level alpha to find a mean difference delta > 0 whose pairs vary by sd,
    normal approximation: Phi(delta * sqrt(n) / sd - z_(1 - alpha/2)) (the far tail, below -z, left out)."""
    if sd <= 0:
        return 1.0 if delta > 0 else 0.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return NormalDist().cdf(delta * math.sqrt(pairs) / sd - z)


def pairs_for_power(delta: float, sd: float, power: float = POWER, alpha: float = ALPHA) -> float:
    """Pairs a paired test needs to reach ``power``: n = ((z_(1 - alpha/2) + z_power) * sd / delta)^2, rounded up;
    infinite where delta <= 0 (no number of pairs finds a difference the replay does not show)."""
    if delta <= 0:
        return math.inf
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return float(math.ceil((z * sd / delta) ** 2))


def pair_sd(replay_sd: float, seed_sd: float, validation_seeds: int) -> float:
    """SD of one live pair's difference: sqrt(replay_sd^2 + 2 seed_sd^2 / v), the winners' true values' spread plus
    each arm's validation mean over v seeds."""
    return math.sqrt(replay_sd**2 + 2 * seed_sd**2 / validation_seeds)


def true_value_differences(reference: list[dict[str, Any]], candidate: list[dict[str, Any]]) -> list[float]:
    """Per paired repeat, the candidate winner's true value minus the reference's: reference regret minus candidate
    regret (both measured from the same best). Repeats pair by index and must share their table seed."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(reference)} reference repeats against {len(candidate)} candidate repeats")
    for index, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        if ref["table_seed"] != cand["table_seed"]:
            raise ValueError(f"repeat {index}: table seed {ref['table_seed']} against {cand['table_seed']}")
    return [ref["regret"] - cand["regret"] for ref, cand in zip(reference, candidate, strict=True)]


def design(differences: list[float], offset: float, seed_sd: float, validation_seeds: int, pair_seconds: float,
           ) -> dict[str, Any]:
    """One design's reading: the replayed mean difference (plus ``offset``, the non-inferiority margin), the live
    pair's SD, the pairs 80% power needs, the pairs and the power one day buys, and whether it runs."""
    mean, replay_sd = statistics.fmean(differences), statistics.stdev(differences)
    live_sd = pair_sd(replay_sd, seed_sd, validation_seeds)
    needed = pairs_for_power(mean + offset, live_sd)
    day_pairs = int(DAY_SECONDS // pair_seconds)
    day_power = paired_power(mean + offset, live_sd, day_pairs) if day_pairs >= 2 else 0.0
    finite = math.isfinite(needed)  # strict JSON has no infinity: None where no number of pairs suffices
    return {"repeats": len(differences), "mean_difference": mean, "replay_sd": replay_sd, "offset": offset,
            "live_pair_sd": live_sd, "pairs_for_80pct": needed if finite else None, "pair_seconds": pair_seconds,
            "hours_for_80pct": needed * pair_seconds / 3600 if finite else None, "pairs_in_a_day": day_pairs,
            "power_in_a_day": day_power, "runs": day_power >= POWER}


def strategy_repeats(replay: dict[str, Any], name: str, path: Path) -> list[dict[str, Any]]:
    try:
        return list(replay["strategies"][name]["repeats"])
    except KeyError:
        raise ValueError(f"{path}: no repeats of strategy {name!r}; replay it with --strategies random {name}",
                         ) from None


def study_seconds(study: dict[str, Any], validation_seeds: int) -> tuple[float, float]:
    """One study's seconds and one validation's at ``validation_seeds`` seeds, from a real-model study's result
    (its validation ran the winner on ``winner.n`` seeds)."""
    seconds = study["seconds"]
    return float(seconds["study"]), float(seconds["validation"]) * validation_seeds / int(study["winner"]["n"])


def reading(equal: dict[str, Any], half: dict[str, Any] | None, paths: tuple[Path, Path | None], seed_sd: float,
            study: dict[str, Any], validation_seeds: int) -> dict[str, Any]:
    """Both designs (the second only with a half-budget replay) and the figures they rest on."""
    one_study, one_validation = study_seconds(study, validation_seeds)
    equal_path, half_path = paths
    reference = strategy_repeats(equal, REFERENCE, equal_path)
    designs = {"superiority_equal_budget": design(
        true_value_differences(reference, strategy_repeats(equal, CANDIDATE, equal_path)), 0.0, seed_sd,
        validation_seeds, 2 * (one_study + one_validation))}
    if half is not None and half_path is not None:
        designs["non_inferiority_half_budget"] = design(
            true_value_differences(reference, strategy_repeats(half, CANDIDATE, half_path)), NON_INFERIORITY_MARGIN,
            seed_sd, validation_seeds, 1.5 * one_study + 2 * one_validation)
    return {"reference": REFERENCE, "candidate": CANDIDATE, "alpha": ALPHA, "power": POWER,
            "seed_sd": seed_sd, "validation_seeds": validation_seeds, "study_seconds": one_study,
            "validation_seconds": one_validation, "budget_updates": equal["budget_updates"],
            "table": equal["table"], "designs": designs, "any_runs": any(d["runs"] for d in designs.values())}


def quick_inputs(directory: Path) -> tuple[Path, Path, Path, Path]:
    """Made-up replays (20 paired repeats), a seed SD and a study's seconds: the reading, not a measurement."""
    def replay(shift: float, budget: int) -> dict[str, Any]:
        def repeats(offset: float) -> list[dict[str, Any]]:
            return [{"regret": max(0.0, 0.03 * ((r * 7) % 5) / 4 - offset), "table_seed": [0, r % 2]}
                    for r in range(20)]
        return {"budget_updates": budget, "table": {"configs": 3},
                "strategies": {REFERENCE: {"repeats": repeats(0.0)}, CANDIDATE: {"repeats": repeats(shift)}}}
    paths = tuple(directory / name for name in ("equal.json", "half.json", "matters.json", "study.json"))
    for path, content in zip(paths, (replay(0.01, 96), replay(0.0, 48), {"seed_sd": 0.03},
                                     {"seconds": {"study": 60.0, "validation": 50.0}, "winner": {"n": 5}}),
                             strict=True):
        path.write_text(json.dumps(content))
    return paths[0], paths[1], paths[2], paths[3]


def read_json(path: Path, flag: str) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{flag}: cannot read {path}: {error}") from None
    if not isinstance(content, dict):
        raise ValueError(f"{flag}: {path} holds no JSON object")
    return content


def describe(result: dict[str, Any]) -> str:
    lines = []
    for name, d in result["designs"].items():
        needs = ("no number of pairs" if d["pairs_for_80pct"] is None else
                 f"{d['pairs_for_80pct']:g} pairs ({d['hours_for_80pct']:.0f} h at {d['pair_seconds']:.0f} s a pair)")
        lines.append(f"{name}: replayed difference {d['mean_difference']:+.4f} (offset {d['offset']:+.2f}), live pair "
                     f"SD {d['live_pair_sd']:.4f}; 80% power needs {needs}; a day buys "
                     f"{d['pairs_in_a_day']} pairs at {d['power_in_a_day']:.0%} power: "
                     + ("run it" if d["runs"] else "not run"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.live_power", description=__doc__.split("\n\n")[0])
    parser.add_argument("--equal", type=Path, default=None, help="a replay of both searches at the study's budget")
    parser.add_argument("--half", type=Path, default=None, help="a replay with the candidate at half that budget")
    parser.add_argument("--matters", type=Path, default=None,
                        help="benchmarks.tuning_matters' result on the task's table: its pooled seed SD")
    parser.add_argument("--study", type=Path, default=None,
                        help="benchmarks.real_model_study's result: one study's and one validation's seconds")
    parser.add_argument("--validation-seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.equal, args.half, args.matters, args.study = quick_inputs(Path(tempfile.mkdtemp()))
    for flag in ("equal", "matters", "study"):
        if getattr(args, flag) is None:
            parser.error(f"--{flag} is required")
    if args.validation_seeds < 2:
        parser.error("--validation-seeds: at least 2")
    try:  # a bad input is one line and exit 2, as argparse's own errors
        seed_sd = float(read_json(args.matters, "--matters")["seed_sd"])
        half = read_json(args.half, "--half") if args.half is not None else None
        figures = reading(read_json(args.equal, "--equal"), half, (args.equal, args.half), seed_sd,
                          read_json(args.study, "--study"), args.validation_seeds)
    except (ValueError, KeyError, TypeError) as error:
        parser.error(f"{error}")
    result = {"command": command_line("benchmarks.live_power", argv), "code": commit_at_start(),
              "inputs": {"equal": str(args.equal), "half": str(args.half), "matters": str(args.matters),
                         "study": str(args.study)}, **figures}
    out = results_path(args.out, RESULTS / "live_power" / "live_power.json", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(describe(result))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
