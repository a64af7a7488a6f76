"""A worker's claim loop alone, for the race test: ask for queued trials of study ``race`` until none is left,
finishing each at once, and write the numbers it got. Usage: python claim_queued.py STORAGE_URL OUT_JSON"""

from __future__ import annotations

import json
import sys

import optuna
from optuna.trial import TrialState

from tuner.store.database import open_storage

if __name__ == "__main__":
    url, out = sys.argv[1], sys.argv[2]
    study = optuna.load_study(study_name="race", storage=open_storage(url))
    claimed = []
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial = study.ask()
        claimed.append(trial.number)
        study.tell(trial, 0.0)
    with open(out, "w") as file:
        json.dump(claimed, file)
