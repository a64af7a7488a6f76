"""Plain Python reward functions, in TRL GRPOTrainer's signature, that tests name as ``module:function``."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

GATE_ENV = "PPO_TUNE_TEST_GATE"  # Ray forwards every PPO_TUNE_ variable to the trials' processes
_calls = 0
_ticket = 0
# What records_progress and judges_progress were handed, a call a row: (the trainer_state's type, its global_step,
# its max_steps, the number of completions).
PROGRESS: dict[str, list[tuple[type, int, int, int]]] = {"reward": [], "judge": []}


def count_letter_a(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Rewards responses for saying 'a': an easy target that PPO should learn quickly."""
    return [float(_text(completion).split().count("a")) for completion in completions]


def peaks_at_update_2(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """A held-out judge under which every policy peaks at update 2 and falls after, as gold falls once a policy games
    its proxy: minus the distance from update 2 of the updates made before the evaluation (``trainer_state``'s
    ``global_step``: u at the evaluation after update u), whatever the texts, so that a test knows each segment's
    value in advance."""
    return [-abs(kwargs["trainer_state"].global_step - 2.0)] * len(completions)


def records_progress(prompts: list[Any], completions: list[Any], trainer_state: Any,
                     **kwargs: Any) -> list[float | None]:
    """Scores 0 and records the ``trainer_state`` it was handed, as a curriculum would read it."""
    PROGRESS["reward"].append((type(trainer_state), trainer_state.global_step, trainer_state.max_steps,
                               len(completions)))
    return [0.0] * len(completions)


def judges_progress(prompts: list[Any], completions: list[Any], trainer_state: Any, **kwargs: Any) -> list[float]:
    """``records_progress`` as a held-out judge, recorded apart."""
    PROGRESS["judge"].append((type(trainer_state), trainer_state.global_step, trainer_state.max_steps,
                              len(completions)))
    return [0.0] * len(completions)


def held(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """``count_letter_a``, held mid-trial while a test's gate is shut (``helpers.studies.Gate``): from its second call
    on, while the directory that ``$PPO_TUNE_TEST_GATE`` names holds a file ``shut``, it writes ``held-<pid>`` there
    and waits. A trial process takes a ticket at its first call (0, 1, ... in the order the trials get there); those
    whose ticket is below the number in the gate's file ``pass`` run on unheld."""
    global _calls, _ticket
    _calls += 1
    gate = Path(os.environ[GATE_ENV])
    if _calls == 1:
        _ticket = _take_ticket(gate)
    passing = gate / "pass"
    if _ticket < (int(passing.read_text()) if passing.exists() else 0):
        return count_letter_a(prompts, completions, **kwargs)
    if _calls > 1 and (gate / "shut").exists():
        (gate / f"held-{os.getpid()}").touch()
        while (gate / "shut").exists():
            time.sleep(0.05)
    return count_letter_a(prompts, completions, **kwargs)


def _take_ticket(gate: Path) -> int:
    """The first number n whose file ``ticket-<n>`` this process made: creation with O_EXCL is atomic, so no two
    processes take the same one."""
    number = 0
    while True:
        try:
            os.close(os.open(gate / f"ticket-{number}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return number
        except FileExistsError:
            number += 1


def wrong_length(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [0.0]


def nan_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [float("nan")] * len(completions)


def _text(completion: Any) -> str:
    """A completion's text, in the standard format (a string) or the conversational one (a message list)."""
    return completion if isinstance(completion, str) else completion[0]["content"]


def raises(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    raise ValueError("this reward is broken")


def words(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[str]:
    return ["high"] * len(completions)


def none_for_odd_rows(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A reward that only applies to every other row, as TRL's reward functions may say with None."""
    return [1.0 if index % 2 == 0 else None for index in range(len(completions))]


# Faults that take a trial's process down, for the tuner's one-process-per-trial tests.


def exits(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Ends the process at once, as a user's reward calling os._exit would: no exception, no clean-up."""
    os._exit(1)


def out_of_memory(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    raise MemoryError("the reward needed more memory than there is")


def killed(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Dies by SIGKILL, as a process the kernel's out-of-memory killer picks does."""
    os.kill(os.getpid(), signal.SIGKILL)
    return [0.0] * len(completions)


def hangs(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Never returns (until the trial's process is killed)."""
    while True:
        time.sleep(1)

