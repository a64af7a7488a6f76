"""The text task's five golds side by side: gamed responses, real text, and the samples old studies stored.

Version 1 of the gold (tasks ``fortunes``, ``fortunes_tiny``) reads a response's words only; version 2 (tasks
``fortunes_v2*``) also reads its text; version 3 (tasks ``fortunes_v3*`` to ``fortunes_v5_smollm2``) also judges its
word order; version 4 (task ``fortunes_v6_smollm2``) also reads styled letters, words set apart one by one, numbers,
speakers' labels, title capitals and words with nothing to join them; version 5 (task ``fortunes_v7_smollm2``) also
reads content words strung on "and". For each, with task seed 0's scorer, this measures:

- the battery of gamed responses (``ppo_core.tasks.fortunes.gamed``): per kind the highest and the mean score (each
  response's highest under the battery's prompts), and how many score above 0.1 (the goal: none) and above 0.2; and
  whether the fluent sentences keep positive > neutral > negative at every prompt;
- the three batteries written before they were scored (``benchmarks/results/gold_battery/unseen_battery_*.json``):
  how many of each score above 0.2, their own goal, and which;
- real text: the share of 1,000 held-out prompts' real continuations with fluency >= 0.9, and their mean fluency, by
  a scorer of the same version built on that split's training texts (the task's own scorer counted most of those
  texts, which would flatter it); and the share of those continuations, their words shuffled, that keep gold above
  0.1;
- the samples the SmolLM2 studies and the over-optimisation runs stored, untuned (update 0) and later: the spread of
  gold under each version, the samples gold falls most on from each version to the next, the highest version-2
  scores among responses holding a symbol or another script, and the highest scores of versions 3 to 5, each shown
  whole so a reader can judge whether the score is fair;
- the scorer's speed on those samples.

    python -m benchmarks.gold_battery                  # writes benchmarks/results/gold_battery/gold_battery.json
    python -m benchmarks.gold_battery --quick --out /tmp/gold_battery.json

``--quick``: three kinds of the battery, about 30 samples of each stored source and 50 real texts, in seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppo_core.tasks.fortunes import TextGoldScorer, build_gold_scorer, load_corpus, split_examples
from ppo_core.tasks.fortunes.calibration import quantile
from ppo_core.tasks.fortunes.data_report import speed
from ppo_core.tasks.fortunes.gamed import BATTERY_PROMPTS, FLUENT, GAMED
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.task_data import text_task_data
from ppo_core.tasks.variants import task_params_of
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path

OUT = RESULTS / "gold_battery" / "gold_battery.json"
TASKS = {1: "fortunes", 2: "fortunes_v2", 3: "fortunes_v3", 4: "fortunes_v6_smollm2", 5: "fortunes_v7_smollm2"}
"""The task each gold version is read from; every figure uses its seed-0 draw (a text task's gold depends on its
corpus split alone, which every text task of one seed shares)."""
TASK_SEED = 0
CEILINGS = (0.1, 0.2)
"""The battery's goal is every response at or under the first; the second counts the clear misses."""
UNSEEN: dict[str, str] = {"unseen_battery_1.json": "dd15843", "unseen_battery_2.json": "a119fc7",
                          "unseen_battery_3.json": "acbffb9"}
"""The batteries written before they were scored (under benchmarks/results/gold_battery/), by the commit that
added each before any of it was scored. Versions 4 and 5 were designed after the first two and the third were
scored, so each battery's fresh figure is the newest gold's of its day; the others are shown beside it."""
UNSEEN_GOAL = 0.2
"""The goal the batteries were written to: every response at most this under every battery prompt."""
REAL_HELDOUT, REAL_SEED = 1000, 0
"""The held-out split real text is measured on: the one the gold's own tests and report use."""
FLUENT_ENOUGH = 0.9

ARCHIVE = RESULTS / "tuning_quality" / "tuning_quality_smollm2_work.tar.gz"
"""The live SmolLM2 tuning studies' databases (``tq_live/*.db``): every trial's stored samples."""
JSONL_SOURCES: dict[str, str] = {
    "overoptimisation_curve/smollm2/samples.jsonl": "smollm2",
    "overoptimisation_curve/companion/low_beta/samples.jsonl": "companion",
    "overoptimisation_curve/companion/shipped/samples.jsonl": "companion",
}
"""The over-optimisation runs' samples (under benchmarks/results/), by the policy that wrote them."""
SYMBOL = re.compile(r"[^A-Za-z0-9\s.,;:!?'\"()-]")
"""A character plain prose does without: a symbol, an emoji, another script, typography."""
LISTED = 10
QUICK_KINDS, QUICK_PER_SOURCE, QUICK_REAL = 3, 30, 50


@dataclass(frozen=True)
class StoredSample:
    """One stored (prompt, response), the policy that wrote it and the first update it was stored at."""

    policy: str
    prompt: str
    response: str
    update: int
    stored_gold: float | None


def thinned(rows: list[Any], keep: int | None) -> list[Any]:
    """Every row, or about ``keep`` spread evenly over them (so a quick run still sees later updates)."""
    return rows if keep is None else rows[:: max(1, len(rows) // keep)]


def read_stored(keep: int | None) -> tuple[list[StoredSample], list[dict[str, Any]]]:
    """The distinct stored samples of every source, and each source's row count; a (prompt, response) stored more
    than once counts once, at its first update."""
    rows: list[StoredSample] = []
    sources: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gold-battery-") as directory:
        with tarfile.open(ARCHIVE) as archive:
            archive.extractall(directory, filter="data")
        for database in sorted(Path(directory).rglob("*.db")):
            connection = sqlite3.connect(database)
            try:
                found = connection.execute(
                    'SELECT prompt, response, "update", gold_score FROM ppo_tune_samples ORDER BY id').fetchall()
            finally:
                connection.close()
            found = thinned(found, keep)
            rows += [StoredSample("smollm2", *record) for record in found]
            sources.append({"source": f"{ARCHIVE.name}:{database.relative_to(directory)}", "policy": "smollm2",
                            "rows": len(found)})
    for name, policy in JSONL_SOURCES.items():
        records = thinned([json.loads(line) for line in (RESULTS / name).read_text().splitlines() if line], keep)
        rows += [StoredSample(policy, r["prompt"], r["response"], r["update"], r["gold_score"]) for r in records]
        sources.append({"source": name, "policy": policy, "rows": len(records)})
    first: dict[tuple[str, str], StoredSample] = {}
    for sample in sorted(rows, key=lambda sample: sample.update):
        first.setdefault((sample.prompt, sample.response), sample)
    return list(first.values()), sources


def highest(gold: TextGoldScorer, response: str) -> float:
    """The response's highest gold under the battery's prompts."""
    return max(gold(list(BATTERY_PROMPTS), [response] * len(BATTERY_PROMPTS)))


def battery(gold: TextGoldScorer, kinds: Sequence[str]) -> dict[str, Any]:
    """Each kind's scores (a response's highest under the battery's prompts) against the ceilings."""
    per_kind: dict[str, Any] = {}
    for kind in kinds:
        scores = [highest(gold, response) for response in GAMED[kind]]
        per_kind[kind] = {"responses": len(scores), "max": max(scores), "mean": statistics.fmean(scores),
                          **{f"above_{c}": sum(s > c for s in scores) for c in CEILINGS}}
    every = list(per_kind.values())
    return {"kinds": per_kind, "responses": sum(row["responses"] for row in every),
            "max": max(row["max"] for row in every),
            **{f"above_{c}": sum(row[f"above_{c}"] for row in every) for c in CEILINGS}}


def read_unseen() -> dict[str, list[str]]:
    """Each unseen battery's responses, by its file's name, as committed."""
    return {name: [r for responses in json.loads((RESULTS / "gold_battery" / name).read_text())["kinds"].values()
                   for r in responses] for name in UNSEEN}


def unseen(gold: TextGoldScorer, batteries: dict[str, list[str]]) -> dict[str, Any]:
    """Each unseen battery's responses above its goal (a response's highest under the battery's prompts)."""
    found: dict[str, Any] = {}
    for name, responses in batteries.items():
        scored = [(response, highest(gold, response)) for response in responses]
        through = [{"response": r, "gold": s} for r, s in scored if s > UNSEEN_GOAL]
        found[name] = {"responses": len(responses), "above_goal": len(through), "through": through}
    return found


def fluent_order(gold: TextGoldScorer) -> dict[str, Any]:
    """The fluent sentences' scores by sentiment, and whether positive > neutral > negative at each prompt."""
    prompts = list(BATTERY_PROMPTS)
    scores = {sentiment: gold(prompts, list(sentences)) for sentiment, sentences in FLUENT.items()}
    order = [scores["positive"][i] > scores["neutral"][i] > scores["negative"][i] for i in range(len(prompts))]
    return {"prompts": prompts, "scores": scores, "order_holds": order, "order_holds_everywhere": all(order)}


def shuffled(text: str, rng: random.Random) -> str:
    """``text``'s whitespace-separated tokens in an order drawn from ``rng``: the same words, in no order."""
    tokens = text.split()
    rng.shuffle(tokens)
    return " ".join(tokens)


def real_text(version: int, limit: int | None) -> dict[str, Any]:
    """Fluency of held-out real continuations, by a scorer built on the same split's training texts, and the share
    of the same continuations with their words shuffled that keep gold above the battery's goal."""
    split = split_examples(load_corpus().texts, REAL_HELDOUT, REAL_SEED)
    gold = build_gold_scorer([example.text for example in split.train], version=version)
    references = [example.reference for example in split.heldout][:limit]
    fluency = [gold.breakdown(reference).fluency for reference in references]
    rng = random.Random(REAL_SEED)
    mixed = gold([""] * len(references), [shuffled(reference, rng) for reference in references])
    return {"texts": len(fluency), "fluent_share": sum(f >= FLUENT_ENOUGH for f in fluency) / len(fluency),
            "mean_fluency": statistics.fmean(fluency),
            "shuffled_above_goal": sum(score > CEILINGS[0] for score in mixed) / len(mixed)}


def distribution(golds: Sequence[float]) -> dict[str, float]:
    """Mean, nearest-rank quantiles and the shares at exactly 0 (no fluency left) and 0.5 (no sentiment, fluent)."""
    return {"samples": len(golds), "mean": statistics.fmean(golds),
            **{f"q{q}": quantile(golds, q) for q in (0.1, 0.5, 0.9)},
            "share_zero": sum(g == 0.0 for g in golds) / len(golds),
            "share_half": sum(g == 0.5 for g in golds) / len(golds)}


def group_of(sample: StoredSample) -> str:
    return f"{sample.policy}_{'untuned' if sample.update == 0 else 'later'}"


def shown(sample: StoredSample, golds: dict[int, float]) -> dict[str, Any]:
    return {"policy": sample.policy, "update": sample.update, "prompt": sample.prompt, "response": sample.response,
            **{f"gold_v{version}": gold for version, gold in golds.items()}}


def listed(samples: list[StoredSample], golds: list[dict[int, float]], key: Callable[[dict[int, float]], float],
           keep: Callable[[StoredSample], bool] = lambda sample: True) -> list[dict[str, Any]]:
    """The :data:`LISTED` samples ``keep`` admits with the highest ``key`` of their golds."""
    chosen = sorted((i for i, sample in enumerate(samples) if keep(sample)), key=lambda i: -key(golds[i]))
    return [shown(samples[i], golds[i]) for i in chosen[:LISTED]]


def measure(quick: bool) -> dict[str, Any]:
    kinds = list(GAMED)[:QUICK_KINDS] if quick else list(GAMED)
    samples, sources = read_stored(QUICK_PER_SOURCE if quick else None)
    responses = [sample.response for sample in samples]
    batteries = read_unseen()
    versions: dict[str, Any] = {}
    golds: dict[int, list[float]] = {}
    for version, task in TASKS.items():
        gold = text_task_data(task_params_of(TextTaskParams, task, TASK_SEED)).gold
        golds[version] = gold([sample.prompt for sample in samples], responses)
        groups: dict[str, list[float]] = {}
        for sample, score in zip(samples, golds[version], strict=True):
            groups.setdefault(group_of(sample), []).append(score)
        versions[str(version)] = {
            "task": task, "battery": battery(gold, kinds), "unseen": unseen(gold, batteries),
            "fluent": fluent_order(gold),
            "real_text": real_text(version, QUICK_REAL if quick else None),
            "stored": {name: distribution(groups[name]) for name in sorted(groups)},
            "speed": {"responses": len(responses), "responses_per_s": speed(gold, responses)},
        }
    every = [{version: golds[version][i] for version in TASKS} for i in range(len(samples))]
    # The stored gold was version 1's when the runs scored it; a difference would mean version 1 changed since.
    recorded = [(s.stored_gold, g[1]) for s, g in zip(samples, every, strict=True) if s.stored_gold is not None]
    return {
        "quick": quick, "task_seed": TASK_SEED, "ceilings": list(CEILINGS),
        "real_split": {"heldout_prompts": REAL_HELDOUT, "seed": REAL_SEED, "fluent_enough": FLUENT_ENOUGH},
        "versions": versions,
        "stored": {
            "sources": sources, "distinct_samples": len(samples),
            "stored_gold_max_difference_from_v1": max(abs(stored - now) for stored, now in recorded),
            "symbol_pattern": SYMBOL.pattern,
            "largest_falls": listed(samples, every, lambda g: g[1] - g[2]),
            "largest_falls_v3": listed(samples, every, lambda g: g[2] - g[3]),
            "largest_falls_v4": listed(samples, every, lambda g: g[3] - g[4]),
            "largest_falls_v5": listed(samples, every, lambda g: g[4] - g[5]),
            "highest_v2_with_symbols": listed(samples, every, lambda g: g[2],
                                              lambda s: bool(SYMBOL.search(s.response))),
            "highest_v3": listed(samples, every, lambda g: g[3]),
            "highest_v4": listed(samples, every, lambda g: g[4]),
            "highest_v5": listed(samples, every, lambda g: g[5]),
        },
    }


def row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def battery_table(result: dict[str, Any]) -> list[str]:
    versions = result["versions"]
    ceilings = [f"v{n} {label}" for n in versions for label in ("max", "mean", "> 0.1", "> 0.2")]
    lines = [row(["gamed kind", "responses", *ceilings]), row(["---", *["---:"] * (1 + len(ceilings))])]
    first = next(iter(versions.values()))
    for kind, figures in first["battery"]["kinds"].items():
        cells: list[object] = [kind, figures["responses"]]
        for version in versions.values():
            f = version["battery"]["kinds"][kind]
            cells += [f"{f['max']:.3f}", f"{f['mean']:.3f}", f["above_0.1"], f["above_0.2"]]
        lines.append(row(cells))
    every: list[object] = ["**all**", first["battery"]["responses"]]
    for version in versions.values():
        b = version["battery"]
        every += [f"**{b['max']:.3f}**", "", b["above_0.1"], b["above_0.2"]]
    return [*lines, row(every)]


def unseen_table(result: dict[str, Any]) -> list[str]:
    versions = result["versions"]
    lines = [row(["unseen battery", "committed at", "responses", *(f"v{n} > {UNSEEN_GOAL}" for n in versions)]),
             row(["---", "---", *["---:"] * (1 + len(versions))])]
    for name, commit in UNSEEN.items():
        first = next(iter(versions.values()))["unseen"][name]
        lines.append(row([name, commit, first["responses"], *(v["unseen"][name]["above_goal"]
                                                                for v in versions.values())]))
    return lines


def fluent_table(result: dict[str, Any]) -> list[str]:
    versions = result["versions"]
    header = ["prompt", *(f"v{n} positive / neutral / negative" for n in versions),
              f"in order ({', '.join(f'v{n}' for n in versions)})"]
    lines = [row(header), row(["---"] * len(header))]
    for i, prompt in enumerate(BATTERY_PROMPTS):
        triples = [" / ".join(f"{v['fluent']['scores'][s][i]:.3f}" for s in ("positive", "neutral", "negative"))
                   for v in versions.values()]
        order = ", ".join("yes" if v["fluent"]["order_holds"][i] else "no" for v in versions.values())
        lines.append(row([prompt, *triples, order]))
    return lines


def real_and_speed_table(result: dict[str, Any]) -> list[str]:
    lines = [row(["gold", "held-out real continuations", "fluency >= 0.9", "mean fluency",
                  f"shuffled: gold > {CEILINGS[0]}", "responses/s (stored samples)"]), row(["---", *["---:"] * 5])]
    for name, version in result["versions"].items():
        real = version["real_text"]
        lines.append(row([f"v{name}", real["texts"], f"{real['fluent_share']:.1%}", f"{real['mean_fluency']:.3f}",
                          f"{real['shuffled_above_goal']:.1%}", f"{version['speed']['responses_per_s']:,.0f}"]))
    return lines


def stored_table(result: dict[str, Any]) -> list[str]:
    lines = [row(["stored samples", "n", "gold", "mean", "p10", "median", "p90", "exactly 0", "exactly 0.5"]),
             row(["---", "---:", "---", *["---:"] * 6])]
    for group in result["versions"]["1"]["stored"]:
        for name, version in result["versions"].items():
            d = version["stored"][group]
            spread = [f"{d[key]:.3f}" for key in ("mean", "q0.1", "q0.5", "q0.9")]
            lines.append(row([group, d["samples"], f"v{name}", *spread, f"{d['share_zero']:.1%}",
                              f"{d['share_half']:.1%}"]))
    return lines


def cell(text: str) -> str:
    """A text as one markdown table cell: escapes shown, pipes kept from splitting the row."""
    return "`" + json.dumps(text, ensure_ascii=False)[1:-1].replace("|", "\\|").replace("`", "'") + "`"


LIST_TITLES = {"largest_falls": "largest falls from v1 to v2", "largest_falls_v3": "largest falls from v2 to v3",
               "largest_falls_v4": "largest falls from v3 to v4", "largest_falls_v5": "largest falls from v4 to v5",
               "highest_v2_with_symbols": "highest v2, with a symbol", "highest_v3": "highest v3",
               "highest_v4": "highest v4", "highest_v5": "highest v5"}


def sample_table(result: dict[str, Any], key: str) -> list[str]:
    versions = list(result["versions"])
    lines = [row([f"{LIST_TITLES[key]}: prompt", "response", "policy, update", *(f"v{n}" for n in versions)]),
             row(["---", "---", "---", *["---:"] * len(versions)])]
    return lines + [row([cell(s["prompt"]), cell(s["response"]), f"{s['policy']}, {s['update']}",
                         *(f"{s[f'gold_v{n}']:.3f}" for n in versions)]) for s in result["stored"][key]]


def markdown(result: dict[str, Any]) -> str:
    """The result's tables, as benchmarks/README.md shows them."""
    tables = [battery_table(result), unseen_table(result), fluent_table(result), real_and_speed_table(result),
              stored_table(result),
              *(sample_table(result, key) for key in LIST_TITLES)]
    return "\n\n".join("\n".join(table) for table in tables)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gold_battery", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help=f"where the JSON goes (default {OUT.name} under "
                                                               "benchmarks/results/)")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    # Here, not at the top: the machine's facts import torch (seconds), and a test reading only the tables should not.
    from benchmarks.common.machine import machine_facts

    out = results_path(args.out, OUT, args.quick)
    result = {"command": command_line("benchmarks.gold_battery", argv), "code": commit_at_start(),
              "machine": machine_facts("cpu"), **measure(args.quick)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(markdown(result))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
