#!/usr/bin/env bash
# From a fresh machine to a tuned PPO: set up ppo-tune (scripts/setup.sh says where, and which torch), run the
# quickstart study on the built-in task, then say what to look at next.
#
#   bash quickstart.sh                  # about 5 minutes on 2 CPU cores
#   bash quickstart.sh --n-trials 4     # arguments go on to `ppo-tune run`
#
# Ctrl-C stops the study cleanly (the running trial is queued again); running this again resumes it.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/setup.sh
setup_for_running

echo "== the main job: ppo-tune run studies/quickstart.yaml --workers 2 $*"
status=0
"$PY" -m ppo_tune run studies/quickstart.yaml --workers 2 "$@" || status=$?

if [ -n "${VIRTUAL_ENV:-}" ] && [ -z "${PPO_TUNE_PYTHON:-}" ]; then
  activate=". $VIRTUAL_ENV/bin/activate"
else
  activate="# ppo-tune is $PY -m ppo_tune"
fi
cat <<EOF

== next, from $PWD:
  $activate
  ppo-tune show quickstart                  # the trial table, prune reasons, findings at the edges of the ranges
  ppo-tune validate quickstart --workers 2  # the 3 best configurations again, on 5 seeds the study never used
  ppo-tune dashboard                        # then open http://127.0.0.1:8501: KL, rewards, samples, trial health
EOF
exit "$status"
