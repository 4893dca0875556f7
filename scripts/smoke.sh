#!/usr/bin/env bash
# smoke.sh [URL] [MODEL]: curl a running eoc-proxy and fail loudly on anything wrong.
# Checks /healthz, /v1/models, a chat call with its X-EOC headers, a cache hit on repeat, a stream
# with its final eoc object, and an OpenAI-shaped error.
set -euo pipefail
URL=${1:-http://127.0.0.1:8080}
MODEL=${2:-${EOC_MODEL:-eoc-tiny}}
KEY=${EOC_API_KEY:-}
auth=()
[ -n "$KEY" ] && auth=(-H "Authorization: Bearer $KEY")
fail() { echo "SMOKE FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

curl -fsS "$URL/healthz" | grep -q '"ok"' || fail "/healthz"
echo "ok   /healthz"
curl -fsS "${auth[@]}" "$URL/v1/models" >"$tmp/models" || fail "/v1/models"
grep -q '"object":"list"' "$tmp/models" || fail "/v1/models is not a list: $(cat "$tmp/models")"
echo "ok   /v1/models: $(grep -o '"id":"[^"]*"' "$tmp/models" | tr '\n' ' ')"

prompt="smoke test $(date +%s%N)"
body="{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"$prompt\"}],\"max_tokens\":8}"
for i in 1 2; do
  code=$(curl -sS "${auth[@]}" -o "$tmp/body$i" -D "$tmp/head$i" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$URL/v1/chat/completions")
  [ "$code" = 200 ] || fail "chat call $i: HTTP $code: $(cat "$tmp/body$i")"
  for h in X-EOC-Joules X-EOC-Stage X-EOC-Energy X-EOC-Receipt; do
    grep -qi "^$h: " "$tmp/head$i" || fail "chat call $i: no $h header"
  done
  grep -qi '^X-EOC-Receipt: [0-9a-f]\{64\}' "$tmp/head$i" || fail "receipt is not 64 hex"
  echo "ok   chat call $i: $(grep -i '^X-EOC-' "$tmp/head$i" | tr -d '\r' | tr '\n' ' ')"
done
grep -qi '^X-EOC-Stage: cache' "$tmp/head2" || fail "the repeat was not a cache hit"

curl -sS -N "${auth[@]}" --raw -o "$tmp/stream" -D "$tmp/shead" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$MODEL\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"$prompt stream\"}],\"max_tokens\":8}" \
  "$URL/v1/chat/completions" || fail "stream call"
grep -q '"eoc":{' "$tmp/stream" || fail "stream has no final eoc object"
grep -q 'data: \[DONE\]' "$tmp/stream" || fail "stream has no [DONE]"
grep -qi '^Trailer: .*X-EOC-Joules' "$tmp/shead" || fail "stream does not announce its trailers"
grep -qi '^X-EOC-Joules: ' "$tmp/stream" || fail "stream trailers missing"
echo "ok   stream with trailers and eoc object"

code=$(curl -sS "${auth[@]}" -o "$tmp/err" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"model":' "$URL/v1/chat/completions")
[ "$code" = 400 ] && grep -q '"error":{' "$tmp/err" || fail "malformed JSON: HTTP $code $(cat "$tmp/err")"
echo "ok   400 in OpenAI's shape"
echo "SMOKE PASS"
