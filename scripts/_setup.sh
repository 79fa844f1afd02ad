#!/usr/bin/env bash
# Shared install step: system packages (when missing and installable), virtualenv, Python packages.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v espeak-ng >/dev/null 2>&1 || need_apt+=(espeak-ng)
command -v flite >/dev/null 2>&1 || need_apt+=(flite)  # caller voices of bench_offline_speech
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if [ "${VOICEAGENT_BROWSER_TESTS:-0}" = "1" ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    echo "==> installing system packages: ${need_apt[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "==> warning: cannot install ${need_apt[*]} (no apt-get or no root); install them yourself" >&2
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
# Reinstall only when the pinned requirements changed (a stamp per set: runtime, runtime+dev).
files="requirements.txt${INSTALL_DEV:+ requirements-dev.txt}"
nodeps=requirements-nodeps.txt  # data-only packages, installed without their dependencies (no torch)
stamp=".venv/.requirements${INSTALL_DEV:+-dev}.sha"
want=$(cat $files $nodeps | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing Python packages"
  for f in $files; do args="${args:-} -r $f"; done
  log=$(mktemp)
  if ! .venv/bin/pip install -q --disable-pip-version-check $args > "$log" 2>&1 \
    || ! .venv/bin/pip install -q --disable-pip-version-check --no-deps -r "$nodeps" >> "$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2 || true
    echo "==> pip install failed" >&2
    exit 1
  fi
  rm -f "$log"
  echo "$want" > "$stamp"
  # the runtime set is part of the dev set: scripts/run (started by tests, maybe several at once)
  # then only checks instead of running pip into the same .venv concurrently
  if [ -n "${INSTALL_DEV:-}" ]; then
    cat requirements.txt $nodeps | sha256sum | cut -d' ' -f1 > .venv/.requirements.sha
  fi
fi
exit 0
