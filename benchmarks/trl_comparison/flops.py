"""FLOP estimates per PPO update and the accelerator peak they are compared with.

Dense-transformer rule of thumb: 2 FLOPs per matmul parameter per token for a forward pass,
6 for forward + backward. Attention-score FLOPs (about 4 * layers * hidden * sequence per token)
are left out; with the short sequences benchmarked here they are a few percent at most.
"""

from __future__ import annotations

from typing import Any

from benchmarks.trl_comparison.workload import Workload

# Dense peak TFLOPS by device-name fragment: (fp32 on CUDA cores, tf32 tensor cores, bf16 tensor cores).
# Checked in order, so "H100 PCIe" must precede "H100".
GPU_PEAK_TFLOPS: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("H100 PCIe", (51.2, 378.0, 756.0)),
    ("H100", (66.9, 494.7, 989.4)),
    ("H200", (66.9, 494.7, 989.4)),
    ("A100", (19.5, 156.0, 312.0)),
    ("L40S", (91.6, 183.0, 362.0)),
    ("L4", (30.3, 60.0, 121.0)),
    ("A10", (31.2, 62.5, 125.0)),
)


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of a known GPU for 'fp32', 'tf32' or 'bf16'; None when the GPU is unknown."""
    column = {"fp32": 0, "tf32": 1, "bf16": 2}[precision]
    for fragment, peaks in GPU_PEAK_TFLOPS:
        if fragment in device_name:
            return peaks[column] * 1e12
    return None


def update_work(workload: Workload, parameters: dict[str, int]) -> dict[str, Any]:
    """Tokens and estimated FLOPs of one PPO update, split into the rollout and the update phase."""
    batch, sequence = workload.batch_size, workload.prompt_length + workload.response_length
    generated_tokens = batch * workload.response_length
    # Generation: a prefill of the prompt, then one token per step (the last token is never fed back).
    generation_tokens = batch * (sequence - 1)
    scored_tokens = batch * sequence  # reference, value and reward forwards over prompt + response
    trained_tokens = workload.num_ppo_epochs * batch * sequence  # policy and value, with grad
    policy, value, reward = parameters["policy_matmul"], parameters["value_matmul"], parameters["reward_matmul"]
    rollout_flops = 2 * policy * generation_tokens + 2 * (policy + value + reward) * scored_tokens
    update_flops = 6 * (policy + value) * trained_tokens
    return {
        "generated_tokens": generated_tokens,
        "trained_tokens": trained_tokens,
        "rollout_flops": rollout_flops,
        "update_flops": update_flops,
    }
