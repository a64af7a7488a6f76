"""``ppo-tune validate`` and ``best``: a study's winners rerun on fresh seeds, and the best configuration printed, for
ppo-tune or another trainer, at the trial's length or carried to a production run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tuner.cli.common import UsageError, default_workers, find_named_study, launcher, print_frame

if TYPE_CHECKING:  # optuna and pandas load only for the commands that use them
    import optuna

    from tuner.production.horizon import Carried
    from tuner.study.constraints import Constraint


def command_validate(args: argparse.Namespace) -> int:
    import optuna
    from optuna.trial import TrialState

    from tuner.production.horizon import PILOT_SEEDS
    from tuner.production.pilot import piloted
    from tuner.production.validation import (
        chosen_trials,
        load_validation,
        queue_runs,
        validation_results,
        validation_spec,
    )
    from tuner.run.runner import run_study
    from tuner.run.worker import open_study
    from tuner.store.database import open_storage
    from tuner.study.spec_record import rebuilt_spec

    for flag, value in (("--top-k", args.top_k), ("--seeds", args.seeds), ("--workers", args.workers),
                        ("--eval-samples", args.eval_samples)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value}")
    found, url, _ = find_named_study(args.name, args.storage, args.command)
    try:
        chosen = chosen_trials(found, args.top_k, args.trials)
    except ValueError as error:
        raise UsageError(f"--trials: {error}") from None
    carried = _carried(args, chosen, url)  # checked before anything is written
    study = optuna.load_study(study_name=args.name, storage=open_storage(url))  # found read-only, written here
    stored = rebuilt_spec(study, url)
    spec = validation_spec(stored)
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise UsageError(f"study {args.name!r} has no completed trial to validate")
    unpiloted: dict[int, str] = {}
    with launcher(args, url, spec.processes_per_trial) as ray:  # first: a launcher that cannot run queues nothing
        validation, _ = open_study(spec, heartbeat=False, allow_changes=True)  # derived from the study: follows it
        workers = default_workers(args, ray, spec.processes_per_trial)
        status = 0
        if args.policy_model is not None and carried is not None:
            # On another policy the learning rate comes from a pilot there: the pilots run first, then what they
            # rescale (tuner.production.pilot).
            pilots = carried
            _say_queued(queue_runs(study, validation, args.top_k, PILOT_SEEDS, lambda trial: pilots[trial.number],
                                   pilot=True, trials=args.trials), "pilot")
            status = run_study(spec, None, None, workers, validation=True, ray=ray)
            if status not in (130, 143):  # interrupted: the rest is queued for the rerun
                rescaled = piloted(study, validation, url, pilots)
                carried, unpiloted = rescaled.carried, rescaled.missing
        if status not in (130, 143):
            runs = carried
            _say_queued(queue_runs(study, validation, args.top_k, args.seeds,
                                   None if runs is None else lambda trial: runs.get(trial.number),
                                   eval_samples=args.eval_samples, trials=args.trials), "validation")
            validated = run_study(spec, None, None, workers, validation=True, ray=ray)
            status = validated if validated in (130, 143) or status == 0 else status
    episodes = None if args.total_episodes is None else int(args.total_episodes)
    results = validation_results(study, load_validation(args.name, url), episodes, args.policy_model)
    for trial, why in sorted(unpiloted.items()):
        print(f"ppo-tune validate: trial {trial} is not validated on {args.policy_model}: {why}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([result.to_dict() for result in results], indent=2))
    else:
        at = "" if episodes is None else f" at {episodes} episodes"
        on = "" if args.policy_model is None else f" on {args.policy_model}"
        rules = sorted({result.rule for result in results if result.rule})
        _print_validation(results, study.metric_names[0] if study.metric_names else "value",
                          args.name + at + on + (f" (rule {', '.join(rules)})" if rules else ""),
                          bool(stored.constraints))
    for line in constraint_notices(results, bound_texts(stored.constraints)):
        print(f"ppo-tune validate: {line}", file=sys.stderr)
    if status in (130, 143):  # interrupted or terminated: what finished is printed above, the rest is queued
        return status
    incomplete = [r for r in results if r.pending or r.n == 0]
    return 1 if status != 0 or incomplete or unpiloted else 0


def _say_queued(queued: list[tuple[int, int]], what: str) -> None:
    if queued:
        print(f"queued {len(queued)} {what} runs of trial(s) "
              f"{', '.join(sorted({str(number) for number, _ in queued}, key=int))}", file=sys.stderr)


def _print_validation(results: list[Any], metric: str, name: str, constrained: bool = False) -> None:
    import pandas as pd

    rows = []
    for result in results:
        mean, low, high = result.interval
        row = {"trial": result.trial, f"tuning {metric}": result.tuning_value, "n": result.n,
               "mean": mean, "95% CI low": low, "95% CI high": high, "failed": result.failed,
               "pending": result.pending}
        if constrained:  # a study's bounds, kept on its tuning seeds, may not hold on fresh ones
            row["within constraints"] = f"{result.feasible_runs}/{result.n}"
        rows.append(row)
    print_frame(pd.DataFrame(rows), f"{name}: validated on fresh seeds, best validated mean first")


def passed_over(validated: list[Any], maximize: bool) -> str:
    """Why the first of ``validated`` (``ValidatedConfig``s as ``rank_validated`` orders them) won over a better
    validated mean: each configuration with one that broke the study's constraints on most of its fresh seeds, named;
    "" when there is none."""
    first = validated[0]
    sign = 1.0 if maximize else -1.0
    over = [r for r in validated[1:] if first.held and not r.held and sign * (r.interval[0] - first.interval[0]) > 0]
    return "".join(f"; trial {r.trial}'s validated mean {r.interval[0]:.4f} ranks after it, having kept the study's "
                   f"constraints on {r.feasible_runs} of its {r.n} fresh seeds" for r in over)


def bound_texts(constraints: Sequence[Constraint]) -> list[str]:
    """Each bound of the study's constraints as it reads, e.g. ``eval/kl (last) <= 10``."""
    return [text for constraint in constraints for text, _, _ in constraint.bounds()]


def kept_constraints(result: Any, bounds: list[str]) -> str | None:
    """How many of a validated configuration's completed runs kept the study's constraints, when some did not (its
    mean is not a mean of runs the study would have accepted); None when all did or the study has none."""
    if not bounds or not result.n or result.feasible_runs >= result.n:
        return None
    return (f"kept the study's constraints ({'; '.join(bounds)}) on {result.feasible_runs} of its {result.n} "
            "validated runs")


def constraint_notices(results: list[Any], bounds: list[str]) -> list[str]:
    """One line for each validated configuration whose completed runs broke the study's constraints on some fresh
    seeds."""
    return [f"trial {r.trial} {kept}" for r in results if (kept := kept_constraints(r, bounds))]


def command_best(args: argparse.Namespace) -> int:
    import yaml

    from tuner.exports import FORMATS, exported
    from tuner.population.lineage import lineage_lines
    from tuner.production.carry import held_at_lengths, notice, pilot_notice, uncarried
    from tuner.production.pilot import piloted
    from tuner.production.validation import load_validation, validation_results
    from tuner.study.reports import trial_config
    from tuner.study.stored_spec import read_stored_spec
    from tuner.study.winner import read_winner

    study, url, opened = find_named_study(args.name, args.storage, args.command)
    winner = read_winner(study)
    best = winner.trials
    if not best:
        raise UsageError(f"study {args.name!r} has no completed (feasible) trial yet")
    validations = load_validation(args.name, opened)
    validated = [r for r in validation_results(study, validations) if r.n > 0]
    chosen, validation = best[0], None
    figure = winner.figure
    header = f"best trial {chosen.number}: " + (figure.words() if figure is not None else
                                               f"values {', '.join(f'{v:.4f}' for v in chosen.values)}")
    if validated:
        validation = validated[0]
        chosen = study.get_trials(deepcopy=False)[validation.trial]
        header = _validated_header(study, chosen, validated)
    elif len(best) > 1:
        header += f" (first of {len(best)} Pareto-optimal trials, by the first objective)"
    config = trial_config(chosen)
    carried = (_carried(args, [chosen], url) or {}).get(chosen.number)
    said = None if carried is None or args.total_episodes is None else \
        notice(carried, args.name, int(carried.config["total_episodes"]))
    unpiloted = None
    if carried is not None and args.policy_model is not None:  # its learning rate from a pilot there, if one ran
        rescaled = piloted(study, validations, url, {chosen.number: carried})
        carried = rescaled.carried.get(chosen.number, carried)
        if chosen.number in rescaled.missing:
            unpiloted = pilot_notice(chosen.number, args.policy_model, args.name,
                                     None if args.total_episodes is None else int(args.total_episodes),
                                     rescaled.missing[chosen.number])
    held = held_at_lengths(study, validations, chosen)
    comments = _comments([*held, *lineage_lines(study.get_trials(deepcopy=False), chosen)], carried, unpiloted)
    if carried is not None:
        config = carried.config
    if args.format == "json":
        print(json.dumps({"trial": chosen.number, "values": chosen.values, "config": config,
                          "validation": validation.to_dict() if validation else None, "held": held,
                          "notices": [line for line in (said, unpiloted) if line],
                          "carried": None if carried is None else {
                              "rule": carried.rule, "changes": [vars(c) for c in carried.changes]}}, indent=2))
    elif args.format == "yaml":
        print(f"# {header}")
        print("".join(f"{line}\n" for line in comments), end="")
        print(yaml.safe_dump(config, sort_keys=False), end="")
    else:
        export = exported(args.format, config)
        lost = [] if carried is None else uncarried(export.settings, export.comments, carried)
        if carried is not None and lost:
            why = "; ".join(line.split(": ", 1)[-1] for name, line in export.comments if name in lost)
            raise UsageError(f"--format {args.format}: cannot carry {', '.join(lost)}, which the rule {carried.rule} "
                             f"sets ({why or 'the target has no such setting'}); choose another --rule or --format")
        print(f"# {header}")
        print("".join(f"{line}\n" for line in comments), end="")
        print(export.render(FORMATS[args.format].layout), end="")
        # Where the target computes something else than the trial, say so where it is seen, not only in the file.
        target = read_stored_spec(study.user_attrs, len(study.directions)).target
        if export.differences and target is not None and target != args.format:
            print(f"ppo-tune best: study {args.name!r} tuned for {target}; {args.format} computes differently:",
                  file=sys.stderr)
        for line in export.differences:
            print(f"ppo-tune best: {args.format} is not exact: {line}", file=sys.stderr)
    for told in (said, unpiloted):
        if told:
            print(f"ppo-tune best: {told}", file=sys.stderr)
    return 0


def _validated_header(study: optuna.Study, chosen: optuna.trial.FrozenTrial, validated: list[Any]) -> str:
    """``best``'s first line for a winner chosen by validated mean: the mean, any better mean it passed over, and how
    many of its fresh runs kept the study's constraints where some did not. The mean includes runs the constraints
    would have refused, so that is said where the winner is read, not only by the validate that ran them (a
    population's replays passed its KL budget so)."""
    from optuna.study import StudyDirection

    from tuner.study.stored_spec import read_stored_spec

    validation = validated[0]
    mean, low, high = validation.interval
    header = (f"best trial {chosen.number} by validated mean (ppo-tune validate): {mean:.4f}, 95% CI "
              f"{low:.4f} to {high:.4f} over {validation.n} fresh seeds; tuning value {chosen.values[0]:.4f}")
    header += passed_over(validated, study.directions[0] == StudyDirection.MAXIMIZE)
    stored = read_stored_spec(study.user_attrs, len(study.directions))
    kept = kept_constraints(validation, bound_texts(stored.constraints))
    return header + (f"; {kept}" if kept else "")


def _comments(lines: list[str], carried: Carried | None, unpiloted: str | None) -> list[str]:
    """The ``#`` lines above the printed config: what it held at other lengths and its lineage, the changes a carry
    made, and a missing pilot."""
    from tuner.production.carry import change_comments

    return [f"# {line}" for line in lines] + ([] if carried is None else change_comments(carried)) + \
        ([] if unpiloted is None else [f"# {unpiloted}"])


def _carried(args: argparse.Namespace, trials: list[optuna.trial.FrozenTrial], url: str) -> dict[int, Carried] | None:
    """Each trial's config carried to ``--total-episodes`` by ``--rule`` and onto ``--policy-model`` (its learning
    rate not yet rescaled for that policy: that takes a pilot, ``tuner.production.pilot``), by trial number; None
    without either flag; every check made before anything is written."""
    from tuner.production.carry import carry, chosen_rule, final_kl, production_episodes, production_policy
    from tuner.production.horizon import on_model
    from tuner.study.reports import trial_config

    if args.total_episodes is None and args.rule is not None:
        raise UsageError("--rule: only with --total-episodes N")
    if args.total_episodes is None and args.policy_model is None:
        return None
    policy = None if args.policy_model is None else production_policy(args.policy_model)
    rule = chosen_rule(args.rule) if args.total_episodes is not None else "as_tuned"
    metrics = None
    if rule == "kl_held":
        from tuner.store.database import open_read_only_engine
        from tuner.store.records import read_stored_metrics

        metrics = read_stored_metrics(open_read_only_engine(url), args.name, [t.number for t in trials])
    carried = {}
    for trial in trials:
        config = trial_config(trial)
        if config.get("total_episodes") is None:
            flag = "--total-episodes" if args.total_episodes is not None else "--policy-model"
            raise UsageError(f"{flag}: trial {trial.number}'s length is set by num_train_epochs, not "
                             "total_episodes; tune with total_episodes to carry it")
        own = int(config["total_episodes"])
        episodes = own if args.total_episodes is None else production_episodes(args.total_episodes, own)
        kl = final_kl(metrics[metrics["trial_number"] == trial.number]) if metrics is not None else float("nan")
        to = carry(config, episodes, rule, kl)
        carried[trial.number] = to if policy is None else on_model(to, policy)
    return carried
