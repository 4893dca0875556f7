#!/usr/bin/env bash
# Runs a local Ollama (bin/ollama, built by scripts/build-ollama.sh) for
# development, with its own models directory under .dev/ollama, and creates
# the tiny test models eoc-tiny and eoc-tiny-embed in it.
#
#   scripts/dev-ollama.sh start    build if needed, start, create the models
#   scripts/dev-ollama.sh stop     stop it (and its runner processes)
#   scripts/dev-ollama.sh status   say whether it runs and what it has loaded
#
# EOC_OLLAMA_HOST sets the address (default 127.0.0.1:11434).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

host="${EOC_OLLAMA_HOST:-127.0.0.1:11434}"
host="${host#http://}"
dir="$root/.dev/ollama"
pidfile="$dir/ollama.pid"
logfile="$dir/ollama.log"
url="http://$host"

running_pid() {
	[[ -f "$pidfile" ]] || return 1
	local pid
	pid="$(cat "$pidfile")"
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

answers() { curl -fsS --max-time 2 "$url/api/version" >/dev/null 2>&1; }

start() {
	if pid="$(running_pid)"; then
		echo "dev-ollama: already running (pid $pid) at $url"
	else
		if answers; then
			echo "dev-ollama: something else already answers at $url; set EOC_OLLAMA_HOST to another address" >&2
			exit 1
		fi
		"$root/scripts/build-ollama.sh"
		mkdir -p "$dir/models"
		echo "dev-ollama: starting bin/ollama serve at $url (log: ${logfile#"$root"/})"
		# setsid: the server and its runner children get their own process
		# group, which stop signals as a whole.
		OLLAMA_HOST="$host" OLLAMA_MODELS="$dir/models" OLLAMA_KEEP_ALIVE="${OLLAMA_KEEP_ALIVE:-30m}" \
			setsid "$root/bin/ollama" serve >"$logfile" 2>&1 </dev/null &
		echo $! >"$pidfile"
		for _ in $(seq 1 300); do
			answers && break
			if ! running_pid >/dev/null; then
				echo "dev-ollama: ollama serve exited; last log lines:" >&2
				tail -n 20 "$logfile" >&2
				rm -f "$pidfile"
				exit 1
			fi
			sleep 0.1
		done
		answers || { echo "dev-ollama: no answer at $url after 30s" >&2; tail -n 20 "$logfile" >&2; exit 1; }
		echo "dev-ollama: ready: Ollama $(curl -fsS "$url/api/version" | sed 's/.*"version":"\([^"]*\)".*/\1/')"
	fi
	OLLAMA_HOST="$url" go run ./scripts/tinymodel
	cat <<USAGE

Ollama: $url  (models: eoc-tiny, eoc-tiny-embed; stop: scripts/dev-ollama.sh stop)
Direct:
  curl -s $url/api/chat -d '{"model":"eoc-tiny","messages":[{"role":"user","content":"hi"}],"stream":false}'
Through the proxy (backend url $url), once it listens on 127.0.0.1:8080:
  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"eoc-tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
eoc-tiny writes random lowercase text and never stops on its own: it runs to
max_tokens (default 32), or to a stop sequence (e.g. "stop":[" "]).
USAGE
}

stop() {
	local pid
	if ! pid="$(running_pid)"; then
		echo "dev-ollama: not running"
		rm -f "$pidfile"
		return 0
	fi
	echo "dev-ollama: stopping pid $pid"
	# The server stops its runners on SIGTERM; the group signal covers a
	# runner left behind.
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "dev-ollama: pid $pid did not stop in 10s; killing it" >&2
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
	fi
	rm -f "$pidfile"
	echo "dev-ollama: stopped"
}

status() {
	local pid
	if pid="$(running_pid)"; then
		echo "dev-ollama: running (pid $pid) at $url"
		if answers; then
			echo "version: $(curl -fsS "$url/api/version")"
			echo "loaded:  $(curl -fsS "$url/api/ps")"
		else
			echo "dev-ollama: but it does not answer" >&2
			return 1
		fi
	else
		echo "dev-ollama: not running"
		return 3
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 {start|stop|status}" >&2
	exit 2
	;;
esac
