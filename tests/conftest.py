"""Shared fixtures: tiny real transformers models saved to disk, loaded by the same code users run."""

from __future__ import annotations

import os
import shutil
import signal
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tuner.trial.frozen_heap import freeze_now

if TYPE_CHECKING:
    from helpers.studies import Gate
    from transformers import GPT2Config, PreTrainedTokenizerFast

# torch, tokenizers and transformers are imported where they are used, not here: under pytest-xdist the controller
# process loads this file too, runs no test, and would spend seconds importing them before any worker starts.

# The shared helpers' asserts (tests/helpers/: the peers' comparison, the exports' reading, the runs) report the values
# they compared, as they did in the test files they came from. Registered before any test module imports them.
pytest.register_assert_rewrite("helpers")

WORDS = list(string.ascii_lowercase)
_RAY_DIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Ray's temporary directory, and with it the file where ``ray start`` records its cluster's address, for this
    test process alone: under pytest-xdist each worker starts clusters of its own, and a ``ppo-tune --launcher ray``
    that finds another worker's cluster recorded would join it. (A developer's own cluster stays out of the tests
    too.) PostgreSQL is made per worker by ``helpers.studies.postgres_url``."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        # One torch thread per worker, and in every process it starts: with the cores shared by the workers, a
        # second thread only waits on a descheduled peer (one run took 151 s instead of 19 s that way).
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    # Short and under /tmp: Ray keeps Unix sockets there, whose paths may not pass about 107 characters.
    ray_dir = tempfile.mkdtemp(prefix=f"ray-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-", dir="/tmp")
    config.stash[_RAY_DIR] = ray_dir
    os.environ["RAY_TMPDIR"] = ray_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    ray_dir = config.stash.get(_RAY_DIR, None)
    if ray_dir is not None:
        shutil.rmtree(ray_dir, ignore_errors=True)


def _tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(["<pad>", "<eos>", "<unk>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def _gpt2_config(tokenizer: PreTrainedTokenizerFast) -> GPT2Config:
    from transformers import GPT2Config

    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    # Set after construction: GPT2Config takes num_labels only through kwargs its typed signature leaves out. The
    # property sets the same one-label id2label and label2id the keyword would.
    config.num_labels = 1
    return config


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    """A shut gate for this test's trials (their reward ``Gate.REWARD``); opened at the end, whatever the test left
    held going on to end."""
    # Imported here: tools.mutation_score's work copy has this file without tests/helpers/ and the tuner
    # that helpers.studies imports.
    from helpers.studies import Gate

    shut = Gate(tmp_path / "gate", monkeypatch)
    yield shut
    shut.open()


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the test, as under an interactive shell, however the
    suite was started: started in the background (a script's ``&``, nohup, a CI runner) it ignores SIGINT, Python
    then installs no handler, and a test that interrupts its own process would lose its signal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer GPT-2 and its word-level tokenizer, saved with save_pretrained."""
    import torch
    from transformers import GPT2LMHeadModel

    directory = tmp_path_factory.mktemp("tiny_lm")
    tokenizer = _tokenizer()
    torch.manual_seed(0)
    GPT2LMHeadModel(_gpt2_config(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def wider_lm_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-layer, 128-wide GPT-2 with the tiny one's tokenizer (about 30x its parameters): wide enough that bf16
    rounding differs between cached decoding and a full pass, and a larger policy for the same prompts."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("wider_lm")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_lm_dir)
    config = GPT2Config.from_pretrained(tiny_lm_dir, n_embd=128, n_layer=4, n_head=4)
    torch.manual_seed(3)
    GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised one-label GPT-2 sequence classifier: a reward model."""
    import torch
    from transformers import GPT2ForSequenceClassification

    directory = tmp_path_factory.mktemp("tiny_rm")
    tokenizer = _tokenizer()
    torch.manual_seed(1)
    GPT2ForSequenceClassification(_gpt2_config(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(64):
        length = int(torch.randint(1, 6, (1,), generator=generator))
        lines.append(" ".join(WORDS[int(i)] for i in torch.randint(0, 26, (length,), generator=generator)))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def eos_loving_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2 whose every next-token distribution puts almost all its mass on EOS.

    The final layer norm outputs a constant vector v, and EOS's (tied) embedding is a large multiple of v,
    so EOS's logit dwarfs the others whatever the input.
    """
    import torch
    from transformers import GPT2LMHeadModel

    directory = tmp_path_factory.mktemp("eos_loving_lm")
    tokenizer = _tokenizer()
    torch.manual_seed(2)
    model = GPT2LMHeadModel(_gpt2_config(tokenizer))
    with torch.no_grad():
        direction = torch.randn(model.config.n_embd)
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(direction)
        model.transformer.wte.weight[tokenizer.eos_token_id] = 50 * direction / direction.norm()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# Sampling settings of the kind Qwen's generation_config.json ships; each would change what is sampled.
SAMPLING_DEFAULTS = {
    "do_sample": True, "temperature": 1.3, "top_k": 2, "top_p": 0.5, "repetition_penalty": 3.0,
    "no_repeat_ngram_size": 1, "suppress_tokens": [3, 4, 5], "bad_words_ids": [[6], [7]], "min_new_tokens": 3,
}


@pytest.fixture(scope="session")
def lm_with_sampling_defaults_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_lm_dir``'s weights and tokenizer, plus a generation_config.json full of sampling defaults."""
    from transformers import GenerationConfig, GPT2LMHeadModel, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("lm_with_sampling_defaults")
    model = GPT2LMHeadModel.from_pretrained(tiny_lm_dir)
    model.generation_config = GenerationConfig(
        **SAMPLING_DEFAULTS, eos_token_id=model.config.eos_token_id, pad_token_id=model.config.pad_token_id,
    )
    model.save_pretrained(directory)
    PreTrainedTokenizerFast.from_pretrained(tiny_lm_dir).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def small_vocab_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2 reward model whose word-level vocabulary (a-e) is smaller than, and different from, the policy's."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2ForSequenceClassification, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("small_vocab_rm")
    vocab = {token: index for index, token in enumerate(["<unk>", "<pad>", "<eos>", "a", "b", "c", "d", "e"])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    torch.manual_seed(4)
    GPT2ForSequenceClassification(_gpt2_config(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, every test module) is frozen (``tuner.trial.frozen_heap``): the
    collections during the tests, and the session's exit, skip it (7% less CPU for a run of in-process tests)."""
    freeze_now()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` need the hardware itself; elsewhere they are reported as skipped, with the reason.
    Tests marked ``heavy`` run first.

    Under pytest-xdist (``--dist loadgroup``) the tests of a module that share one of its module-scoped fixtures
    (a Ray cluster, a benchmark's run, a study built once) form a group that runs on one worker, which builds the
    fixture once; every other test goes to whichever worker is free."""
    import torch

    for item, group in _shared_fixture_groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))
    # The heavy tests first, so that the parallel suite's last minutes are not one worker finishing one of them.
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
    gpus = torch.cuda.device_count()
    for item in items:
        marker = item.get_closest_marker("cuda")
        needed = marker.kwargs.get("gpus", 1) if marker is not None else 0
        if needed > gpus:
            item.add_marker(pytest.mark.skip(reason=f"needs {needed} CUDA GPU(s), this machine has {gpus}"))


def _shared_fixture_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Each test that uses a module- or class-scoped fixture, with its group's name: tests joined, within a module,
    by any such fixture they have in common (two tests that share none may still meet through a third)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    shared: dict[pytest.Item, list[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        definitions = getattr(item, "_fixtureinfo", None)
        if module is None or definitions is None:
            continue
        keys = [f"{module.__name__}:{name}" for name, defs in definitions.name2fixturedefs.items()
                if defs and defs[-1].scope in ("module", "class")]
        if keys:
            shared[item] = keys
            for key in keys[1:]:
                parent[root(key)] = root(keys[0])
    return {item: root(keys[0]) for item, keys in shared.items()}
