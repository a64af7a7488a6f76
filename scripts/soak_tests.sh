#!/usr/bin/env bash
# Run chosen tests N times and count each test's failures: how a flaky test is found, and how a fix is shown to hold.
#
#   bash scripts/soak_tests.sh N [PYTEST ARGS...]
#   bash scripts/soak_tests.sh 20 tests/test_ppo_core/test_data_parallel.py -k abort
#   SOAK_BURNERS=2 bash scripts/soak_tests.sh 20 tests/test_tuner/test_ray_launcher.py   # with 2 busy CPU loops beside them
#
# Each round is a fresh `python -m pytest` with the arguments given (add -n 2 to run a round on pytest-xdist
# workers). The JUnit report of every round is kept in $SOAK_DIR (default: a new directory under /tmp), and the
# summary at the end lists every test that failed or errored at least once, with its count out of N, then the
# rounds' exit statuses. The exit status is 1 if any round failed, 0 if all passed, 2 for bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bash scripts/soak_tests.sh N [PYTEST ARGS...]  (N: a positive number of rounds, got '${1:-}')" >&2
  exit 2
fi
rounds=$1
shift
burners=${SOAK_BURNERS:-0}
if ! [[ "$burners" =~ ^[0-9]+$ ]]; then
  echo "SOAK_BURNERS: expected a number of busy CPU loops, got '$burners'" >&2
  exit 2
fi
reports=${SOAK_DIR:-$(mktemp -d /tmp/soak.XXXXXX)}
mkdir -p "$reports"
python=${PYTHON:-python}
if [ -x .venv/bin/python ] && [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${PYTHON:-}" ]; then python=.venv/bin/python; fi

burner_pids=()
stop_burners() {
  for pid in "${burner_pids[@]}"; do kill "$pid" 2>/dev/null; done
}
trap stop_burners EXIT
for _ in $(seq 1 "$burners"); do
  "$python" -c "while True: pass" &
  burner_pids+=($!)
done

statuses=()
started=$SECONDS
stopping=0
# SIGTERM to this script (not its group): the round under way finishes, and the summary covers the rounds run.
trap 'stopping=1' TERM
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds: pytest $*"
  "$python" -m pytest -q -p no:cacheprovider --junitxml="$reports/round-$round.xml" "$@" &
  pid=$!
  while true; do
    status=0
    wait "$pid" || status=$?
    if ! kill -0 "$pid" 2>/dev/null; then break; fi  # still running: a TERM interrupted the wait, not the round
  done
  statuses+=("$status")
  if [ "$stopping" = 1 ]; then echo "== stopped after round $round (SIGTERM)"; break; fi
done
stop_burners

"$python" - "$reports" "$rounds" "$((SECONDS - started))" "${statuses[@]}" <<'EOF'
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

reports, rounds, seconds, statuses = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
runs: Counter[str] = Counter()
failures: Counter[str] = Counter()
for report in sorted(reports.glob("round-*.xml")):
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        runs[name] += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failures[name] += 1
print(f"\n== soak: {len(statuses)} rounds of {len(runs)} tests in {seconds} s ({rounds} asked); reports in {reports}")
if failures:
    print("failures (test: failed rounds / rounds it ran in):")
    for name, count in failures.most_common():
        print(f"  {name}: {count}/{runs[name]}")
else:
    print("failures: none")
print(f"round exit statuses: {' '.join(statuses)}")
EOF
for status in "${statuses[@]}"; do
  if [ "$status" != 0 ]; then exit 1; fi
done
exit 0
