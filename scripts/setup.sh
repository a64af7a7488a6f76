#!/usr/bin/env bash
# The set-up that quickstart.sh and .ci/run share, in one place: which Python, which torch, which pip extras, and for
# the tests the services they use.
#
#   bash scripts/setup.sh          # ppo-tune in a Python environment: enough to train, tune and open the dashboard
#   bash scripts/setup.sh --test   # and what the tests need besides: PostgreSQL with a test database and Chromium
#                                  # (Debian packages: root or sudo), the test extra, TRL's current release, verl
#                                  # and OpenRLHF in .cache
#
# The environment is $PPO_TUNE_PYTHON's if that is set (a conda env's python, say), else the active virtual
# environment, else the repository's .venv, made with python3 if missing. A torch already installed there is kept,
# whatever its build (a CUDA one included), and pinned so that installing the project cannot replace it; only where
# there is none is $CPU_TORCH installed. PyPI's Linux wheel of it is the CUDA build: PyTorch's CPU build comes from
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu, or from a wheel pip finds locally (PIP_FIND_LINKS).
#
# quickstart.sh and .ci/run source this file and call setup_for_running or setup_for_tests, which leave the
# environment active in their shell (and PPO_TUNE_POSTGRES_URL set, for the tests).

# The project's extras for each purpose (pyproject.toml's [project.optional-dependencies]), comma-separated: the one
# place to change what either command installs.
RUN_EXTRAS=""
# The tests run TRL trials (the trl extra: TRL's current release), every benchmark's quick mode, --launcher ray on a
# real Ray cluster they start (the ray extra), and the text task and GGUF loading on tiny models they write (the text
# extra).
TEST_EXTRAS="test,trl,ray,text"
# Installed only into an environment without any torch.
CPU_TORCH="torch==2.13.0"
# The tests' PostgreSQL role and database, made by setup_for_tests.
TEST_POSTGRES_URL="postgresql://ppo_tune:ppo_tune@localhost/ppo_tune_test"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

as_postgres() {  # from /, which the postgres user can read, whatever the caller's directory
  if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && sudo -u postgres "$@"); fi
}

apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Choose the environment (see the top of this file) and activate it; PY is its python.
use_environment() {
  if [ -n "${PPO_TUNE_PYTHON:-}" ]; then
    PY=$PPO_TUNE_PYTHON
  elif [ -n "${VIRTUAL_ENV:-}" ]; then
    PY=$VIRTUAL_ENV/bin/python
  else
    if [ ! -x .venv/bin/python ]; then
      python3 -c "import ensurepip, venv" 2>/dev/null || apt_install python3 python3-venv
      python3 -m venv .venv
    fi
    # shellcheck disable=SC1091
    . .venv/bin/activate
    PY=$PWD/.venv/bin/python
  fi
}

# The installed torch's version; "" if none is importable, "unknown" if one is importable without package metadata.
installed_torch() {
  "$PY" - <<'EOF'
import importlib.metadata
import importlib.util

if importlib.util.find_spec("torch") is not None:
    try:
        print(importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        print("unknown")
EOF
}

# The installer: uv where it can be had (installed into the environment with pip), pip otherwise (no network to PyPI
# for it, say). uv resolves and installs the test set-up's 120 packages in seconds where pip takes over a minute.
choose_installer() {
  if [ -n "${UV:-}" ]; then return; fi
  UV=pip
  if "$PY" -m pip install -q uv >/dev/null 2>&1 && "$PY" -m uv --version >/dev/null 2>&1; then UV=uv; fi
}

# pip install "$@" into the chosen environment, with the chosen installer. uv reads neither pip's configuration nor
# its environment, so where pip's environment names where torch's CPU build comes from (PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, or PIP_FIND_LINKS for a local wheel) it is passed on.
pip_install() {
  local sources=() url
  choose_installer
  if [ "$UV" = uv ]; then
    if [ -n "${PIP_INDEX_URL:-}" ]; then sources+=(--index-url "$PIP_INDEX_URL"); fi
    # pip picks each package's best version across all its indexes; uv by default takes the first index that has
    # the package at all, which for PyTorch's index (it hosts numpy, jinja2, ...) would pin those to its old copies.
    for url in ${PIP_EXTRA_INDEX_URL:-}; do sources+=(--extra-index-url "$url"); done
    if [ -n "${PIP_EXTRA_INDEX_URL:-}" ]; then sources+=(--index-strategy unsafe-best-match); fi
    for url in ${PIP_FIND_LINKS:-}; do sources+=(--find-links "$url"); done
    # --compile-bytecode: pip writes every module's bytecode as it installs, uv only when asked. Where
    # PYTHONDONTWRITEBYTECODE is set (as on this project's machines), each process would otherwise compile what it
    # imports, every time: importing transformers' models then took 10.9 s of CPU instead of 4.7. Where it is not
    # set, the first process to import a module writes its bytecode, and only the modules used are ever compiled.
    local compile=()
    if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then compile=(--compile-bytecode); fi
    "$PY" -m uv pip install --quiet "${compile[@]}" --python "$PY" "${sources[@]}" "$@"
  else
    "$PY" -m pip install -q "$@"
  fi
}

# ppo-tune, editable, with the extras in $1, into the chosen environment; a torch there is kept.
install_project() {
  local extras=$1 torch pin=""
  use_environment
  choose_installer
  torch=$(installed_torch)
  if [ -z "$torch" ]; then
    echo "== torch: none in $("$PY" -c 'import sys; print(sys.prefix)'), installing $CPU_TORCH"
    pip_install "$CPU_TORCH"
    torch=$(installed_torch)
  else
    echo "== torch: keeping the torch $torch in $("$PY" -c 'import sys; print(sys.prefix)')"
  fi
  if [ "$torch" != unknown ]; then pin="torch==$torch"; fi
  echo "== ppo-tune: pip install -e '.${extras:+[$extras]}' (with $UV)"
  pip_install -e ".${extras:+[$extras]}" ${pin:+"$pin"}
  # The project's own bytecode, written once (an editable install writes none): where PYTHONDONTWRITEBYTECODE is set,
  # as on this project's machines, every process would compile each of the project's modules it imports, again.
  if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
    echo "== ppo-tune: its bytecode"
    find . -path './.*' -prune -o -name '*.py' -print0 | xargs -0 "$PY" -m compileall -q
  fi
}

# PostgreSQL running, with the tests' role and database; PPO_TUNE_POSTGRES_URL names it.
start_test_postgres() {
  local version
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! pg_lsclusters -h | grep -q online; then
    if ! pg_lsclusters -h | grep -q .; then as_root pg_createcluster "$version" main >/dev/null; fi
    as_root pg_ctlcluster "$version" main start
  fi
  as_postgres psql -qtc "SELECT 1 FROM pg_roles WHERE rolname = 'ppo_tune'" | grep -q 1 \
    || as_postgres psql -qc "CREATE ROLE ppo_tune LOGIN PASSWORD 'ppo_tune' CREATEDB"
  as_postgres psql -qtc "SELECT 1 FROM pg_database WHERE datname = 'ppo_tune_test'" | grep -q 1 \
    || as_postgres psql -qc "CREATE DATABASE ppo_tune_test OWNER ppo_tune"
  export PPO_TUNE_POSTGRES_URL=$TEST_POSTGRES_URL
}

# What `ppo-tune` needs to train, tune and show the dashboard.
setup_for_running() {
  install_project "$RUN_EXTRAS"
}

# Everything the tests need: the system packages, PostgreSQL, the test extra, and TRL's current release, verl and
# OpenRLHF (their code only) in .cache.
setup_for_tests() {
  # The system packages install while pip does (each waits mostly on downloads); the environment is made first, since
  # making it may itself need apt (python3-venv).
  use_environment
  echo "== system packages, in the background: PostgreSQL (tuner and dashboard tests), Chromium (browser tests)"
  local apt_log apt_pid
  apt_log=$(mktemp)
  apt_install postgresql chromium >"$apt_log" 2>&1 &
  apt_pid=$!
  install_project "$TEST_EXTRAS"
  # The trl-grpo/trl-rloo export tests parse with the release the exports were written against, kept beside the
  # environment (no dependencies: the project's own serve it), whatever TRL the environment has.
  local trl_latest
  trl_latest=$("$PY" -c "from tuner.exports import TRL_VERSION; print(TRL_VERSION)")
  echo "== TRL $trl_latest in .cache/trl-$trl_latest, for the export tests"
  pip_install --upgrade --no-deps --target ".cache/trl-$trl_latest" "trl==$trl_latest"
  # benchmarks.trl_comparison (and the trl-ppo export's test) run TRL 1.12, the last release with a PPOTrainer, from
  # beside the environment, whose own TRL is the current one.
  local trl_ppo
  trl_ppo=$("$PY" -c "from benchmarks.trl_comparison.peer_trl import TRL_PPO_VERSION; print(TRL_PPO_VERSION)")
  echo "== TRL $trl_ppo in .cache/trl-$trl_ppo, for the PPOTrainer comparison"
  pip_install --upgrade --no-deps --target ".cache/trl-$trl_ppo" "trl==$trl_ppo"
  # The peer-equivalence tests (tests/test_ppo_core/test_peer_equivalence.py) run verl's and OpenRLHF's own loss and advantage
  # code, at the releases the verl and openrlhf exports name ("verl 0.9.1"), also without their dependencies.
  install_peer verl "tuner.exports.verl"
  install_peer openrlhf "tuner.exports.openrlhf"
  if ! wait "$apt_pid"; then
    cat "$apt_log" >&2
    echo "apt-get install postgresql chromium failed (its output is above)" >&2
    return 1
  fi
  rm -f "$apt_log"
  echo "== PostgreSQL: role ppo_tune, database ppo_tune_test"
  start_test_postgres
}

# Peer package $1 into .cache/$1-VERSION, VERSION the last word of the name of the export module $2's TARGET.
install_peer() {
  local package=$1 version
  version=$("$PY" -c "from $2 import TARGET; print(TARGET.name.split()[-1])")
  echo "== $package $version in .cache/$package-$version, for the peer-equivalence tests"
  pip_install --upgrade --no-deps --target ".cache/$package-$version" "$package==$version"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  case "${1:-}" in
    "") setup_for_running ;;
    --test) setup_for_tests ;;
    *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
  esac
  echo "== done: ppo-tune is installed in $("$PY" -c 'import sys; print(sys.prefix)')"
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -z "${PPO_TUNE_PYTHON:-}" ]; then
    echo "   activate it in your shell: . $VIRTUAL_ENV/bin/activate"
  fi
  if [ "${1:-}" = --test ]; then
    echo "   the PostgreSQL tests need: export PPO_TUNE_POSTGRES_URL=$TEST_POSTGRES_URL"
  fi
fi
