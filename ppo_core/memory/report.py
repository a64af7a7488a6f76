"""``ppo-tune train CONFIG --estimate``'s printout: a run's estimate (:mod:`ppo_core.memory.estimate`) as three rich
tables, the models, the memory of one device by phase, and the tokens of one update."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ppo_core.memory.estimate import RunEstimate
from ppo_core.memory.sizes import GIB


def print_estimate(estimate: RunEstimate, console: Console | None = None) -> None:
    """The estimate as three rich tables: the models, the memory of one device by phase, the tokens."""
    console = console or Console()
    models = Table(title="Models (counted on the meta device; no weights loaded)", title_justify="left")
    for column in ("model", "trained", "frozen", "memory"):
        models.add_column(column, justify="left" if column == "model" else "right")
    models.add_column("path", overflow="fold")
    for model in estimate.models:
        frozen = f"{model.frozen:,} {model.frozen_dtype}" if model.frozen else "0"
        models.add_row(model.role + (f" ({model.note})" if model.note else ""), f"{model.trainable:,}", frozen,
                       _size(model.memory_bytes), model.path)
    console.print(models)

    act, dtype = estimate.activations, estimate.activation_dtype
    checkpointed = ", checkpointed" if estimate.gradient_checkpointing else ""
    memory = Table(title="Memory per device (estimate)", title_justify="left")
    memory.add_column("what")
    memory.add_column("memory", justify="right")
    memory.add_row("weights; gradients and AdamW moments of the trained", _size(estimate.weight_bytes))
    if act.autocast_copies:
        memory.add_row("both phases: bf16 autocast copies of float32 weights", _size(act.autocast_copies))
    memory.add_row(f"rollout: generation KV cache ({dtype})", _size(act.kv_cache))
    memory.add_row("rollout: scoring logits, reference's and policy's", _size(act.rollout_logits))
    memory.add_row(f"update: policy activations ({dtype}{checkpointed})", _size(act.policy_activations))
    if act.value_activations:  # a critic-free estimator has no value network
        memory.add_row(f"update: value activations ({dtype}{checkpointed})", _size(act.value_activations))
    memory.add_row("update: logits and log-softmax (float32)", _size(act.update_logits))
    memory.add_section()
    memory.add_row("peak = weights + max(rollout, update)", _size(estimate.peak_bytes), style="bold")
    console.print(memory)

    t = estimate.tokens
    tokens = Table(title="Tokens", title_justify="left")
    tokens.add_column("what")
    tokens.add_column("value", justify="right")
    source = "measured" if t.prompts_measured else "max_prompt_length"
    tokens.add_row(f"prompt tokens, max / mean ({source})", f"{t.prompt_tokens_max} / {t.prompt_tokens_mean:.1f}")
    tokens.add_row("response tokens", str(t.response_length))
    tokens.add_row("episodes per update (batch_size)", str(t.batch_size))
    tokens.add_row("tokens per update, padded / mean", f"{t.tokens_per_update:,} / {t.mean_tokens_per_update:,.0f}")
    console.print(tokens)


def _size(count: int) -> str:
    if count == 0:
        return "0"
    return f"{count / GIB:.2f} GiB" if count >= GIB / 10 else f"{count / 2**20:.1f} MiB"
