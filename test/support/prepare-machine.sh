#!/usr/bin/env bash
# Runs before `npm test` (npm's pretest): makes a fresh machine ready for the
# suite. Installs Debian's Chromium (the browser test), nats-server (the
# webhook tests start private servers of their own) and python3-venv (the
# Python client example installs grpcio-tools into a venv) and pg_isready
# (below, and compose's healthcheck in test/compose-health.test.ts) and HAProxy
# (compose's balancer, run in test/compose-balancer.test.ts) when missing,
# and starts the machine's PostgreSQL when it is installed but not running.
# Quick when everything is already there.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
# The Python client example (test/examples.test.ts) makes a venv.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v pg_isready >/dev/null 2>&1 || missing+=(postgresql-client)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing ${missing[*]}: install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

# The suite makes and drops a database of its own on this server.
if [ -z "${TEST_DATABASE_URL:-}" ] && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ] && [ "$(id -u)" = 0 ]; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    for _ in $(seq 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
  else
    # The suite's global setup starts the embedded PostgreSQL of `npm start` instead.
    echo "no PostgreSQL answers at 127.0.0.1:5432: the suite will start the embedded one"
  fi
fi
