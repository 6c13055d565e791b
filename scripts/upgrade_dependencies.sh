#!/usr/bin/env bash
# Move constraints.txt to the newest versions pyproject.toml allows, deliberately.
#
# In a fresh venv of its own (a temp dir, removed at the end), it installs the project with
# every extra and no constraints, then Google Research Football, runs the test suite, and
# only if the suite passes rewrites constraints.txt with what was installed and prints the
# diff. Review it, then commit it. Arguments go to pytest (e.g. `-m "not ray"` to skip the
# cluster tests); the default is the README's whole suite.
#
#   bash scripts/upgrade_dependencies.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"

python3 -m venv "$WORK/venv"
. "$WORK/venv/bin/activate"
pip install -U pip setuptools wheel
pip install -U -e ".[all,test]"
CONSTRAINTS= bash scripts/install_football.sh
bash scripts/install_render.sh

python -m pytest -q "$@"

{
    cat <<'HEADER'
# Every package's version as tested: `pip install -e ".[all,test]" -c constraints.txt` (README)
# installs these and nothing newer, so a release of any dependency cannot change CI or a
# user's install unnoticed. Made on Linux x86_64 with Python 3.11 by
# scripts/upgrade_dependencies.sh, which installs the newest versions pyproject.toml allows
# into a fresh venv, runs the tests, and rewrites this file only if they pass.
# torch carries no local label (+cpu): pip takes the CPU build pyproject.toml pins.
HEADER
    pip freeze --all --exclude-editable | sed 's/^torch==\([^+]*\)+.*/torch==\1/'
} > "$WORK/constraints.txt"
diff -u constraints.txt "$WORK/constraints.txt" || true
cp "$WORK/constraints.txt" constraints.txt
echo "constraints.txt rewritten from a passing suite: review \`git diff constraints.txt\`, then commit it"
