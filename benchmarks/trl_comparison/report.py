"""Markdown for the TRL comparison's result, and writing it into benchmarks/trl_comparison/README.md between
markers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _facts(result: dict[str, Any]) -> str:
    m, settings = result["machine"], result["settings"]
    gpu = f", GPU {m['gpu']}" if "gpu" in m else ""
    load = ", ".join(f"{x:.1f}" for x in m["load_average_at_start"])
    return (
        f"Measured {m['date_utc']}{_code(m.get('code'))} on {m['cpu']} ({m['logical_cpus']} logical CPUs{gpu}); "
        f"device `{settings['device']}`, `torch.set_num_threads({settings['threads']})` for both sides; "
        f"load average at start {load}. torch {m['torch']}, transformers {m['transformers']}, "
        f"accelerate {m['accelerate']}, TRL {m['trl']}, Python {m['python']}. "
        f"{settings['repeats']} repeats per side in fresh processes, alternating sides; "
        f"{result['workload']['warmup_updates']} warmup update(s) dropped from each run, "
        f"then the median of {result['workload']['measured_updates']} updates per run and the median over repeats."
        + _matmul_peak(m.get("matmul_peak"))
    )


def _code(commit: str | None) -> str:
    return f" at commit `{commit}`" if commit else ""


def _matmul_peak(measured: dict[str, Any] | None) -> str:
    """The sentence on the measured matmul peak (empty for results from before it was measured)."""
    if not measured:
        return ""
    sizes = ", ".join(str(n) for n in measured["sizes"])
    peaks = "; ".join(f"{name} {flops / 1e9:,.1f} GFLOP/s" for name, flops in measured["peak_flops"].items())
    tf32 = f" (TF32 matmuls {'on' if measured['tf32_matmul'] else 'off'})" if "tf32_matmul" in measured else ""
    return (
        f" Matmul peak measured in the same session, in a fresh process with the workers' "
        f"{measured['threads']} thread(s): best `torch.mm` of square n = {sizes} over {measured['repeats']} "
        f"repeats, {peaks}{tf32}."
    )


def _workload(result: dict[str, Any]) -> str:
    w = result["workload"]
    return (
        f"Workload per PPO update: {w['batch_size']} episodes (per_device_train_batch_size "
        f"{w['per_device_train_batch_size']} x gradient_accumulation_steps {w['gradient_accumulation_steps']}, "
        f"num_mini_batches {w['num_mini_batches']}), num_ppo_epochs {w['num_ppo_epochs']}, "
        f"prompts of {w['prompt_length']} tokens, responses of exactly {w['response_length']} tokens "
        f"(no stop token), local_rollout_forward_batch_size {w['local_rollout_forward_batch_size']}, fp32."
    )


def _sizes_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| size | architecture | policy params | value params | reward params "
        "| est. GFLOP per update (rollout / update) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, size in result["sizes"].items():
        p, work = size["parameters"], size["work"]
        lines.append(
            f"| {name} | {size['note']} | {p['policy']:,} | {p['value']:,} | {p['reward']:,} | "
            f"{work['rollout_flops'] / 1e9:.2f} / {work['update_flops'] / 1e9:.2f} |"
        )
    return lines


def _equal_work_table(result: dict[str, Any]) -> list[str]:
    names = list(result["sizes"])
    header = "| per PPO update | " + " | ".join(f"{name}: ppo_core vs TRL" for name in names) + " |"
    lines = [header, "|---|" + "---:|" * len(names)]
    checks = {name: result["sizes"][name]["equal_work"] for name in names}
    for index, row in enumerate(checks[names[0]]["rows"]):
        cells = []
        for name in names:
            cell = checks[name]["rows"][index]
            if cell["equal"] and cell["ppo_core"] == cell["trl"]:
                cells.append(f"{_count(cell['ppo_core'])} (same)")
            elif cell["equal"]:
                cells.append(f"{_count(cell['ppo_core'])} vs {_count(cell['trl'])} (within tolerance)")
            else:
                cells.append(f"**{_count(cell['ppo_core'])} vs {_count(cell['trl'])} (DIFFERENT)**")
        lines.append(f"| {row['quantity']} | " + " | ".join(cells) + " |")
    verdicts = ", ".join(
        f"{name}: {'equal' if checks[name]['all_equal'] else 'NOT EQUAL'}" for name in names
    )
    lines.append("")
    lines.append(f"Equal-work check: {verdicts}.")
    return lines


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _ratio(ratios: dict[str, float], key: str) -> str:
    return f"**{ratios[key]:.2f}**" if key in ratios else "–"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _side_cells(name: str, label: str, s: dict[str, Any], cuda: bool) -> list[str]:
    cells = [name, label, _seconds(s["rollout_s"]), _seconds(s["update_s"]), _seconds(s["other_s"]),
             _seconds(s["gc_s"]), f"{_seconds(s['wall_s'])} ({_seconds(s['wall_s_min'])}–{_seconds(s['wall_s_max'])})",
             _seconds(s["wall_excl_gc_s"]), _num(s["episodes_per_s"]), _num(s["update_flops_per_s"] / 1e9),
             _share(s.get("update_share_of_matmul_peak"))]
    if cuda:
        return [*cells, _num(s["generated_tokens_per_s"]), _num(s["trained_tokens_per_s"]), _share(s["update_mfu"]),
                _num(s.get("cuda_peak_allocated_mib"))]
    return [*cells, _num(s["peak_rss_delta_mib"]), _num(s["peak_rss_mib"])]


def results_table(result: dict[str, Any]) -> list[str]:
    cuda = result["settings"]["device"] == "cuda"
    columns = ["size", "side", "rollout s", "update s", "other s", "gc.collect s (in wall)",
               "wall s / update (min–max over repeats)", "wall excl. gc s", "episodes/s", "update GFLOP/s",
               "update % of matmul peak"]
    columns += ["gen tok/s", "train tok/s", "update MFU", "CUDA peak MiB"] if cuda \
        else ["peak RSS Δ MiB", "peak RSS MiB"]
    lines = ["| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]
    for name, size in result["sizes"].items():
        summary = size["summary"]
        lines.append("| " + " | ".join(_side_cells(name, "ppo_core", summary["ppo_core"], cuda)) + " |")
        lines.append("| " + " | ".join(_side_cells(name, "TRL", summary["trl"], cuda)) + " |")
        r = summary["ratio"]
        cells = [name, "ppo_core / TRL", _ratio(r, "rollout_s"), _ratio(r, "update_s"), "", "",
                 _ratio(r, "wall_s"), _ratio(r, "wall_excl_gc_s"), _ratio(r, "episodes_per_s"),
                 _ratio(r, "update_flops_per_s"), ""]
        cells += ["", "", _ratio(r, "update_mfu"), _ratio(r, "cuda_peak_allocated_mib")] if cuda \
            else [_ratio(r, "peak_rss_delta_mib"), _ratio(r, "peak_rss_mib")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _profile_tables(result: dict[str, Any], operator_rows: int = 10) -> list[str]:
    lines: list[str] = []
    for name, size in result["sizes"].items():
        profile = size.get("profile")
        if not profile:
            continue
        lines += [
            "",
            f"**{name}** — ppo_core, mean {profile['mean_update_wall_s']:.3f} s per update over "
            f"{profile['breakdown_updates']} unprofiled update(s); inclusive wall time per function "
            "(nested rows are included in their parents):",
            "",
            "| function | ms / update | share of update wall | calls / update |",
            "|---|---:|---:|---:|",
        ]
        for row in profile["breakdown"]:
            lines.append(
                f"| {row['label']} | {row['ms_per_update']:.1f} | {row['share_of_update_wall']:.1%} | "
                f"{row['calls_per_update']:g} |"
            )
        on_gpu = any("self_device_ms_per_update" in row for row in profile["operators"])
        ranked_by = "GPU kernel" if on_gpu else "CPU"
        lines += [
            "",
            f"Top operators by self {ranked_by} time under torch.profiler ({profile['profiled_updates']} updates):",
            "",
            "| operator | self CPU ms / update |" + (" self GPU ms / update |" if on_gpu else "")
            + " share of op time | calls / update |",
            "|---|---:|---:|---:|" + ("---:|" if on_gpu else ""),
        ]
        for row in profile["operators"][:operator_rows]:
            gpu = f" {row['self_device_ms_per_update']:.1f} |" if on_gpu else ""
            lines.append(
                f"| `{row['operator']}` | {row['self_cpu_ms_per_update']:.1f} |{gpu} {row['share_of_op_time']:.1%} | "
                f"{row['calls_per_update']:g} |"
            )
    return lines


def _headline(result: dict[str, Any]) -> str:
    parts = []
    for name, size in result["sizes"].items():
        r = size["summary"]["ratio"]
        parts.append(
            f"{name}: ppo_core takes {r['wall_s']:.2f}x TRL's wall time per update ({r['episodes_per_s']:.2f}x "
            f"the episodes/s), {r['wall_excl_gc_s']:.2f}x with TRL's gc.collect() time removed, "
            f"{r['update_s']:.2f}x in the update phase and {r['rollout_s']:.2f}x in the rollout; "
            f"{r['peak_rss_delta_mib']:.2f}x TRL's work memory ({r['peak_rss_mib']:.2f}x its whole peak RSS)"
        )
    return "**Headline** — " + "; ".join(parts) + "."


def markdown(result: dict[str, Any]) -> str:
    lines = [
        _headline(result),
        "",
        _facts(result),
        "",
        _workload(result),
        "",
        *_sizes_table(result),
        "",
        "#### Equal-work check (counted with hooks in a separate untimed run of each side)",
        "",
        *_equal_work_table(result),
        "",
        "#### Results (medians; seconds per PPO update)",
        "",
        *results_table(result),
        "",
        "Ratios are ppo_core / TRL: below 1 means ppo_core is faster or smaller for seconds and memory; "
        "above 1 means ppo_core is faster for episodes/s. `other s` is per-update time outside both phases "
        "(TRL: `gc.collect()`, `empty_cache()` and the dataloader between updates); `gc.collect s` is the time "
        "in TRL's explicit `gc.collect()` calls, already inside its rollout and other time; `wall excl. gc` "
        "removes it. `update GFLOP/s` is the estimated update-phase FLOPs over its time; `update % of matmul peak` "
        "divides it by the fp32 `torch.mm` peak measured in the same session (see above), so it says how much of what "
        "this machine's matmuls reach the update phase gets. `peak RSS Δ` is the run's peak resident set above its "
        "resident set after imports (each side's libraries, datasets among them for both, are in the baseline): the "
        "work's memory; `peak RSS` is the whole process's peak, libraries included."
        + (" `update MFU` divides it by the GPU's datasheet peak (flops.py)." if result["settings"]["device"] == "cuda"
           else ""),
    ]
    profile = _profile_tables(result)
    if profile:
        lines += ["", "#### Where ppo_core's time goes", *profile]
    return "\n".join(lines) + "\n"


def write_into_readme(readme: Path, device: str, text: str) -> None:
    """Replace the generated block for ``device`` between its markers (appending the block if missing)."""
    start, end = f"<!-- bench:{device}:start -->", f"<!-- bench:{device}:end -->"
    block = f"{start}\n{text}{end}"
    current = readme.read_text(encoding="utf-8") if readme.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _match: block, current)
    else:
        updated = current.rstrip() + f"\n\n{block}\n"
    readme.write_text(updated, encoding="utf-8")
