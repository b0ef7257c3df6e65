#!/usr/bin/env bash
# Show a hold on failure with the real CLI (docs/operating.md "Hold instead of rolling back"):
#   1. a dev server and a worker whose simulated fleet makes eu-west-1's test canary of 2.2.0 slow;
#   2. `bifrost submit deploy/examples/demo-hold.yaml`: eu-west-1/test fails its analysis and HOLDS (canary and
#      baseline running) instead of rolling back;
#   3. the cause is fixed: the worker restarts on a fleet where 2.2.0 is healthy (the rollout waits meanwhile);
#   4. `bifrost retry` judges the stage again on a fresh window (or, with HOLD_DEMO_ACTION=promote,
#      `bifrost promote --reason ...`), and the rollout goes on to the end.
# Usage: scripts/hold-demo.sh   (env: HOLD_DEMO_ACTION=retry|promote, PORT=7243, UI_PORT=8243, BIFROST=.venv/bin/bifrost)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BIFROST:-.venv/bin/bifrost}
ACTION=${HOLD_DEMO_ACTION:-retry}
PORT=${PORT:-7243}
UI_PORT=${UI_PORT:-8243}
ID=payments/2.2.0
STAGE=eu-west-1/test
TMP=$(mktemp -d)
export TEMPORAL_ADDRESS=127.0.0.1:$PORT BIFROST_USER=alice@example.com
server="" worker=""
cleanup() { for p in $worker $server; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

status_is() { "$B" status "$ID" --json 2>/dev/null | grep -q "\"status\": \"$1\""; }
wait_until() {  # wait_until WHAT COMMAND...: poll (up to 3 minutes) until COMMAND succeeds
  local what=$1; shift
  for _ in $(seq 1 360); do "$@" && return 0; sleep 0.5; done
  echo "timed out waiting for $what" >&2; return 1
}
start_worker() {
  "$B" worker --fleet "$1" --fleet-db "$TMP/fleet.db" --no-reports --log-format text >"$TMP/worker.log" 2>&1 &
  worker=$!
}

"$B" server --port "$PORT" --ui-port "$UI_PORT" --db "$TMP/temporal.db" >"$TMP/server.log" 2>&1 &
server=$!
wait_until "the dev server" "$B" list --limit 1 >/dev/null 2>&1
start_worker deploy/examples/demo-hold-fleet.yaml
echo "== submit: eu-west-1 holds on failure (Web UI: http://127.0.0.1:$UI_PORT)"
"$B" submit deploy/examples/demo-hold.yaml
wait_until "the hold" status_is held
"$B" status "$ID"

echo "== the cause is fixed: the worker restarts on a fleet where 2.2.0 is healthy; the rollout waits meanwhile"
kill "$worker"; wait "$worker" 2>/dev/null || true
start_worker deploy/examples/demo-fleet.yaml
if [ "$ACTION" = promote ]; then
  "$B" promote "$ID" --stage "$STAGE" --reason "the slowness was the cache warming; accepted"
else
  "$B" retry "$ID" --stage "$STAGE" --reason "the slow dependency is fixed"
fi
echo "== waiting for the outcome"
set +e
"$B" submit deploy/examples/demo-hold.yaml --wait   # attaches to the running rollout; the exit code is its outcome
code=$?
set -e
"$B" status "$ID"
exit $code
