#!/bin/sh
# ahp-terminals container entrypoint (deploy/Dockerfile installs it as /usr/local/bin/ahp-entrypoint).
#
#   ahp-entrypoint [serve] [SERVE-OPTIONS...]   run the sidecar (the default)
#   ahp-entrypoint healthcheck                  exit 0 if /healthz answers 200 (HEALTHCHECK)
#
# Environment:
#   AHP_TOKEN_FILE     a file holding the token (a mounted secret): preferred
#   AHP_TOKEN          the token itself (if no file)
#   AHP_HOST           address to bind (default 0.0.0.0: probes reach the container's IP)
#   AHP_PORT           TCP port (default 8765)
#   AHP_SHELL          shell for new terminals (default bash; zsh and fish are installed)
#   AHP_CWD            where new terminals start (default: the working directory, the
#                      image's /workspace: the shared workspace, not $HOME)
#   AHP_DRAIN_TIMEOUT  seconds running commands get after SIGTERM (default 10)
#   AHP_ALLOW_ROOT     set to 1 to run as root anyway (refused otherwise)
#
# Refuses, with one line on stderr and status 2: to run as root, to serve without a
# token (serve would make up a random one and print it to the logs), and an AHP_CWD
# that is no directory. The token is never put on a command line, where ps would show
# it: serve reads the variables.
# `exec` hands PID 1 to Python, so SIGTERM reaches serve and starts its drain; serve
# reaps the orphans PID 1 adopts and kills them when it exits (no init needed; see
# docs/deploy.md, "PID 1, orphans and signals").
set -eu

port="${AHP_PORT:-8765}"

fail() {
    echo "ahp-entrypoint: $*" >&2
    exit 2
}

if [ "${1:-}" = "healthcheck" ]; then
    exec python -c '
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=3) as r:
        sys.exit(0 if r.status == 200 else 1)
except OSError as exc:
    print(f"healthcheck: {exc}", file=sys.stderr)
    sys.exit(1)
' "$port"
fi
if [ "${1:-}" = "serve" ]; then
    shift
fi

if [ "$(id -u)" = "0" ] && [ "${AHP_ALLOW_ROOT:-}" != "1" ]; then
    fail "refusing to run as root: terminals would run as root too (run as a user, or set AHP_ALLOW_ROOT=1)"
fi
if [ -z "${AHP_TOKEN_FILE:-}" ] && [ -z "${AHP_TOKEN:-}" ]; then
    fail "no token: set AHP_TOKEN_FILE to a file holding it (a mounted secret), or AHP_TOKEN"
fi
cwd="${AHP_CWD:-$(pwd)}"
if [ ! -d "$cwd" ]; then
    fail "AHP_CWD: no directory $cwd (where new terminals start)"
fi
for arg in "$@"; do
    case "$arg" in
        --token|--token=*) fail "--token would show the token in ps: use AHP_TOKEN_FILE or AHP_TOKEN" ;;
    esac
done

exec python -m ahp serve \
    --host "${AHP_HOST:-0.0.0.0}" \
    --port "$port" \
    --shell "${AHP_SHELL:-bash}" \
    --cwd "$cwd" \
    --drain-timeout "${AHP_DRAIN_TIMEOUT:-10}" \
    "$@"
