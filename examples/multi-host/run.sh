#!/usr/bin/env bash
# Wharf across hosts, on one machine: one control plane (127.0.0.1) and three executor
# processes on their own loopback addresses (127.0.0.2, .3, .4) sharing a NATS JetStream
# record log (or, with RECORD_LOG=kafka, a Kafka-protocol broker: tansu from
# scripts/setup-services), a `postgres-audit` connector feeding a `file-sink` across them; then an
# executor is killed (kill -9) as its connector is deleted, and the cleanup (drop the
# triggers, the trigger function and the audit table) finishes on another executor.
# Every connection is mutual TLS with certificates made by `wharf-control-plane certs`;
# admin calls carry an operator's bearer token (or the admin client certificate), as
# docs/security.md documents.
#
# Checks its own results and exits non-zero (printing why and where the logs are) if
# anything is off. Needs: the binaries (built with cargo when missing), nats-server,
# grpcurl, jq, psql and a PostgreSQL server (scripts/setup-services starts one on
# 127.0.0.1:5432). See examples/multi-host/README.md for the environment variables.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${WHARF_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/debug}"
work="${WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/wharf-multi-host.XXXXXX")}"
pg_host="${PGHOST:-127.0.0.1}"
pg_port="${PGPORT:-5432}"
grpcurl="${GRPCURL:-grpcurl}"
nats_server="${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}"
# The shared record log: nats (JetStream, the default) or kafka (a tansu broker).
record_log_kind="${RECORD_LOG:-nats}"
case "$record_log_kind" in nats | kafka) ;; *) printf 'RECORD_LOG must be nats or kafka, not %s\n' "$record_log_kind" >&2; exit 2 ;; esac
# Short lease so that a killed executor is noticed in seconds (default 10000 ms).
lease_ms=2000
heartbeat_ms=200
# Upper bound on each wait, in seconds.
step_timeout_s="${STEP_TIMEOUT_S:-60}"
db="wharf_multihost_$$"
pids=()
cp=""

mkdir -p "$work"
say() { printf '%s\n' "$*"; }
step() { printf '\n==> %s\n' "$*"; }
fail() {
  printf '\nFAILED: %s\n' "$*" >&2
  printf 'Logs and data: %s (control plane: cp.log, executors: exec-N.log, record log: nats.log or kafka.log)\n' "$work" >&2
  exit 1
}

cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n "${pg_user:-}" ]]; then
    psql -h "$pg_host" -p "$pg_port" -U "$pg_user" -d postgres -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  fi
  if [[ $rc -eq 0 && -z "${KEEP_WORK_DIR:-}" && -z "${WORK_DIR:-}" ]]; then rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for DESCRIPTION COMMAND...: runs COMMAND until it succeeds, showing progress.
wait_for() {
  local what="$1"; shift
  local deadline=$((SECONDS + step_timeout_s)) next_dot=$((SECONDS + 2))
  printf '    waiting for %s ' "$what"
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then printf '\n'; fail "timed out after ${step_timeout_s}s waiting for $what"; fi
    if ((SECONDS >= next_dot)); then printf '.'; next_dot=$((SECONDS + 2)); fi
    sleep 0.2
  done
  printf 'ok\n'
}

admin() { # admin METHOD [JSON]: as the example's operator (bearer token over TLS, docs/security.md)
  if [[ $# -ge 2 ]]; then
    "$grpcurl" -cacert "$pki/ca.pem" -max-time 10 -H "authorization: Bearer $token" -d "$2" "$cp" "wharf.v1.ConnectorAdmin/$1"
  else
    "$grpcurl" -cacert "$pki/ca.pem" -max-time 10 -H "authorization: Bearer $token" "$cp" "wharf.v1.ConnectorAdmin/$1"
  fi
}
admin_cert() { # admin_cert METHOD: as the admin client certificate (-cacert/-cert/-key)
  "$grpcurl" -cacert "$pki/ca.pem" -cert "$pki/admin-example-admin.pem" -key "$pki/admin-example-admin.key" \
    -max-time 10 "$cp" "wharf.v1.ConnectorAdmin/$1"
}
sql() { psql -h "$pg_host" -p "$pg_port" -U "$pg_user" -d "$db" -qAtc "$1"; }

step "[1/8] checking what this example needs"
log_tool="$nats_server"
if [[ "$record_log_kind" == kafka ]]; then
  log_tool="${TANSU:-$("$repo/scripts/setup-services" tansu-path 2>/dev/null || true)}"
  [[ -n "$log_tool" ]] || fail "no tansu broker: run scripts/setup-services kafka (or set TANSU)"
fi
for tool in "$grpcurl" jq psql "$log_tool"; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool not found: run scripts/setup-services (installs and starts PostgreSQL, NATS, grpcurl, tansu; installs jq), or install it"
done
if [[ ! -x "$bin/wharf-control-plane" || ! -x "$bin/wharf-executor" ]]; then
  say "    building wharf-control-plane and wharf-executor (cargo shows progress)"
  (cd "$repo" && cargo build -p wharf-control-plane -p wharf-executor-stock) || fail "cargo build failed (see above)"
fi
pg_user=""
for user in ${PGUSER:-postgres root}; do
  if psql -h "$pg_host" -p "$pg_port" -U "$user" -d postgres -qAtc 'select 1' >/dev/null 2>&1; then pg_user="$user"; break; fi
done
[[ -n "$pg_user" ]] || fail "PostgreSQL is not reachable at $pg_host:$pg_port (users tried: ${PGUSER:-postgres root}); run scripts/setup-services, or set PGHOST, PGPORT, PGUSER"
psql -h "$pg_host" -p "$pg_port" -U "$pg_user" -d postgres -qAtc "CREATE DATABASE $db" >/dev/null
say "    PostgreSQL $pg_host:$pg_port as $pg_user, database $db; work dir $work"

if [[ "$record_log_kind" == kafka ]]; then
  step "[2/8] starting a Kafka broker (tansu), the control plane and three executors"
  kafka_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "$log_tool" broker --listener-url "tcp://127.0.0.1:$kafka_port" --advertised-listener-url "tcp://127.0.0.1:$kafka_port" \
    --storage-engine memory://tansu/ >"$work/kafka.log" 2>&1 &
  pids+=($!)
  kafka_listens() { (exec 3<>"/dev/tcp/127.0.0.1/$kafka_port") 2>/dev/null; }
  wait_for "the Kafka broker to listen" kafka_listens
  record_log="kafka://127.0.0.1:$kafka_port"
  say "    Kafka broker (tansu) at 127.0.0.1:$kafka_port; the sink's position is the consumer group connect-mh-sink"
else
  step "[2/8] starting NATS JetStream, the control plane and three executors"
  mkdir -p "$work/nats"
  "$nats_server" -a 127.0.0.1 -p -1 -js -sd "$work/nats/js" --ports_file_dir "$work/nats" >"$work/nats.log" 2>&1 &
  pids+=($!)
  ports_path() { find "$work/nats" -maxdepth 1 -name '*.ports' | head -n 1; }
  ports_file() { [[ -n "$(ports_path)" ]]; }
  wait_for "nats-server to listen" ports_file
  record_log="$(jq -r '.nats[0]' "$(ports_path)")"
  say "    NATS JetStream at $record_log"
fi

# Certificates for every process and an admin client (docs/security.md, "Creating
# certificates"): server certificates name the loopback address each process listens on.
pki="$work/pki"
certs() { "$bin/wharf-control-plane" certs "$@" --dir "$pki" >/dev/null || fail "wharf-control-plane certs $* failed"; }
certs init
certs control-plane
for i in 1 2 3; do certs executor --id "exec-$i" --host "127.0.0.$((i + 1))"; done
certs admin --name example-admin --role admin
tls() { printf -- '--tls-cert %s --tls-key %s --tls-ca %s' "$pki/$1.pem" "$pki/$1.key" "$pki/ca.pem"; }
say "    certificates (CA, control plane, exec-1..3, admin client) in $pki"
# An operator's bearer token: the file keeps only its hash (docs/security.md, "Tokens").
token="$("$bin/wharf-control-plane" token --name example-operator --role operator 2>&1 >"$work/admin-tokens.toml" | tail -n 1)"
[[ "$token" == wharf_* ]] || fail "could not mint an admin token: $token"
RUST_LOG="${RUST_LOG:-info}" "$bin/wharf-control-plane" --listen 127.0.0.1:0 --data-dir "$work/cp" \
  --lease-ms "$lease_ms" --heartbeat-interval-ms "$heartbeat_ms" --admin-tokens "$work/admin-tokens.toml" \
  $(tls control-plane) >"$work/cp.log" 2>&1 &
pids+=($!)
wait_for "the control plane to bind" test -s "$work/cp/listen.addr"
cp="$(cat "$work/cp/listen.addr")"
say "    control plane (admin API and executor registry) at https://$cp"
# Without credentials the admin API answers UNAUTHENTICATED (and the TLS listener refuses
# plaintext outright).
refused="$("$grpcurl" -cacert "$pki/ca.pem" -max-time 10 "$cp" wharf.v1.ConnectorAdmin/ListConnectors 2>&1)" \
  && fail "ListConnectors without credentials was answered: $refused"
grep -q Unauthenticated <<<"$refused" || fail "ListConnectors without credentials: expected Unauthenticated, got: $refused"
say "    a call without a token or client certificate: Unauthenticated"

declare -A exec_pid
for i in 1 2 3; do
  RUST_LOG="${RUST_LOG:-info}" "$bin/wharf-executor" --listen "127.0.0.$((i + 1)):0" --control-plane "https://$cp" \
    --data-dir "$work/exec-$i" --executor-id "exec-$i" --record-log "$record_log" --graceful-timeout-ms 5000 \
    --file-root "$work" $(tls "executor-exec-$i") \
    >"$work/exec-$i.log" 2>&1 &
  pids+=($!)
  exec_pid["exec-$i"]=$!
done
alive_count() { admin ListExecutors | jq '[.executors[]? | select(.state == "EXECUTOR_STATE_ALIVE")] | length'; }
three_alive() { [[ "$(alive_count)" == 3 ]]; }
wait_for "three executors to register" three_alive
admin_cert ListExecutors | jq -r '.executors[] | "    \(.id) at \(.address): \(.state)"'
https_count="$(admin ListExecutors | jq '[.executors[]? | select(.address | startswith("https://"))] | length')"
[[ "$https_count" == 3 ]] || fail "expected 3 executors at https:// addresses, found $https_count"
say "    (listed with the admin client certificate; every executor is reached over mutual TLS)"

step "[3/8] creating tables customers and orders, and the connectors"
sql "CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL);
     CREATE TABLE orders (id serial PRIMARY KEY, customer_id int NOT NULL, amount_cents int NOT NULL);"
sink_file="$work/sink.jsonl"
admin CreateConnector "$(jq -nc --arg user "$pg_user" --arg db "$db" --arg host "$pg_host" --arg port "$pg_port" '{name: "pg-audit", config: {
  "connector.class": "postgres-audit", "tasks.max": "2", "connection.host": $host, "connection.port": $port,
  "connection.user": $user, "connection.database": $db, "tables": "public.customers,public.orders",
  "audit.table": "public.wharf_mh_audit", "topic": "mh.audit", "poll.interval.ms": "200"}}')" >/dev/null \
  || fail "CreateConnector pg-audit was refused (see above)"
admin CreateConnector "$(jq -nc --arg file "$sink_file" '{name: "mh-sink", config: {
  "connector.class": "file-sink", "file": $file, "topics": "mh.audit"}}')" >/dev/null \
  || fail "CreateConnector mh-sink was refused (see above)"
all_running() { # all_running NAME TASKS
  admin GetConnectorStatus "{\"name\":\"$1\"}" | jq -e --argjson n "$2" '.status
    | .connector.state == "STATE_RUNNING" and ([.tasks[]? | select(.status.state == "STATE_RUNNING")] | length) == $n'
}
wait_for "pg-audit and its 2 tasks to run" all_running pg-audit 2
wait_for "mh-sink and its task to run" all_running mh-sink 1
for name in pg-audit mh-sink; do
  admin GetConnectorStatus "{\"name\":\"$name\"}" | jq -r '.status | "    \(.name): connector on \(.connector.executorId)"
    + ([.tasks[] | ", task \(.task // 0) on \(.status.executorId)"] | join(""))'
done
triggers() { sql "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE c.relname IN ('customers', 'orders') AND NOT t.tgisinternal"; }
[[ "$(triggers)" == 2 ]] || fail "expected 2 audit triggers on customers and orders, found $(triggers)"
say "    postgres-audit provisioned: audit table public.wharf_mh_audit, 2 triggers"

step "[4/8] inserting rows; the change records cross executors through the record log ($record_log_kind) into the sink file"
sql "INSERT INTO customers (name) VALUES ('Ada'), ('Grace'); INSERT INTO orders (customer_id, amount_cents) VALUES (1, 4200);"
sink_has() { [[ -f "$sink_file" && "$(wc -l <"$sink_file")" -ge 3 ]]; }
wait_for "3 change records in $sink_file" sink_has
jq -c '{table, operation, new}' "$sink_file" | sed 's/^/    /'
if [[ "$record_log_kind" == kafka ]]; then
  topics_of() { admin GetConnectorTopics "{\"name\":\"$1\"}" | jq -r '.topics // [] | join(",")'; }
  sink_topics() { [[ "$(topics_of mh-sink)" == mh.audit ]]; }
  wait_for "mh-sink's active topics (KIP-558) to show mh.audit" sink_topics
  group="$(admin GetConnectorResources '{"name":"mh-sink"}' | jq -r '.entries[] | select(.resource.kind == "consumer_group") | .resource.name')"
  [[ "$group" == connect-mh-sink ]] || fail "mh-sink's ledger does not hold its consumer group connect-mh-sink (got '$group')"
  say "    mh-sink reads topic mh.audit through Kafka consumer group $group (in its resource ledger)"
fi

step "[5/8] killing (kill -9) the executor that runs pg-audit task 0, and deleting pg-audit"
victim="$(admin GetConnectorStatus '{"name":"pg-audit"}' | jq -r '.status.tasks[] | select((.task // 0) == 0) | .status.executorId')"
[[ -n "$victim" && -n "${exec_pid[$victim]:-}" ]] || fail "could not tell which executor runs pg-audit task 0 (got '$victim')"
# Every status change of pg-audit until its deletion ends (the stream closes after DELETED).
"$grpcurl" -cacert "$pki/ca.pem" -H "authorization: Bearer $token" -d '{"name":"pg-audit"}' "$cp" wharf.v1.ConnectorAdmin/WatchConnector >"$work/watch.json" 2>&1 &
watch_pid=$!
pids+=("$watch_pid")
watching() { grep -q CONNECTOR_EVENT_TYPE_SNAPSHOT "$work/watch.json"; }
wait_for "the WatchConnector stream to start" watching
{ kill -9 "${exec_pid[$victim]}" && wait "${exec_pid[$victim]}"; } 2>/dev/null || true
say "    killed $victim (pid ${exec_pid[$victim]})"
answer="$(admin DeleteConnector '{"name":"pg-audit"}')" || fail "DeleteConnector was refused: $answer"
say "    DeleteConnector answered: deleted=$(jq '.deleted // false' <<<"$answer") (recorded; the cleanup runs in the background)"
# The answer carries the status as recorded with the deletion (a later GetConnectorStatus
# may already find it finished: the cleanup only waits for the 2 s lease).
jq -e '.status.deletion' >/dev/null <<<"$answer" || fail "the DeleteConnector answer does not show pg-audit DELETING: $answer"
say "    pg-audit is DELETING; cleanup steps as recorded, while $victim is down:"
jq -r '.status.deletion.steps[] | "      \(if .task == null then "connector" else "task \(.task)" end): \(.state) on \(.executorId)"' <<<"$answer"

step "[6/8] waiting for the lease of $victim to expire and the cleanup to finish on another executor"
: >"$work/deletion-steps.jsonl"
deleted() {
  local out
  if out="$(admin GetConnectorStatus '{"name":"pg-audit"}' 2>&1)"; then
    jq -c '.status.deletion.steps[]?' <<<"$out" >>"$work/deletion-steps.jsonl"
    return 1
  fi
  grep -q NotFound <<<"$out"
}
wait_for "the deletion of pg-audit to finish" deleted
watch_ended() { ! kill -0 "$watch_pid" 2>/dev/null; }
wait_for "the WatchConnector stream to end after DELETED" watch_ended
# Task 0's cleanup must have finished on a live executor: normally re-hosted (a
# cleanup-only instance, rehosted = true); on a loaded machine the lease may run out
# before the delete arrives, and then task 0 had already moved and is stopped there.
done_on="$(jq -r --arg victim "$victim" '.. | objects | select(has("executorId") and .task == 0
  and .state == "CLEANUP_STATE_DONE" and .executorId != $victim) | "\(.executorId) \(.rehosted // false)"' "$work/watch.json" | tail -1)"
[[ -n "$done_on" ]] || fail "no status event shows task 0's cleanup done on another executor than $victim (see $work/watch.json)"
if [[ "${done_on#* }" == true ]]; then how="on a cleanup-only instance (re-hosted)"; else how="where it had moved"; fi
say "    task 0's cleanup finished on ${done_on% *} $how, its host $victim being lost; events:"
jq -r '"      \(.type) " + ([.status.deletion.steps[]? | "\(if .task == null then "connector" else "task \(.task)" end)=\(.state | sub("CLEANUP_STATE_"; ""))@\(.executorId)"] | join(" "))' "$work/watch.json" | uniq
kill -0 "${exec_pid[$victim]}" 2>/dev/null && fail "$victim is running again: the check below would not prove anything"

step "[7/8] checking PostgreSQL: triggers, trigger function and audit table are gone"
[[ "$(triggers)" == 0 ]] || fail "$(triggers) audit trigger(s) left on customers/orders after the deletion"
[[ "$(sql "SELECT to_regclass('public.wharf_mh_audit') IS NULL")" == t ]] || fail "audit table public.wharf_mh_audit still exists"
functions="$(sql "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.proname LIKE 'wharf%'")"
[[ "$functions" == 0 ]] || fail "$functions wharf trigger function(s) left in schema public"
say "    no trigger, no trigger function, no audit table left"

step "[8/8] the rest keeps running"
wait_for "mh-sink to run on a live executor" all_running mh-sink 1
admin ListExecutors | jq -r '.executors[] | "    \(.id): \(.state)"'
printf '\nAll checks passed.\n'
