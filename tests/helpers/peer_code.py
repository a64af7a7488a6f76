"""The peers' own code for the equivalence tests: verl's and OpenRLHF's loss and advantage functions, and TRL's
GRPOTrainer and RLOOTrainer losses, each as its release on PyPI ships it, installed without dependencies in .cache by
scripts/setup.sh (setup_for_tests). The project keeps no copy of any of it.

verl's and OpenRLHF's modules import what those installs lack (omegaconf, tensordict, ray, deepspeed), so
:func:`load_source` takes the functions under test out of the installed source with ``ast`` and runs them in a
namespace holding torch and small stand-ins for the names they only mention (annotations, a logger, padding helpers
that are the identity on padded tensors). TRL 1.16 imports whole, but only in a subprocess with it alone added to the
path (the venv's trl is 1.12 for the benchmarks): :func:`run_trl_losses`.

    verl = verl_code()
    advantages, returns = verl.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=0.95)
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import logging
import os
import subprocess
import sys
import types
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import pytest
import torch
import yaml

from tuner.exports import TRL_VERSION, openrlhf, verl

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Peer:
    """One peer's release, as the export that targets it names it, and where the tests find it installed."""

    package: str
    version: str

    @property
    def directory(self) -> Path:
        return REPO / ".cache" / f"{self.package}-{self.version}"

    @property
    def install(self) -> str:
        return f"python -m pip install --no-deps --target {self.directory} {self.package}=={self.version}"

    def path(self, relative: str) -> Path:
        """A file of the installed release; a missing install fails the test with the command that installs it."""
        file = self.directory / relative
        if not file.exists():
            pytest.fail(f"{self.package} {self.version} is not installed in {self.directory} (the export tests check "
                        f"against its own code): {self.install}")
        return file


# The versions the exports were written against: tuner/exports/verl.py's "verl 0.9.1", openrlhf.py's "OpenRLHF 0.11.2".
VERL = Peer("verl", verl.TARGET.name.split()[-1])
OPENRLHF = Peer("openrlhf", openrlhf.TARGET.name.split()[-1])
TRL = Peer("trl", TRL_VERSION)


def load_source(file: Path, names: list[str], namespace: dict[str, Any]) -> types.SimpleNamespace:
    """The top-level functions, classes and assigned constants ``names`` of ``file`` (``Class.method`` for a method,
    loaded as a plain function taking ``self``), executed in source order in ``namespace``. Decorators named neither
    there nor in ``names`` are dropped (verl's registries are kept, its ``deprecated`` goes)."""
    tree = ast.parse(file.read_text(), filename=str(file))
    wanted: list[ast.stmt] = []
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            wanted.append(node)
            found.add(node.name)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            wanted.append(node)
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and f"{node.name}.{item.name}" in names:
                    wanted.append(item)
                    found.add(f"{node.name}.{item.name}")
    missing = set(names) - found
    assert not missing, f"{file} no longer defines {sorted(missing)}"
    for node in wanted:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.decorator_list = [d for d in node.decorator_list
                                   if _decorator_root(d) in namespace or _decorator_root(d) in names]
    code = compile(ast.Module(body=wanted, type_ignores=[]), str(file), "exec")
    exec(code, namespace)  # the peer's own code, as installed
    return types.SimpleNamespace(**{name.split(".")[-1]: namespace[name.split(".")[-1]] for name in names})


def _decorator_root(node: ast.expr) -> str:
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


class Annotation:
    """Stands in for a class a peer names only in annotations and isinstance checks (DataProto, AlgoConfig...)."""


class Config:
    """Attribute and ``.get`` access to a config section, as verl's ActorConfig and AlgoConfig give it."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            setattr(self, key, Config(value) if isinstance(value, Mapping) else value)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    if TYPE_CHECKING:
        # The keys are whatever the peer's YAML holds, so its attributes are only known at run time.
        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...


# --- verl ---

VERL_CORE = [
    "AdvantageEstimator", "register_adv_est", "get_adv_estimator_fn", "register_policy_loss", "get_policy_loss_fn",
    "FixedKLController", "compute_gae_advantage_return", "compute_grpo_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage", "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage", "agg_loss", "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo", "compute_value_loss",
    "kl_penalty", "kl_penalty_forward",
]


class _Metric:
    """verl.utils.metric.Metric's constructor and from_dict, which ppo_loss only builds its logs with."""

    def __init__(self, value: Any, aggregation: Any = None) -> None:
        self.value = value

    @staticmethod
    def from_dict(values: dict[str, Any], aggregation: Any = None) -> dict[str, Any]:
        return values


class PaddedBatch(dict[str, Any]):
    """A micro-batch as verl's ppo_loss reads its TensorDict: keys, ``select`` and ``to_padded_tensor`` (the tests'
    tensors are padded already)."""

    def select(self, *keys: str) -> PaddedBatch:
        return PaddedBatch({key: self[key] for key in keys})

    def to_padded_tensor(self) -> PaddedBatch:
        return self


@functools.cache
def verl_code() -> types.SimpleNamespace:
    """verl's core_algos functions (VERL_CORE), ray_trainer's compute_advantage and apply_kl_penalty, and
    workers/utils/losses.py's ppo_loss, over verl.utils.torch_functional's masked statistics."""
    torch_functional = load_source(
        VERL.path("verl/utils/torch_functional.py"),
        ["masked_sum", "masked_mean", "masked_var", "masked_whiten", "clip_by_value"], {"torch": torch})
    core_namespace: dict[str, Any] = {
        "torch": torch, "np": np, "defaultdict": defaultdict, "Enum": Enum, "Any": Any, "Callable": Callable,
        "Optional": Optional, "verl_F": torch_functional, "AlgoConfig": Annotation,
        # gspo's loss asserts its config is an ActorConfig: the stand-in built from verl's defaults is one here.
        "ActorConfig": Config,
        "DictConfig": Annotation, "ADV_ESTIMATOR_REGISTRY": {}, "POLICY_LOSS_REGISTRY": {},
    }
    core = load_source(VERL.path("verl/trainer/ppo/core_algos.py"), VERL_CORE, core_namespace)
    trainer = load_source(
        VERL.path("verl/trainer/ppo/ray_trainer.py"), ["compute_advantage", "apply_kl_penalty"],
        {"torch": torch, "core_algos": core, "AdvantageEstimator": core.AdvantageEstimator, "DataProto": Annotation,
         "AlgoConfig": Annotation, "Optional": Optional, "masked_mean": torch_functional.masked_mean})
    losses = load_source(
        VERL.path("verl/workers/utils/losses.py"), ["ppo_loss"],
        {"torch": torch, "TensorDict": Annotation, "ActorConfig": Annotation, "agg_loss": core.agg_loss,
         "kl_penalty": core.kl_penalty, "get_policy_loss_fn": core.get_policy_loss_fn,
         "masked_mean": torch_functional.masked_mean, "masked_sum": torch_functional.masked_sum,
         "no_padding_2_padding": lambda values, data: values, "Metric": _Metric,
         "AggregationType": types.SimpleNamespace(SUM="sum", MEAN="mean")})
    return types.SimpleNamespace(**vars(torch_functional), **vars(core), **vars(trainer), **vars(losses))


@functools.cache
def verl_defaults() -> dict[str, Any]:
    """verl's generated ppo_trainer config (the defaults every override applies to), as the release ships it."""
    loaded: dict[str, Any] = yaml.safe_load(VERL.path("verl/trainer/config/_generated_ppo_trainer.yaml").read_text())
    return loaded


def verl_config(overrides: Mapping[str, str], section: str) -> Config:
    """The config section (``actor_rollout_ref.actor``, ``algorithm``, ``critic``) that verl would run with: its
    shipped defaults with the export's Hydra overrides applied, each value read as Hydra reads it (YAML)."""
    values = _section(verl_defaults(), section)
    for key, raw in overrides.items():
        if key.startswith(section + "."):
            _assign(values, key[len(section) + 1:].split("."), yaml.safe_load(raw))
    config = Config(values)
    if section.endswith(".actor"):
        config.global_batch_info = {}  # ActorConfig's default_factory, a dict that ppo_loss fills per micro-batch
    return config


def _section(tree: dict[str, Any], dotted: str) -> dict[str, Any]:
    for part in dotted.split("."):
        tree = tree[part]
    return dict(tree)


def _assign(tree: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        tree[part] = dict(tree.get(part) or {})
        tree = tree[part]
    tree[path[-1]] = value


# --- OpenRLHF ---

@functools.cache
def openrlhf_code() -> types.SimpleNamespace:
    """OpenRLHF's PolicyLoss, ValueLoss and aggregate_loss (models/loss.py), compute_reward and compute_approx_kl
    (models/utils.py), the experience maker's advantage methods (compute_advantages_and_returns,
    get_advantages_and_returns, get_cumulative_returns) and the actor's training_step, as functions of a stand-in
    ``self``, utils/loss_utils.py's _optimizer_step_loss_norm and utils/config.py's hierarchize."""
    utils = load_source(OPENRLHF.path("openrlhf/models/utils.py"),
                        ["KL_IS_WEIGHT_CLIP", "compute_approx_kl", "compute_reward", "masked_mean"],
                        {"torch": torch, "Optional": Optional, "Union": Any, "Tuple": tuple})
    loss = load_source(OPENRLHF.path("openrlhf/models/loss.py"), ["aggregate_loss", "PolicyLoss", "ValueLoss"],
                       {"torch": torch, "nn": torch.nn, "Optional": Optional, "Tuple": tuple,
                        "masked_mean": utils.masked_mean})
    logger = logging.getLogger("openrlhf.peer")
    penalties = load_source(OPENRLHF.path("openrlhf/trainer/ppo_utils/length_penalty.py"),
                            ["apply_overlong_penalty", "apply_stop_properly_penalty", "apply_length_penalties"],
                            {"List": list, "logger": logger})
    maker = load_source(
        OPENRLHF.path("openrlhf/trainer/ppo_utils/experience_maker.py"),
        ["RemoteExperienceMaker.compute_advantages_and_returns", "RemoteExperienceMaker.get_advantages_and_returns",
         "RemoteExperienceMaker.get_cumulative_returns"],
        {"torch": torch, "itertools": itertools, "List": list, "Tuple": tuple, "Experience": Annotation,
         "logger": logger, "compute_reward": utils.compute_reward,
         "apply_length_penalties": penalties.apply_length_penalties})
    actor = load_source(
        OPENRLHF.path("openrlhf/trainer/ray/ppo_actor.py"), ["ActorPPOTrainer.training_step"],
        {"torch": torch, "Optional": Optional, "Dict": dict, "Experience": Annotation,
         "compute_approx_kl": utils.compute_approx_kl, "masked_mean": utils.masked_mean,
         "aggregate_loss": loss.aggregate_loss})
    norm = load_source(OPENRLHF.path("openrlhf/utils/loss_utils.py"), ["_optimizer_step_loss_norm"],
                       {"torch": torch, "dist": types.SimpleNamespace(is_available=lambda: False)})
    config = load_source(OPENRLHF.path("openrlhf/utils/config.py"), ["hierarchize"],
                         {"SimpleNamespace": types.SimpleNamespace})
    return types.SimpleNamespace(**vars(utils), **vars(loss), **vars(maker), **vars(actor), **vars(norm),
                                 **vars(config))


@functools.cache
def openrlhf_parser() -> Any:
    """train_ppo_ray's own argument parser: the statements of its ``__main__`` block that build it (everything
    before ``parser.parse_args()``), run as shipped."""
    file = OPENRLHF.path("openrlhf/cli/train_ppo_ray.py")
    tree = ast.parse(file.read_text(), filename=str(file))
    main = next(node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    end = next(index for index, node in enumerate(main.body) if "parse_args" in ast.unparse(node))
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime, "os": os}
    exec(compile(ast.Module(body=main.body[:end], type_ignores=[]), str(file), "exec"), namespace)
    return namespace["parser"]


def openrlhf_args(flags: list[str]) -> Any:
    """The args train_ppo_ray runs with for the export's ``flags``: its parser, its hierarchize (openrlhf/utils/
    config.py), and its one post-parse default the losses read (eps_clip_low_high from eps_clip)."""
    args = openrlhf_code().hierarchize(openrlhf_parser().parse_args(flags))
    if args.actor.eps_clip_low_high is None:  # train_ppo_ray.py, "Validate arguments"
        args.actor.eps_clip_low_high = (args.actor.eps_clip, args.actor.eps_clip)
    return args


class _LossReady(Exception):  # not an error: how the stand-in strategy hands the loss back
    def __init__(self, loss: torch.Tensor) -> None:
        self.loss = loss


def openrlhf_actor_loss(args: Any, logprobs: torch.Tensor, entropy: torch.Tensor, experience: Any,
                        kl_coef: float, loss_batch_info: dict[str, Any]) -> torch.Tensor:
    """The loss OpenRLHF's actor backpropagates for one micro-batch: ActorPPOTrainer.training_step run as shipped
    (policy loss, KL loss term, entropy bonus), on a stand-in self whose actor returns ``logprobs`` and
    ``entropy`` and whose strategy hands back the loss at ``backward``, before the optimizer step and the logging.
    ``experience``: action_mask, action_log_probs (old), advantages, base_action_log_probs (reference)."""
    code = openrlhf_code()

    def backward(loss: torch.Tensor, model: Any, optimizer: Any) -> None:
        raise _LossReady(loss)

    self = types.SimpleNamespace(
        args=args, aux_loss=False, replay_buffer=None, actor_optim=None,
        actor=_Actor(logprobs, entropy),
        strategy=types.SimpleNamespace(ring_attn_group=None, backward=backward),
        # ActorPPOTrainer.__init__'s actor_loss_fn (trainer/ray/ppo_actor.py), from the same args.
        actor_loss_fn=code.PolicyLoss(
            clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip, token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold),
    )
    try:
        code.training_step(self, experience, kl_coef, 0, loss_batch_info)
    except _LossReady as ready:
        return ready.loss
    raise AssertionError("training_step returned without a backward pass")


class _Actor:
    """OpenRLHF's Actor as training_step calls it: (log-probs, output with the entropy), no model."""

    def __init__(self, logprobs: torch.Tensor, entropy: torch.Tensor) -> None:
        self.logprobs, self.entropy = logprobs, entropy

    def train(self) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        return self.logprobs, types.SimpleNamespace(entropy=self.entropy, aux_loss=None)


def openrlhf_step_info(masks: list[torch.Tensor], micro_batches: int) -> dict[str, Any]:
    """The loss_batch_info OpenRLHF gives every micro-batch of one optimizer step on one process
    (utils/loss_utils.py _optimizer_step_loss_norm: the step's tokens and responses over the gas micro-batches,
    divided by gas, which DeepSpeed's 1 / gas loss scaling then cancels)."""
    info: dict[str, Any] = openrlhf_code()._optimizer_step_loss_norm(masks, None, 1, micro_batches)
    return info


def openrlhf_experience_maker(args: Any, kl_coef: float) -> Any:
    """A stand-in RemoteExperienceMaker: the three advantage methods, over ``args`` (train_ppo_ray's parsed flags)
    and a KL controller at ``kl_coef``, without ray or the models."""
    code = openrlhf_code()
    methods = {name: getattr(code, name) for name in
               ("compute_advantages_and_returns", "get_advantages_and_returns", "get_cumulative_returns")}
    maker_class = type("ExperienceMaker", (), methods)
    maker = maker_class()
    maker.strategy = types.SimpleNamespace(args=args)
    maker.advantage_estimator = args.algo.advantage.estimator
    maker.kl_ctl = types.SimpleNamespace(value=kl_coef)
    return maker


# --- TRL, in a subprocess ---

TRL_DIR = Path(os.environ.get("PPO_TUNE_TRL_LATEST", TRL.directory))
TRL_INSTALL = f"python -m pip install --no-deps --target {TRL_DIR} trl=={TRL_VERSION}"
# Runs with TRL_DIR alone added to the path. Each case: the export's flags, parsed by TRL's own `trl grpo` / `trl
# rloo` parser, and one micro-batch; GRPOTrainer._compute_loss / RLOOTrainer._compute_loss run as shipped, bound to a
# stand-in self holding what their __init__ sets from those args, whose model forward returns the case's log-probs.
TRL_LOSSES = """
import sys, types
from collections import defaultdict
import torch
import trl
assert trl.__version__ == sys.argv[1], f"trl {trl.__version__} imported from {trl.__file__}, not {sys.argv[1]}"
from trl.scripts.grpo import make_parser as grpo_parser
from trl.scripts.rloo import make_parser as rloo_parser
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.rloo_trainer import RLOOTrainer

TRAINERS = {"grpo": (grpo_parser, GRPOTrainer), "rloo": (rloo_parser, RLOOTrainer)}
# What GRPOTrainer.__init__ / RLOOTrainer.__init__ copy from the args under the same name.
COPIED = ("loss_type", "beta", "importance_sampling_level", "off_policy_mask_threshold", "top_entropy_quantile",
          "entropy_coef", "use_adaptive_entropy", "max_completion_length", "use_vllm",
          "vllm_importance_sampling_correction", "num_generations")


class Accelerator:
    num_processes = 1
    sync_gradients = True

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather

    def reduce(self, tensor, reduction="sum"):
        return tensor


def stand_in(args, case, logps):
    self = types.SimpleNamespace(args=args, accelerator=Accelerator(), model=types.SimpleNamespace(training=True))
    for name in COPIED:
        if hasattr(args, name):
            setattr(self, name, getattr(args, name))
    self.epsilon_low = args.epsilon
    self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    self.aux_loss_enabled = False  # no mixture-of-experts router
    self._entropy_bonus_enabled = getattr(args, "entropy_coef", 0.0) != 0.0 or getattr(args, "use_adaptive_entropy",
                                                                                        False)
    self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    self.current_gradient_accumulation_steps = case["accumulation_steps"]
    self._get_per_token_logps_and_entropies = lambda *a, **k: (logps, case["entropies"], None)
    return self


cases = torch.load(sys.argv[2])
results = []
for case in cases:
    parser, trainer = TRAINERS[case["trainer"]]
    _, args, _, _ = parser().parse_args_into_dataclasses(case["flags"])  # unknown flags raise
    logps = case["logps"].clone().requires_grad_(True)
    inputs = {key: value for key, value in case["inputs"].items()}
    loss = trainer._compute_loss(stand_in(args, case, logps), None, inputs)
    loss.backward()
    parsed = {name: getattr(args, name, None) for name in case["report"]}
    results.append({"loss": loss.detach(), "grad": logps.grad, "args": parsed})
torch.save(results, sys.argv[3])
"""


def run_trl_losses(cases: list[dict[str, Any]], directory: Path) -> list[dict[str, Any]]:
    """Each case's loss and its gradient w.r.t. the log-probs, from TRL TRL_VERSION's own ``_compute_loss``.

    A case: ``trainer`` ("grpo" or "rloo"), ``flags`` (the export's setting words; add ``--output_dir``),
    ``logps`` [B, T], ``entropies`` [B, T], ``inputs`` (the batch dict _compute_loss reads: prompt_ids,
    prompt_mask, completion_ids, completion_mask, advantages, old_per_token_logps or old_logps, ...),
    ``accumulation_steps`` (current_gradient_accumulation_steps) and ``report`` (parsed args to send back)."""
    if not (TRL_DIR / "trl" / "__init__.py").exists():
        pytest.fail(f"trl {TRL_VERSION} is not in {TRL_DIR}: the trl-grpo/trl-rloo exports are checked against its "
                    f"code (the trl extra pins 1.12 for the benchmarks). Install it there: {TRL_INSTALL}")
    inputs, outputs = directory / "trl_cases.pt", directory / "trl_results.pt"
    torch.save(cases, inputs)
    env = {**os.environ, "PYTHONPATH": str(TRL_DIR), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", TRL_LOSSES, TRL_VERSION, str(inputs), str(outputs)],
                            capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, f"{result.stderr[-3000:]}\n(to reinstall: {TRL_INSTALL})"
    loaded: list[dict[str, Any]] = torch.load(outputs)
    return loaded
