"""Running the loop: PPOTrainer (``trainer``) with its callbacks, trackers and progress line, evaluation on held-out
prompts, the process group of a launched run (``distributed``), the rollout's metrics and the run directory, the
config's schedules put in force at each update (``scheduled_values``), and the checkpoints a stopped run resumes from:
what they hold (``checkpoint``), how they are written and removed (``checkpoint_files``) and when a run may resume one
(``checkpoint_match``)."""
