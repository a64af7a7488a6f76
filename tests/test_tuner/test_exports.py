"""``ppo-tune best --format``: a trial's config as TRL (PPO 1.12; GRPO and RLOO 1.16), verl and OpenRLHF arguments,
with what each target lacks as ``# name=value: why`` comments and nothing dropped silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from helpers.exports import comments_of, flags_of, overrides_of, settings_of
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from benchmarks.trl_comparison.peer_trl import TRL_PPO_VERSION, install_command, peer_directory
from ppo_core.config.ppo_config import PPOConfig, settable_fields
from ppo_tune.cli import main
from tuner.exports import EXPORT_FORMATS, TRL_VERSION, openrlhf, trl_grpo_rloo, trl_ppo, verl
from tuner.exports._common import NOT_TRAINING, Target, export
from tuner.store.attrs import CONFIG_ATTR

REPO = Path(__file__).resolve().parents[2]
TARGETS: dict[str, Target] = {"trl-ppo": trl_ppo.TARGET, "trl-grpo": trl_grpo_rloo.GRPO, "trl-rloo": trl_grpo_rloo.RLOO,
                              "verl": verl.TARGET, "openrlhf": openrlhf.TARGET}


# --- TRL 1.12 PPO (trl-ppo, alias trl-args) ---

def test_trl_ppo_flags_round_trip_and_missing_concepts_become_comments() -> None:
    config = PPOConfig(learning_rate=7e-6, value_learning_rate=6e-5, kl_target=8.0, kl_estimator="k2",
                       num_mini_batches=2, gradient_accumulation_steps=2).to_dict()
    text = trl_ppo.trl_arguments(config)
    flags = settings_of(text)
    comments = comments_of(text)
    assert all(flag[2:] in trl_ppo.KEYS.values() for flag in flags if flag.startswith("--"))
    # TRL 1.12's own PPO script parser (ScriptArguments, its PPOConfig, ModelConfig: the trl extra) reads every flag
    # back to the same values. The run's dataset and output are the user's to add; on this GPU-less machine TRL's
    # TrainingArguments refuse its default bf16 unless the run is put on the CPU.
    parsed = trl_ppo_parse([*flags, "--dataset_name", "prompts", "--output_dir", "out", "--use_cpu", "True",
                            "--bf16", "False"])
    assert parsed["learning_rate"] == 7e-6 and parsed["num_mini_batches"] == 2 and parsed["kl_estimator"] == "k1"
    assert parsed["gradient_accumulation_steps"] == 2 and parsed["dtype"] == "float32"
    assert any(c.startswith("# value_learning_rate=6e-05") for c in comments)
    assert any(c.startswith("# kl_target=8") for c in comments)
    assert any(c.startswith("# kl_estimator=k2: TRL 1.12 accepts only k1 or k3") for c in comments)
    assert any("num_mini_batches > 1" in c for c in comments)
    assert not any("entropy_coef" in c for c in comments)  # 0 behaves as TRL does: nothing to say
    # TRL 1.12's PPO script has no --trust_remote_code, and transformers 5 no --warmup_ratio.
    assert "--trust_remote_code" not in flags and "--warmup_ratio" not in flags


# TRL 1.12's own `trl ppo` parser in a process of its own, TRL 1.12 first on its path: the environment's TRL is the
# current release, which has no PPO (benchmarks.trl_comparison.peer_trl keeps 1.12 beside it).
TRL_PPO_PARSE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
import trl
from transformers import HfArgumentParser
from trl import ModelConfig, ScriptArguments
from trl.experimental.ppo import PPOConfig
assert trl.__version__ == sys.argv[2], f"trl {trl.__version__} imported from {trl.__file__}, not {sys.argv[2]}"
parsed = HfArgumentParser([ScriptArguments, PPOConfig, ModelConfig]).parse_args_into_dataclasses(json.load(sys.stdin))
print(json.dumps({key: value for part in parsed for key, value in vars(part).items()}, default=str))
"""


def trl_ppo_parse(flags: list[str]) -> dict[str, object]:
    """The values TRL 1.12's own ``trl ppo`` parser gives ``flags``, merged over its three argument classes."""
    directory = peer_directory()
    if not (directory / "trl" / "__init__.py").is_file():
        pytest.fail(f"TRL {TRL_PPO_VERSION} is not in {directory}: the trl-ppo export is checked against it "
                    f"({install_command()})")
    result = subprocess.run([sys.executable, "-c", TRL_PPO_PARSE, str(directory), TRL_PPO_VERSION],
                            input=json.dumps(flags), capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def test_trl_ppo_says_its_trainer_does_gae_only() -> None:
    comments = comments_of(trl_ppo.trl_arguments(PPOConfig(advantage_estimator="rloo").to_dict()))
    assert any(c.startswith("# advantage_estimator=rloo: TRL's PPOTrainer only does GAE") and "trl-grpo or trl-rloo"
               in c for c in comments)


# --- TRL 1.16 GRPO and RLOO, parsed by TRL's own `trl grpo` / `trl rloo` parsers in a subprocess ---

TRL_DIR = Path(os.environ.get("PPO_TUNE_TRL_LATEST", REPO / ".cache" / f"trl-{TRL_VERSION}"))
INSTALL = f"python -m pip install --no-deps --target {TRL_DIR} trl=={TRL_VERSION}"
# Runs with only TRL_DIR added to the path: the benchmarks' trl 1.12 may be installed in the venv itself.
PARSE = """
import dataclasses, json, sys
import trl
assert trl.__version__ == sys.argv[1], f"trl {trl.__version__} imported from {trl.__file__}, not {sys.argv[1]}"
from trl.scripts.grpo import make_parser as grpo_parser
from trl.scripts.rloo import make_parser as rloo_parser
parsed = []
for trainer, flags in json.load(sys.stdin):
    parser = {"grpo": grpo_parser, "rloo": rloo_parser}[trainer]()
    script, training, model, _ = parser.parse_args_into_dataclasses(flags)  # unknown flags raise
    values = {}
    for part in (script, model, training):
        values.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    parsed.append(json.loads(json.dumps(values, default=str)))
json.dump(parsed, sys.stdout)
"""


def parse_with_trl(cases: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each (trainer, exported text) parsed by TRL TRL_VERSION's own script parser: every attribute it ended with."""
    if not (TRL_DIR / "trl" / "__init__.py").exists():
        pytest.fail(f"trl {TRL_VERSION} is not in {TRL_DIR}: the trl-grpo/trl-rloo exports are checked against it "
                    f"(the trl extra pins 1.12 for the benchmarks). Install it there: {INSTALL}")
    env = {**os.environ, "PYTHONPATH": str(TRL_DIR)}
    payload = json.dumps([(trainer, settings_of(text)) for trainer, text in cases])
    result = subprocess.run([sys.executable, "-c", PARSE, TRL_VERSION], input=payload, capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, f"{result.stderr[-3000:]}\n(to reinstall: {INSTALL})"
    return json.loads(result.stdout)


# PPOConfig's keyword arguments, here and in GROUP_RUN and GAE_RUN below: typed Any, since each field has a type of
# its own that the union of the values (what a plain dict is inferred as) does not fit.
GRPO_RUN: dict[str, Any] = dict(
    task=None, sft_model_path="org/sft", reward_model_path="org/rm", reward_funcs=["reward_functions:count_letter_a"],
    reward_weights=[1.0, 0.5], dataset_name="org/prompts", advantage_estimator="grpo", num_generations=4,
    per_device_train_batch_size=4, gradient_accumulation_steps=4, num_mini_batches=2, num_ppo_epochs=2,
    learning_rate=7e-6, cliprange_low=0.2, cliprange_high=0.28, beta=0.02, loss_type="seq_mean_token_sum_norm",
    scale_rewards="none", response_length=16, temperature=0.9, total_episodes=64, warmup_steps=1,
    lr_scheduler_type="cosine", seed=7, entropy_coef=0.01, use_peft=True, lora_r=8, use_cpu=True,
)
RLOO_RUN: dict[str, Any] = dict(advantage_estimator="rloo", num_generations=2, kl_coef=0.03, cliprange=0.1,
                                num_train_epochs=2.0, warmup_ratio=0.1, response_length=12, use_cpu=True)


@pytest.fixture(scope="module")
def trl_parsed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    output_dir = str(tmp_path_factory.mktemp("trl_out"))
    configs = [PPOConfig(**GRPO_RUN, output_dir=output_dir), PPOConfig(**RLOO_RUN, output_dir=output_dir),
               PPOConfig(use_cpu=True, output_dir=output_dir), PPOConfig(advantage_estimator="grpo", use_cpu=True,
                                                                       output_dir=output_dir)]
    cases = [("grpo", trl_grpo_rloo.grpo_arguments(configs[0].to_dict())),
             ("rloo", trl_grpo_rloo.rloo_arguments(configs[1].to_dict())),
             # Configs of other estimators still parse; what the trainer cannot do is in the comments.
             ("grpo", trl_grpo_rloo.grpo_arguments(configs[2].to_dict())),
             ("rloo", trl_grpo_rloo.rloo_arguments(configs[3].to_dict()))]
    return parse_with_trl(cases)


def test_trl_grpo_flags_parse_in_trl_and_keep_the_run(trl_parsed: list[dict[str, Any]]) -> None:
    grpo = trl_parsed[0]
    assert grpo["learning_rate"] == 7e-6 and grpo["num_generations"] == 4 and grpo["temperature"] == 0.9
    assert (grpo["epsilon"], grpo["epsilon_high"], grpo["beta"]) == (0.2, 0.28, 0.02)
    assert grpo["loss_type"] == "dr_grpo" and grpo["scale_rewards"] == "none" and grpo["entropy_coef"] == 0.01
    assert grpo["max_completion_length"] == 16 and grpo["seed"] == 7
    # One generation is our rollout batch: 4 per device x 4 micro-batches = 16 completions, 4 prompts of 4 ...
    assert grpo["generation_batch_size"] == 16 and grpo["steps_per_generation"] == 4
    # ... feeding num_mini_batches x num_ppo_epochs = 4 optimizer steps of 8 completions (2 micro-batches each).
    assert grpo["per_device_train_batch_size"] == 4 and grpo["gradient_accumulation_steps"] == 2
    assert grpo["num_iterations"] == 2
    assert grpo["steps_per_generation"] * grpo["num_iterations"] // grpo["gradient_accumulation_steps"] == 4
    # 64 episodes: 4 PPO updates of 4 optimizer steps; one update of warmup is 4 optimizer steps.
    assert grpo["max_steps"] == 16 and grpo["warmup_steps"] == 4 and "cosine" in grpo["lr_scheduler_type"]
    assert grpo["model_name_or_path"] == "org/sft" and grpo["reward_model_name_or_path"] == "org/rm"
    assert grpo["reward_funcs"] == ["reward_functions.count_letter_a"] and grpo["reward_weights"] == [1.0, 0.5]
    assert grpo["dataset_name"] == "org/prompts" and grpo["use_peft"] and grpo["lora_r"] == 8
    assert grpo["gradient_checkpointing"] is False  # TRL's default is on; ppo-tune's run had it off


def test_trl_rloo_flags_parse_in_trl_and_keep_the_run(trl_parsed: list[dict[str, Any]]) -> None:
    rloo = trl_parsed[1]
    assert rloo["num_generations"] == 2 and rloo["beta"] == 0.03  # KL in the reward: RLOO's beta is kl_coef
    assert rloo["epsilon"] == rloo["epsilon_high"] == 0.1 and rloo["max_completion_length"] == 12
    assert rloo["generation_batch_size"] == 8 and rloo["num_iterations"] == 4  # ppo-tune's defaults: 8, 4 epochs
    assert rloo["num_train_epochs"] == 2.0  # passes over the prompts, each answering every prompt num_generations times
    assert rloo["warmup_steps"] == 0.1  # transformers 5: a fraction below 1 is a warmup ratio


def test_trl_exports_of_other_estimators_parse_and_say_what_differs(trl_parsed: list[dict[str, Any]]) -> None:
    assert trl_parsed[2]["beta"] == 0.0 and trl_parsed[3]["beta"] == 0.0  # no KL where ppo-tune had none
    comments = comments_of(trl_grpo_rloo.grpo_arguments(PPOConfig(advantage_estimator="reinforce_pp").to_dict()))
    assert any(c.startswith("# advantage_estimator=reinforce_pp: GRPOTrainer computes") for c in comments)
    assert any(c.startswith("# kl_in_reward=True: GRPOTrainer has KL only as a loss term") for c in comments)
    comments = comments_of(trl_grpo_rloo.rloo_arguments(PPOConfig(advantage_estimator="grpo").to_dict()))
    assert any(c.startswith("# kl_in_reward=False: RLOOTrainer penalises the reward only") for c in comments)
    assert any(c.startswith("# advantage_estimator=grpo:") and "trl-grpo" in c for c in comments)


# --- verl 0.9.1 and OpenRLHF 0.11.2: against the names their sources define ---

# Every key the verl export may set, each present in verl/trainer/config/_generated_ppo_trainer.yaml of verl 0.9.1
# (the PyPI release; github.com/volcengine/verl), read by flattening that file. Values checked in core_algos.py.
VERL_KEYS = {
    "actor_rollout_ref.actor.clip_ratio_c", "actor_rollout_ref.actor.clip_ratio_high",
    "actor_rollout_ref.actor.clip_ratio_low", "actor_rollout_ref.actor.policy_loss.loss_mode",
    "actor_rollout_ref.actor.entropy_coeff", "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type", "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor", "actor_rollout_ref.actor.optim.clip_grad",
    "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "actor_rollout_ref.actor.optim.lr_warmup_steps", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.optim.weight_decay", "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.model.lora_alpha", "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.target_modules", "actor_rollout_ref.model.trust_remote_code",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.ignore_eos",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.temperature", "algorithm.adv_estimator", "algorithm.gamma",
    "algorithm.kl_ctrl.horizon", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.type",
    "algorithm.kl_penalty", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo", "algorithm.use_kl_in_reward",
    "critic.cliprange_value", "critic.model.enable_gradient_checkpointing", "critic.model.lora_alpha",
    "critic.model.lora_rank", "critic.model.path", "critic.optim.clip_grad", "critic.optim.lr",
    "critic.optim.lr_scheduler_type", "critic.optim.lr_warmup_steps", "critic.optim.lr_warmup_steps_ratio",
    "critic.optim.weight_decay", "critic.ppo_micro_batch_size_per_gpu", "data.max_prompt_length",
    "data.max_response_length", "data.seed", "data.train_batch_size", "data.truncation", "reward.reward_model.enable",
    "reward.reward_model.model_path", "trainer.total_epochs", "trainer.total_training_steps",
}
# Every flag the OpenRLHF export may give, each an add_argument of openrlhf/cli/train_ppo_ray.py in OpenRLHF 0.11.2
# (the PyPI release; github.com/OpenRLHF/OpenRLHF, dotted flags since 0.11), {prefix} expanded to actor and
# critic. Values checked in trainer/ppo_utils/experience_maker.py and trainer/ray/ppo_actor.py.
OPENRLHF_FLAGS = {
    "actor.adam.betas", "actor.adam.eps", "actor.adam.lr", "actor.adam.weight_decay", "actor.dual_clip",
    "actor.entropy_coef", "actor.policy_loss_type",
    "actor.eps_clip_low_high", "actor.gradient_checkpointing_enable", "actor.loss_agg_mode", "actor.lr_scheduler",
    "actor.lr_warmup_ratio", "actor.max_norm", "actor.model_name_or_path", "algo.advantage.estimator",
    "algo.advantage.gamma", "algo.advantage.lambd", "algo.kl.estimator", "algo.kl.horizon", "algo.kl.init_coef",
    "algo.kl.target", "algo.kl.use_loss", "critic.adam.betas", "critic.adam.eps", "critic.adam.lr",
    "critic.adam.weight_decay", "critic.lr_scheduler", "critic.lr_warmup_ratio", "critic.max_norm",
    "critic.model_name_or_path", "critic.value_clip", "data.max_len", "data.max_samples", "data.prompt_dataset",
    "data.prompt_split", "ds.attn_implementation", "ds.lora.alpha", "ds.lora.dropout", "ds.lora.rank",
    "ds.lora.target_modules", "reward.model_name_or_path", "rollout.batch_size", "rollout.max_new_tokens",
    "rollout.micro_batch_size", "rollout.n_samples_per_prompt", "rollout.temperature", "train.batch_size",
    "train.max_epochs", "train.micro_batch_size", "train.num_episodes", "train.seed",
}


def _table_keys(target: Target) -> set[str]:
    keys: set[str] = set()
    for key in target.keys.values():
        keys |= set(key) if isinstance(key, tuple) else {key}
    return keys


def test_every_verl_and_openrlhf_key_is_one_their_sources_define() -> None:
    assert _table_keys(verl.TARGET) <= VERL_KEYS
    assert _table_keys(openrlhf.TARGET) | {"actor.adam.betas", "critic.adam.betas"} <= OPENRLHF_FLAGS


GROUP_RUN: dict[str, Any] = dict(advantage_estimator="grpo", beta=0.02, kl_loss_estimator="k3",
                                 per_device_train_batch_size=4, gradient_accumulation_steps=4, num_mini_batches=2,
                                 num_ppo_epochs=2, cliprange_high=0.28, response_length=20, learning_rate=2e-6,
                                 total_episodes=64)
GAE_RUN: dict[str, Any] = dict(learning_rate=2e-6, value_learning_rate=9e-6, kl_coef=0.07, kl_target=6.0,
                               kl_horizon=5000, response_length=20, lam=0.9, cliprange_value=0.3, num_train_epochs=2.0)


def test_verl_overrides_of_a_grpo_and_a_gae_run() -> None:
    grpo = overrides_of(verl.verl_overrides(PPOConfig(**GROUP_RUN).to_dict()))
    assert set(grpo) <= VERL_KEYS
    assert grpo["algorithm.adv_estimator"] == "grpo" and grpo["actor_rollout_ref.rollout.n"] == "4"
    # verl counts prompts: 16 completions a rollout are 4 prompts; a mini-batch of 8 completions is 2 prompts.
    assert grpo["data.train_batch_size"] == "4" and grpo["actor_rollout_ref.actor.ppo_mini_batch_size"] == "2"
    assert grpo["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    assert grpo["trainer.total_training_steps"] == "4" and grpo["actor_rollout_ref.actor.ppo_epochs"] == "2"
    assert grpo["actor_rollout_ref.actor.use_kl_loss"] == "true" and grpo["algorithm.use_kl_in_reward"] == "false"
    assert grpo["actor_rollout_ref.actor.kl_loss_coef"] == "0.02"
    assert grpo["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert grpo["actor_rollout_ref.actor.clip_ratio_low"] == "0.2"
    assert grpo["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    assert grpo["algorithm.norm_adv_by_std_in_grpo"] == "true"
    assert not any(key.startswith("critic.") for key in grpo)  # no value network

    gae = overrides_of(verl.verl_overrides(PPOConfig(**GAE_RUN).to_dict()))
    assert gae["algorithm.adv_estimator"] == "gae" and gae["critic.optim.lr"] == "9e-06"
    assert gae["algorithm.use_kl_in_reward"] == "true" and gae["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert gae["algorithm.kl_ctrl.kl_coef"] == "0.07" and gae["algorithm.kl_penalty"] == "kl"
    # ppo-tune's target is the KL summed over a response; verl's the per-token mean.
    assert gae["algorithm.kl_ctrl.type"] == "adaptive" and float(gae["algorithm.kl_ctrl.target_kl"]) == 6.0 / 20
    assert gae["algorithm.kl_ctrl.horizon"] == "5000" and gae["algorithm.lam"] == "0.9"
    assert gae["critic.cliprange_value"] == "0.3" and gae["trainer.total_epochs"] == "2"

    text = verl.verl_overrides(PPOConfig(whiten_advantages=False, advantage_estimator="reinforce_pp_baseline",
                                         loss_type="seq_mean_token_sum_norm", response_length=20).to_dict())
    assert overrides_of(text)["algorithm.adv_estimator"] == "reinforce_plus_plus_baseline"
    assert overrides_of(text)["actor_rollout_ref.actor.loss_scale_factor"] == "20"  # Dr. GRPO's constant
    gae_text = verl.verl_overrides(PPOConfig(whiten_advantages=False, vf_coef=0.5).to_dict())
    assert any(c.startswith("# whiten_advantages=False: verl always whitens") for c in comments_of(gae_text))


def test_openrlhf_flags_of_a_grpo_and_a_gae_run() -> None:
    grpo = flags_of(openrlhf.openrlhf_arguments(PPOConfig(**GROUP_RUN, scale_rewards="none").to_dict()))
    assert set(grpo) <= OPENRLHF_FLAGS
    assert grpo["algo.advantage.estimator"] == "dr_grpo" and grpo["rollout.n_samples_per_prompt"] == "4"
    # OpenRLHF counts prompts per rollout and completions per optimizer step.
    assert grpo["rollout.batch_size"] == "4" and grpo["train.batch_size"] == "8"
    assert grpo["train.micro_batch_size"] == "4" and grpo["train.max_epochs"] == "2"
    assert grpo["algo.kl.use_loss"] is True and grpo["algo.kl.init_coef"] == "0.02"
    assert grpo["algo.kl.estimator"] == "k3" and grpo["actor.eps_clip_low_high"] == ["0.2", "0.28"]
    assert grpo["data.max_samples"] == "16"  # 64 completions, 4 per prompt
    assert not any(key.startswith("critic.") for key in grpo)
    assert flags_of(openrlhf.openrlhf_arguments(PPOConfig(**GROUP_RUN).to_dict()))["algo.advantage.estimator"] \
        == "group_norm"

    gae = flags_of(openrlhf.openrlhf_arguments(PPOConfig(**GAE_RUN).to_dict()))
    assert gae["algo.advantage.estimator"] == "gae" and gae["critic.adam.lr"] == "9e-06"
    assert "algo.kl.use_loss" not in gae and gae["algo.kl.init_coef"] == "0.07" and gae["algo.kl.estimator"] == "k1"
    assert float(gae["algo.kl.target"]) == 6.0 / 20 and gae["algo.kl.horizon"] == "5000"
    assert gae["algo.advantage.lambd"] == "0.9" and gae["critic.value_clip"] == "0.3"
    assert gae["train.num_episodes"] == "2" and gae["actor.adam.betas"] == ["0.9", "0.999"]
    assert flags_of(openrlhf.openrlhf_arguments(PPOConfig(advantage_estimator="reinforce_pp").to_dict()))[
        "algo.advantage.estimator"] == "reinforce"


# --- nothing dropped silently ---

# A non-default value for every field that changes what is trained (NOT_TRAINING lists the rest), with what it needs
# beside it; each export of a config with it must differ from the export without it, by a setting or a comment.
NON_DEFAULT: dict[str, tuple[Any, dict[str, Any]]] = {
    "model_revision": ("v1", {}), "dtype": ("bfloat16", {}), "attn_implementation": ("eager", {}),
    "trust_remote_code": (True, {}), "use_peft": (True, {}), "lora_r": (8, {}), "lora_alpha": (16, {}),
    "lora_dropout": (0.1, {}), "lora_target_modules": (["q_proj"], {}), "lora_target_parameters": (["w"], {}),
    "lora_modules_to_save": (["lm_head"], {}), "lora_task_type": ("SEQ_CLS", {}), "use_rslora": (True, {}),
    "use_dora": (True, {}), "dataset_name": ("org/prompts", {}), "dataset_config": ("c", {}),
    "dataset_train_split": ("tr", {}), "task": ("shortest_path_tiny", {}), "task_seed": (3, {}),
    "sft_model_path": ("org/sft", {}),
    "reward_model_path": ("org/rm", {}), "reward_funcs": (["reward_functions:count_letter_a"], {}),
    "reward_weights": ([0.5], {}), "value_model_path": ("org/value", {}), "max_prompt_length": (32, {}),
    "learning_rate": (1e-5, {}), "value_learning_rate": (1e-5, {}), "lr_scheduler_type": ("cosine", {}),
    "learning_rate_schedule": ([[3, 2e-6]], {}), "kl_coef_schedule": ([[3, 0.2]], {}),
    "warmup_ratio": (0.1, {}), "warmup_steps": (3, {}), "weight_decay": (0.01, {}), "adam_epsilon": (1e-6, {}),
    "max_grad_norm": (0.5, {}), "per_device_train_batch_size": (4, {}), "gradient_accumulation_steps": (2, {}),
    "num_mini_batches": (2, {"gradient_accumulation_steps": 2}), "num_ppo_epochs": (2, {}),
    "total_episodes": (64, {}), "num_train_epochs": (6.0, {}), "cliprange": (0.3, {}), "cliprange_value": (0.3, {}),
    "vf_coef": (0.5, {}), "entropy_coef": (0.01, {}), "gamma": (0.99, {}), "lam": (0.9, {}),
    "whiten_rewards": (True, {}), "whiten_advantages": (False, {}), "cliprange_low": (0.1, {}),
    "cliprange_high": (0.28, {}), "loss_type": ("seq_mean_token_mean", {}), "advantage_estimator": (None, {}),
    "importance_sampling_level": ("sequence", {}), "dual_clip": (3.0, {}), "scale_rewards_epsilon": (1e-6, {}),
    "num_generations": (2, {}), "scale_rewards": ("batch", {}), "kl_coef": (0.1, {}), "kl_estimator": ("k2", {}),
    "kl_target": (6.0, {}), "kl_horizon": (5000, {}), "kl_in_reward": (None, {}), "beta": (0.1, {}),
    "kl_loss_estimator": ("k2", {}), "response_length": (16, {}), "temperature": (0.9, {}), "stop_token": (None, {}),
    "stop_token_id": (5, {"stop_token": None}), "missing_eos_penalty": (1.0, {}), "gradient_checkpointing": (True, {}),
    "value_use_peft": (False, {}), "seed": (7, {}), "bf16": (False, {}), "use_cpu": (True, {}),
}
BASES: dict[str, dict[str, Any]] = {"gae": {}, "grpo": {"advantage_estimator": "grpo"},
                                    "gae with LoRA": {"use_peft": True}}


def _non_default(name: str, base: dict[str, Any]) -> Any:
    value, _ = NON_DEFAULT[name]
    resolved = PPOConfig(**base)
    if name == "advantage_estimator":
        return "rloo" if resolved.advantage_estimator == "gae" else "gae"
    if name == "kl_in_reward":
        return not resolved.kl_penalty_in_reward
    return value


def test_the_non_default_table_covers_every_field_that_is_trained() -> None:
    assert set(NON_DEFAULT) == set(settable_fields()) - set(NOT_TRAINING)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_table_places_every_field_once(name: str) -> None:
    target = TARGETS[name]
    assert set(settable_fields()) <= target.covers()
    tables = [set(target.keys), set(target.why_not), set(target.carried)]
    assert all(not (a & b) for i, a in enumerate(tables) for b in tables[i + 1:])
    assert set(target.values) <= set(target.keys)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_trained_field_set_becomes_a_setting_or_a_comment(name: str) -> None:
    target = TARGETS[name]
    for base_name, base in BASES.items():
        for field, (_, needs) in NON_DEFAULT.items():
            before = {**base, **needs}
            after = {**before, field: _non_default(field, before)}
            if getattr(PPOConfig(**before), field) == after[field]:
                continue  # the base sets it already (use_peft on the LoRA base): the other bases change it
            old = set(export(target, PPOConfig(**before).to_dict()).render(target.layout).splitlines())
            new = set(export(target, PPOConfig(**after).to_dict()).render(target.layout).splitlines())
            changed = new ^ old  # a setting may also go: a null that the target's own default means
            said = [line for line in changed if line.startswith(f"# {field}=")]
            set_ = [line for line in changed if not line.startswith("#")]
            assert said or set_ or any(field in line for line in changed), \
                f"{name}: {field}={after[field]} on the {base_name} config changed nothing in the export"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_schedule_is_said_with_its_pairs_or_its_callback_and_its_absence_changes_nothing(name: str) -> None:
    target = TARGETS[name]
    base: dict[str, Any] = {"advantage_estimator": "grpo"} if name in ("trl-grpo", "trl-rloo") else {}
    plain = export(target, PPOConfig(**base).to_dict()).render(target.layout)
    scheduled = export(target, PPOConfig(**base, learning_rate_schedule=[[13, 2e-5], [19, 1.6e-5]],
                                         kl_coef_schedule=[[5, 0.0]]).to_dict()).render(target.layout)
    added = set(scheduled.splitlines()) - set(plain.splitlines())
    assert set(plain.splitlines()) <= set(scheduled.splitlines())
    if name in ("trl-grpo", "trl-rloo"):
        # TRL's trainers run the schedule as a callback: the line to add it (which test_schedule_callback runs).
        assert added == {"# the schedules run as a callback: from tuner.trl_trial.schedule_callback import "
                         "ScheduleCallback; trainer.add_callback(ScheduleCallback(trainer, learning_rate_schedule="
                         "[[13, 2e-05], [19, 1.6e-05]], kl_coef_schedule=[[5, 0.0]]))  # before trainer.train()"}
        return
    assert {line.split(":")[0] for line in added} == {"# learning_rate_schedule=[[13, 2e-05], [19, 1.6e-05]]",
                                                      "# kl_coef_schedule=[[5, 0.0]]"}
    assert all("takes no piecewise schedule as a config value" in line for line in added)


def test_fields_a_stored_config_has_and_this_version_lacks_are_said() -> None:
    config = {**PPOConfig().to_dict(), "old_knob": 3}
    for fmt, function in EXPORT_FORMATS.items():
        assert "# old_knob=3: not a field of this ppo-tune version" in function(config), fmt


# --- the CLI on a stored study ---

@pytest.fixture(scope="module")
def stored_study(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A study as `ppo-tune run` leaves it, cheaply: completed trials carrying their resolved configs."""
    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'exports.db'}"
    study = optuna.create_study(storage=url, study_name="exports", direction="maximize")
    for number, (value, lr) in enumerate([(0.4, 1e-6), (0.9, 4e-6), (0.6, 2e-6)]):
        config = PPOConfig(advantage_estimator="grpo", learning_rate=lr, seed=number).to_dict()
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=value, params={"learning_rate": lr},
                                     distributions={"learning_rate": FloatDistribution(1e-7, 1e-4, log=True)},
                                     user_attrs={CONFIG_ATTR: config}))
    return url


@pytest.mark.parametrize("fmt", ["yaml", "json", *EXPORT_FORMATS])
def test_best_exports_the_best_trial_in_every_format(
    stored_study: str, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["best", "exports", "--storage", stored_study, "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        assert json.loads(out)["config"]["learning_rate"] == 4e-6
        return
    assert out.startswith("# best trial 1: 0.9000, one seed")
    body = out.split("\n", 1)[1]
    if fmt in ("trl-ppo", "trl-args"):
        assert body == trl_ppo.trl_arguments(PPOConfig(advantage_estimator="grpo", learning_rate=4e-6,
                                                       seed=1).to_dict())
    if fmt == "yaml":
        assert yaml.safe_load(body)["learning_rate"] == 4e-6
    else:
        assert "4e-06" in body


def test_trl_args_is_trl_ppo(stored_study: str, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for fmt in ("trl-ppo", "trl-args"):
        assert main(["best", "exports", "--storage", stored_study, "--format", fmt]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


def test_an_unknown_format_is_refused(stored_study: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["best", "exports", "--storage", stored_study, "--format", "deepspeed-chat"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_each_former_format_name_follows_its_target_and_names_no_study_target() -> None:
    from tuner.exports import FORMAT_ALIASES, FORMATS, TARGET_NAMES, TARGETS

    names = list(FORMATS)
    for alias, target in FORMAT_ALIASES.items():
        assert FORMATS[alias] is TARGETS[target] and names.index(alias) == names.index(target) + 1
        assert alias not in TARGET_NAMES  # a study's target: names each trainer once, by its current name
    assert set(FORMATS) == set(TARGETS) | set(FORMAT_ALIASES)
