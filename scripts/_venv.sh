# Sourced by scripts/demo and scripts/test: a project venv in .venv, reused when present.
# T3ORCH_VENV overrides the location (CI points it at a cache).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${T3ORCH_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "t3orch needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# Editable install: quiet, and cheap when nothing changed (pip's cache keeps wheels).
venv_install() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}
