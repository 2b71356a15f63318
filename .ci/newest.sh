#!/usr/bin/env bash
# The library next to the newest pydantic-ai-slim on the registry, without pydantic-ai-harness (which would pin
# pydantic-ai-slim back to its own release). "Newest" is resolved when this runs.
#   newest.sh test   the test suite, in .venv-newest (tests that need harness or the bench skip, saying why)
#   newest.sh wheel  the built wheel in a fresh .venv-wheel: a Fork agent compacts, pydantic-ai-slim not downgraded
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PIP_VERSION=${PIP_VERSION:-26.3}
pip_quiet=(--quiet --disable-pip-version-check)

newest_slim() {
    # The newest release in the supported range (2.x); pre-releases are not listed.
    "$PYTHON" -m pip index versions pydantic-ai-slim --disable-pip-version-check 2>/dev/null \
        | sed -n 's/^Available versions: //p' | tr ',' '\n' | tr -d ' ' | grep '^2\.' | head -n 1
}

fresh_venv() {
    rm -rf "$1"
    "$PYTHON" -m venv "$1"
    "$1/bin/python" -m pip install "${pip_quiet[@]}" "pip==$PIP_VERSION"
}

newest=$(newest_slim)
if [ -z "$newest" ]; then
    echo "newest.sh: could not resolve the newest pydantic-ai-slim" >&2
    exit 1
fi
echo "newest pydantic-ai-slim on the registry: $newest"

case "${1:-}" in
test)
    venv=.venv-newest
    fresh_venv "$venv"
    # Test tools at their locked versions, so a failure here is about pydantic-ai, not a new pytest.
    grep -iE '^(pytest|pytest-asyncio|hypothesis|syrupy|psycopg|psycopg-binary|psycopg-pool)==' requirements.lock \
        > "$venv/tools.txt"
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" -c "$venv/tools.txt" -e '.[postgres,testing]' \
        --group dev "pydantic-ai-slim[openai,anthropic,google]==$newest"
    "$venv/bin/python" .ci/installed.py "$newest"
    shift
    "$venv/bin/python" -m pytest -q -p no:randomly "$@"
    ;;
wheel)
    rm -rf dist
    "$PYTHON" -m pip wheel "${pip_quiet[@]}" --no-deps -w dist .
    venv=.venv-wheel
    fresh_venv "$venv"
    # A user's environment that already has the newest pydantic-ai, then the library installed into it.
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" "pydantic-ai-slim==$newest"
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" dist/pydantic_ai_compaction-*.whl
    "$venv/bin/python" .ci/installed.py "$newest"
    "$venv/bin/python" .ci/wheel_smoke.py
    ;;
*)
    echo "usage: newest.sh test [pytest args] | wheel" >&2
    exit 2
    ;;
esac
