"""A rated set of SmolLM2's own text: responses the policy wrote at every KL the search reaches, each read blind by a
careful reader, to develop the text task's gold on one part and judge it on the other.

``draw`` takes the responses from the over-optimisation curves' stored samples (SmolLM2 policies only: the runs of
``benchmarks/results/overoptimisation_curve/``), in KL bands from the untuned model to far past the budget, the same
number from each band, spread over the runs that reach it; a response's KL is its run's held-out ``eval/kl`` at the
update that recorded it. Each drawn response gets an id, and one split is made, by ``SPLIT_SEED`` fixed before any
reading: half to develop a gold on, half held out to judge it. It writes

- ``responses.jsonl``: every response with its source, KL, split and the scores stored beside it (never shown to a
  reader);
- ``sheets/first_*.jsonl``: the reading sheets, id, prompt and response only, shuffled across bands and sources;
- ``sheets/second.jsonl``: a second blind sheet of ``SECOND_READ`` responses drawn across the bands, read by another
  reader who never sees the first reading.

Readers write ``readings/<sheet>.jsonl`` (one line an id: ``coherent``, ``positive``, ``verdict``, 1-5, as
``PROTOCOL.md`` in the results folder defines them). ``agreement`` reports how far the two readings agree.

    python -m benchmarks.rated_text draw                 # writes benchmarks/results/rated_text/
    python -m benchmarks.rated_text agreement            # writes agreement.json there
    python -m benchmarks.rated_text bands                # the reading by KL band: bands.json
    python -m benchmarks.rated_text score --gold-version 5 --split dev   # writes score_v5_dev.json there
    python -m benchmarks.rated_text draw --quick --out /tmp/rated   # a few responses a band, into /tmp/rated
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr  # type: ignore[import-untyped]

from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

OUT = RESULTS / "rated_text"
CURVES = RESULTS / "overoptimisation_curve"
BANDS: tuple[tuple[str, float, float], ...] = (
    ("untuned", -1.0, 0.5), ("0.5-5", 0.5, 5.0), ("5-10", 5.0, 10.0), ("10-20", 10.0, 20.0),
    ("20-40", 20.0, 40.0), ("40+", 40.0, float("inf")),
)
"""KL bands in nats (lower bound inclusive): the untuned model, inside the seed guidance's 10-nat budget in two
halves, past it, and far past it, where the curves' text degenerates."""
PER_BAND = 60
DRAW_SEED = 20261128
SPLIT_SEED = 82
"""Fixed before any reading: which responses develop a gold and which judge it."""
SECOND_READ = 72
SHEET_SIZE = 60


@dataclass(frozen=True)
class Drawn:
    id: str
    source: str  # the run's folder under overoptimisation_curve/
    task: str
    update: int
    kl: float
    band: str
    prompt: str
    response: str
    stored_gold: float | None  # under the run's own task's gold version
    stored_score: float  # the run's proxy
    split: str = ""


def band_of(kl: float) -> str:
    for name, low, high in BANDS:
        if low <= kl < high:
            return name
    raise ValueError(f"KL {kl} is in no band")


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def smollm2_runs(root: Path) -> list[Path]:
    """The curve runs whose policy is SmolLM2 (a ``*_smollm2`` task, or SmolLM2 named as the policy)."""
    runs = []
    for samples in sorted(root.glob("**/samples.jsonl")):
        config = (samples.parent / "config.yaml").read_text()
        if "smollm2" in config.split("task_seed")[0].lower() or "sft_model_path: smollm2" in config:
            runs.append(samples.parent)
    return runs


def run_candidates(run: Path, root: Path) -> list[Drawn]:
    """Every stored sample of one run whose update has a held-out KL, as a candidate."""
    config = {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
              for line in (run / "config.yaml").read_text().splitlines() if ":" in line and not line.startswith(" ")}
    kl = {int(row["update"]): float(row["eval/kl"]) for row in _read_jsonl(run / "metrics.jsonl") if "eval/kl" in row}
    kl.setdefault(0, 0.0)  # update 0 is the untuned policy, whatever the run logged there
    source = str(run.relative_to(root))
    out = []
    for row in _read_jsonl(run / "samples.jsonl"):
        update = int(row["update"])
        if update not in kl:
            continue
        out.append(Drawn(id="", source=source, task=config.get("task", "?"), update=update, kl=kl[update],
                         band=band_of(kl[update]), prompt=row["prompt"], response=row["response"],
                         stored_gold=row.get("gold_score"), stored_score=float(row["score"])))
    return out


def draw(root: Path, per_band: int, seed: int) -> list[Drawn]:
    """``per_band`` responses from each band, distinct by (prompt, response), taken round-robin over the runs that
    reach the band so that no run's hack fills it; ids in drawing order, then the split by ``SPLIT_SEED``."""
    rng = random.Random(seed)
    by_band: dict[str, dict[str, list[Drawn]]] = {name: {} for name, _, _ in BANDS}
    for run in smollm2_runs(root):
        for candidate in run_candidates(run, root):
            by_band[candidate.band].setdefault(candidate.source, []).append(candidate)
    chosen: list[Drawn] = []
    seen: set[tuple[str, str]] = set()
    for name, _, _ in BANDS:
        pools = [rng.sample(pool, len(pool)) for _, pool in sorted(by_band[name].items())]
        rng.shuffle(pools)
        taken = 0
        while taken < per_band and any(pools):
            for pool in pools:
                while pool and taken < per_band:
                    candidate = pool.pop()
                    if (candidate.prompt, candidate.response) in seen:
                        continue
                    seen.add((candidate.prompt, candidate.response))
                    chosen.append(candidate)
                    taken += 1
                    break
    split_rng = random.Random(SPLIT_SEED)
    held_out: set[int] = set()
    for name, _, _ in BANDS:  # half of each band held out, so that every band can be judged
        rows = [index for index, item in enumerate(chosen) if item.band == name]
        held_out.update(split_rng.sample(rows, len(rows) // 2))
    return [Drawn(**{**asdict(item), "id": f"r{index:03d}", "split": "held_out" if index in held_out else "dev"})
            for index, item in enumerate(chosen)]


def sheets(drawn: Sequence[Drawn], seed: int, size: int, second: int) -> dict[str, list[dict[str, str]]]:
    """The blind sheets: id, prompt and response only, shuffled; the second reading's ids drawn evenly over bands."""
    rng = random.Random(seed + 1)
    order = rng.sample(list(drawn), len(drawn))
    out = {f"first_{n + 1}": [{"id": d.id, "prompt": d.prompt, "response": d.response} for d in order[i : i + size]]
           for n, i in enumerate(range(0, len(order), size))}
    per_band = max(1, second // len(BANDS))
    again = [d for name, _, _ in BANDS for d in [d for d in order if d.band == name][:per_band]]
    out["second"] = [{"id": d.id, "prompt": d.prompt, "response": d.response} for d in rng.sample(again, len(again))]
    return out


def write_draw(out: Path, root: Path, per_band: int, second: int, command: str) -> dict[str, Any]:
    drawn = draw(root, per_band, DRAW_SEED)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "readings").is_dir() and any((out / "readings").iterdir()):
        raise SystemExit(f"{out / 'readings'} already holds readings: the set is drawn once, before any reading")
    with (out / "responses.jsonl").open("w") as handle:
        for item in drawn:
            handle.write(json.dumps(asdict(item)) + "\n")
    (out / "sheets").mkdir(exist_ok=True)
    for name, rows in sheets(drawn, DRAW_SEED, SHEET_SIZE, second).items():
        with (out / "sheets" / f"{name}.jsonl").open("w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    counts: dict[str, dict[str, int]] = {}
    for item in drawn:
        counts.setdefault(item.band, {"dev": 0, "held_out": 0})[item.split] += 1
    summary = {"command": command, "commit": commit_at_start(), "draw_seed": DRAW_SEED,
               "split_seed": SPLIT_SEED, "responses": len(drawn), "bands": counts,
               "sources": sorted({d.source for d in drawn})}
    (out / "draw.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def readings(folder: Path, sheet_prefix: str) -> dict[str, dict[str, int]]:
    """Every reading of the sheets whose names start with ``sheet_prefix``, by id."""
    out: dict[str, dict[str, int]] = {}
    for path in sorted((folder / "readings").glob(f"{sheet_prefix}*.jsonl")):
        for row in _read_jsonl(path):
            out[row["id"]] = {key: int(row[key]) for key in ("coherent", "positive", "verdict")}
    return out


def agreement(folder: Path) -> dict[str, Any]:
    """How far the second blind reading agrees with the first, on the ids both read."""
    first, second = readings(folder, "first"), readings(folder, "second")
    both = sorted(set(first) & set(second))
    out: dict[str, Any] = {"n": len(both)}
    for key in ("coherent", "positive", "verdict"):
        a, b = [first[i][key] for i in both], [second[i][key] for i in both]
        out[key] = {"spearman": float(spearmanr(a, b).statistic),
                    "exact": sum(x == y for x, y in zip(a, b, strict=True)) / len(both),
                    "within_1": sum(abs(x - y) <= 1 for x, y in zip(a, b, strict=True)) / len(both)}
    rejected = [(first[i]["verdict"] <= 2, second[i]["verdict"] <= 2) for i in both]
    out["reject_agreement"] = sum(x == y for x, y in rejected) / len(both)
    return out


ACCEPTED, REJECTED, GOLD_HIGH = 4, 2, 0.6
"""A verdict of 4 or more accepts a response and 2 or less rejects it; gold at 0.6 or more calls it good."""


def responses(folder: Path) -> list[Drawn]:
    return [Drawn(**row) for row in _read_jsonl(folder / "responses.jsonl")]


def verdicts(folder: Path) -> dict[str, float]:
    """Each response's verdict: the first reading's, averaged with the second's where it was read twice."""
    first, second = readings(folder, "first"), readings(folder, "second")
    return {key: (first[key]["verdict"] + second[key]["verdict"]) / 2 if key in second else float(first[key]["verdict"])
            for key in first}


def agreement_with_reading(golds: Sequence[float], read: Sequence[float], bands: Sequence[str]) -> dict[str, Any]:
    """What the issue's goals read: gold's Spearman with the verdict overall and within each band that holds both
    accepted and rejected responses, the share of rejected responses gold scores high, and of accepted ones."""
    rejected = [g for g, v in zip(golds, read, strict=True) if v <= REJECTED]
    accepted = [g for g, v in zip(golds, read, strict=True) if v >= ACCEPTED]
    by_band: dict[str, Any] = {}
    for name, _, _ in BANDS:
        rows = [i for i, band in enumerate(bands) if band == name]
        mixed = any(read[i] <= REJECTED for i in rows) and any(read[i] >= ACCEPTED for i in rows)
        by_band[name] = {"n": len(rows), "mixed": mixed, "mean_gold": sum(golds[i] for i in rows) / len(rows),
                         "mean_verdict": sum(read[i] for i in rows) / len(rows),
                         "spearman": float(spearmanr([golds[i] for i in rows], [read[i] for i in rows]).statistic)
                         if mixed else None}
    return {"n": len(golds), "spearman": float(spearmanr(golds, read).statistic),
            "rejected": len(rejected), "rejected_gold_high": sum(g >= GOLD_HIGH for g in rejected) / len(rejected),
            "accepted": len(accepted),
            "accepted_gold_high": sum(g >= GOLD_HIGH for g in accepted) / len(accepted) if accepted else None,
            "bands": by_band}


def score(folder: Path, version: int, split: str) -> dict[str, Any]:
    """Gold of ``version`` (task seed 0's scorer, the one every text task of that seed shares) against the reading,
    on one split of the set."""
    from ppo_core.tasks.fortunes.params import TextTaskParams
    from ppo_core.tasks.fortunes.task_data import text_task_data
    from ppo_core.tasks.variants import task_params_of

    params = dataclasses.replace(task_params_of(TextTaskParams, "fortunes_v7_smollm2", 0), gold_version=version)
    gold = text_task_data(params).gold
    read = verdicts(folder)
    rows = [d for d in responses(folder) if d.split == split and d.id in read]
    golds = gold([d.prompt for d in rows], [d.response for d in rows])
    return {"gold_version": version, "split": split, "commit": commit_at_start(),
            **agreement_with_reading(golds, [read[d.id] for d in rows], [d.band for d in rows])}


def band_means(folder: Path) -> dict[str, Any]:
    """The reading by KL band over the whole set: the mean verdict with its 95% t interval, how many responses the
    reader accepted and rejected, and the mean gold each response's own run stored (its task's gold version)."""
    from scipy import stats  # type: ignore[import-untyped]

    read, drawn = verdicts(folder), responses(folder)
    out: dict[str, Any] = {}
    for name, _, _ in BANDS:
        values = [read[d.id] for d in drawn if d.band == name and d.id in read]
        mean = statistics.fmean(values)
        half = float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
        stored = [d.stored_gold for d in drawn if d.band == name and d.stored_gold is not None]
        out[name] = {"n": len(values), "verdict": mean, "verdict_ci": [mean - half, mean + half],
                     "accepted": sum(v >= ACCEPTED for v in values), "rejected": sum(v <= REJECTED for v in values),
                     "stored_gold": statistics.fmean(stored)}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rated_text", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["draw", "agreement", "score", "bands"])
    parser.add_argument("--gold-version", type=int, default=5, help="score: the gold version (default: %(default)s)")
    parser.add_argument("--split", choices=["dev", "held_out"], default="dev", help="score: which part of the set")
    parser.add_argument("--out", type=Path, default=None, help="the rated set's folder (default: %(default)s)")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    out = results_path(args.out, OUT, args.quick)
    if args.action == "draw":
        per_band, second = (4, 12) if args.quick else (PER_BAND, SECOND_READ)
        print(json.dumps(write_draw(out, CURVES, per_band, second, command_line("benchmarks.rated_text", argv)),
                         indent=1))
    elif args.action in ("agreement", "bands"):
        result = {"command": command_line("benchmarks.rated_text", argv), "commit": commit_at_start(),
                  **(agreement(out) if args.action == "agreement" else band_means(out))}
        if not args.quick:
            (out / f"{args.action}.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
    else:
        result = {"command": command_line("benchmarks.rated_text", argv), **score(out, args.gold_version, args.split)}
        (out / f"score_v{args.gold_version}_{args.split}.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
