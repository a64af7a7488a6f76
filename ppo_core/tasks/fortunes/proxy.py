"""How a text task's proxy reward model starts before it learns from the gold-labelled pairs: one recipe per proxy
version.

Version 1 starts the proxy from the companion policy's transformer, as RLHF starts a reward model from the SFT
policy. On SmolLM2-135M-Instruct's own responses to held-out prompts it ordered 66% of gold-apart pairs as gold does
(Spearman 0.46): the companion learned the corpus's text by heart, a start that the pairs do not undo. Version 2
starts from a fresh GPT-2 of the task's shape, with dropout while it trains, and learns the same pairs: 68% and 0.52
on the same responses (``fortunes_v4_smollm2``'s build). It shares no weights with any policy. Version 3 learns
no transformer: it is a linear head on the pair policy's first three layers (``probe_proxy.py``), and reads the
response alone.

The recipe of a version never changes, so that a task built with it keeps its proxy (the version is part of the
task's parameters, and so of its cache key).

>>> PROXY_VERSIONS[1].from_companion
True
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.tasks.sft import ModelShape


@dataclass(frozen=True)
class ProxyRecipe:
    """Where a proxy version's training starts."""

    from_companion: bool
    """Start from the companion policy's transformer (its weights, no dropout); else from a fresh GPT-2 of the
    task's shape, whose weights share nothing with any policy."""
    dropout: float = 0.0
    """A fresh proxy's dropout on embeddings, attention and residuals while it trains: ten thousand pairs are few
    for its weights, and a proxy scores in eval mode, so dropout never touches a reward."""
    probe_layers: int = 0
    """When positive, the proxy is a ridge probe on the pair policy's first ``probe_layers`` layers
    (``probe_proxy.py``) instead of a transformer trained on the pairs."""
    probe_epochs: int = 0
    """Passes of the regression that tunes a probe's layers after its ridge head is fitted."""

    @property
    def reads_prompt(self) -> bool:
        """Whether the proxy reads the prompt before the response (``format_for_reward``) or the response alone
        (``probe_proxy.proxy_text``)."""
        return self.probe_layers == 0


PROXY_VERSIONS: dict[int, ProxyRecipe] = {
    1: ProxyRecipe(from_companion=True),
    2: ProxyRecipe(from_companion=False, dropout=0.1),
    # Three layers: on SmolLM2's held-out responses the ridge probe on layers 1 to 6 ordered 70-75% of pairs, best
    # at 3, and the later layers no better (layer 30: 66%) at ten times the cost of a reward; two epochs of tuning
    # added one to three points.
    3: ProxyRecipe(from_companion=False, probe_layers=3, probe_epochs=2),
}


def proxy_recipe(version: int) -> ProxyRecipe:
    """The recipe of proxy ``version``; ``ValueError`` naming the known ones otherwise."""
    if version not in PROXY_VERSIONS:
        raise ValueError(f"unknown proxy version {version}; known: {', '.join(map(str, PROXY_VERSIONS))}")
    return PROXY_VERSIONS[version]


def fresh_proxy_base(recipe: ProxyRecipe, shape: ModelShape, tokenizer: PreTrainedTokenizerFast) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 of ``shape`` over ``tokenizer``'s vocabulary, with the recipe's dropout, whose
    transformer the proxy starts from (the caller seeds torch)."""
    if recipe.from_companion or recipe.probe_layers:
        raise ValueError("this proxy version starts from a policy (the companion, or the pair policy's first layers), "
                         "not a fresh model")
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=shape.n_positions, n_embd=shape.n_embd,
                        n_layer=shape.n_layer, n_head=shape.n_head, resid_pdrop=recipe.dropout,
                        embd_pdrop=recipe.dropout, attn_pdrop=recipe.dropout, summary_first_dropout=0.0,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return GPT2LMHeadModel(config)
