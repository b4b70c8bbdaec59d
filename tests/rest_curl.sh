#!/usr/bin/env bash
# An operator's script against Wharf's Kafka Connect REST gateway, with plain curl and jq
# (what a Kafka Connect user already has): create, list, status, put/patch config, pause,
# resume, restart, stop, offsets, validate, plugins, delete, and a GET until 404. Run by
# tests/rest_compat.rs (an_operators_curl_and_jq_script_runs_the_connect_flow) with
# CONNECT_URL (http://IP:PORT of --rest-listen) and LIFECYCLE_PATH (the test-source's
# lifecycle file). Exits non-zero at the first answer that is not what Connect answers.
set -euo pipefail

: "${CONNECT_URL:?set CONNECT_URL to the gateway, e.g. http://127.0.0.1:8083}"
: "${LIFECYCLE_PATH:?set LIFECYCLE_PATH to a writable file path}"
name=curl-demo
json=(-H 'Content-Type: application/json')

fail() {
  echo "rest_curl.sh: $*" >&2
  exit 1
}

# code METHOD PATH [curl args...]: prints the HTTP status; the body goes to $body_file.
body_file=$(mktemp)
trap 'rm -f "$body_file"' EXIT
code() {
  local method=$1 path=$2
  shift 2
  curl -s -o "$body_file" -w '%{http_code}' -X "$method" "$@" "$CONNECT_URL$path"
}
expect() { # expect WANT METHOD PATH [curl args...]
  local want=$1 got
  shift
  got=$(code "$@")
  [ "$got" = "$want" ] || fail "$1 $2: HTTP $got, expected $want: $(cat "$body_file")"
}
# wait_for JQ_FILTER PATH: polls GET PATH (up to 60 s) until the filter prints true.
wait_for() {
  local filter=$1 path=$2 i
  for i in $(seq 1 300); do
    if [ "$(code GET "$path")" = 200 ] && [ "$(jq -r "$filter" "$body_file")" = true ]; then
      return 0
    fi
    sleep 0.2
  done
  fail "GET $path never satisfied $filter: $(cat "$body_file")"
}

expect 200 GET /
jq -e '.version and .commit and .kafka_cluster_id' "$body_file" >/dev/null || fail "GET / shape"

expect 200 GET /connector-plugins
jq -e 'map(select(.class == "test-source" and .type == "source")) | length == 1' "$body_file" >/dev/null ||
  fail "test-source not listed"

config=$(jq -n --arg lc "$LIFECYCLE_PATH" \
  '{"connector.class": "test-source", "tasks.max": "2", "lifecycle.path": $lc, "test.poll.block.ms": "50"}')

expect 200 PUT /connector-plugins/test-source/config/validate "${json[@]}" -d "$config"
jq -e '.error_count == 0' "$body_file" >/dev/null || fail "a good config did not validate: $(cat "$body_file")"
expect 200 PUT /connector-plugins/test-source/config/validate "${json[@]}" \
  -d "$(jq '. + {"tasks.max": "0"}' <<<"$config")"
jq -e '.error_count == 1' "$body_file" >/dev/null || fail "a bad config validated"

expect 201 POST /connectors "${json[@]}" -d "$(jq -n --arg n "$name" --argjson c "$config" '{name: $n, config: $c}')"
jq -e --arg n "$name" '.name == $n and .type == "source"' "$body_file" >/dev/null || fail "create answer"
expect 409 POST /connectors "${json[@]}" -d "$(jq -n --arg n "$name" --argjson c "$config" '{name: $n, config: $c}')"
jq -e '.error_code == 409 and (.message | type == "string")' "$body_file" >/dev/null || fail "409 body"

wait_for '.connector.state == "RUNNING" and (.tasks | length == 2) and all(.tasks[]; .state == "RUNNING")' \
  "/connectors/$name/status"

expect 200 GET /connectors
jq -e --arg n "$name" 'index($n) != null' "$body_file" >/dev/null || fail "not listed"
expect 200 GET '/connectors?expand=status&expand=info'
jq -e --arg n "$name" '.[$n].status.connector.state == "RUNNING" and .[$n].info.name == $n' "$body_file" >/dev/null ||
  fail "expand answer"

# Read the config, change tasks.max, write it back.
expect 200 GET "/connectors/$name/config"
new_config=$(jq '. + {"tasks.max": "1"}' "$body_file")
expect 200 PUT "/connectors/$name/config" "${json[@]}" -d "$new_config"
wait_for '(.tasks | length == 1) and .tasks[0].state == "RUNNING"' "/connectors/$name/status"
expect 200 PATCH "/connectors/$name/config" "${json[@]}" -d '{"test.records.per.poll": "2"}'
jq -e '.config["test.records.per.poll"] == "2"' "$body_file" >/dev/null || fail "patch answer"

expect 202 PUT "/connectors/$name/pause"
wait_for '.connector.state == "PAUSED"' "/connectors/$name/status"
expect 202 PUT "/connectors/$name/resume"
wait_for '.connector.state == "RUNNING"' "/connectors/$name/status"
expect 202 POST "/connectors/$name/restart?includeTasks=true&onlyFailed=false"
jq -e '.connector.state == "RESTARTING"' "$body_file" >/dev/null || fail "restart answer"
wait_for '.connector.state == "RUNNING" and all(.tasks[]; .state == "RUNNING")' "/connectors/$name/status"
expect 200 GET "/connectors/$name/tasks/0/status"
jq -e '.id == 0 and .state == "RUNNING"' "$body_file" >/dev/null || fail "task status"

expect 204 PUT "/connectors/$name/stop"
wait_for '.connector.state == "STOPPED"' "/connectors/$name/status"
expect 200 PATCH "/connectors/$name/offsets" "${json[@]}" \
  -d '{"offsets": [{"partition": {"task": 0}, "offset": {"seq": 7}}]}'
expect 200 GET "/connectors/$name/offsets"
jq -e '.offsets | map(select(.partition.task == 0 and .offset.seq == 7)) | length == 1' "$body_file" >/dev/null ||
  fail "offsets not altered: $(cat "$body_file")"
expect 200 DELETE "/connectors/$name/offsets"
expect 200 GET "/connectors/$name/offsets"
jq -e '.offsets == []' "$body_file" >/dev/null || fail "offsets not reset"

expect 204 DELETE "/connectors/$name"
# Poll until 404, as operators do; meanwhile the state may be DELETING.
for i in $(seq 1 300); do
  got=$(code GET "/connectors/$name/status")
  case "$got" in
    404) break ;;
    200) jq -e '.connector.state == "DELETING"' "$body_file" >/dev/null || fail "not DELETING while present" ;;
    *) fail "GET status during deletion: HTTP $got" ;;
  esac
  sleep 0.2
done
[ "$got" = 404 ] || fail "still there after 60 s"
jq -e '.error_code == 404' "$body_file" >/dev/null || fail "404 body"
echo "rest_curl.sh: ok"
