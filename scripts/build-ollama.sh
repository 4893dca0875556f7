#!/usr/bin/env bash
# Builds the Ollama server pinned in go.mod (github.com/ollama/ollama) into
# bin/ollama: a CPU-only build through cgo with the system C/C++ compiler.
#
# The module zip leaves out llama.cpp's vendor/ headers. Debian packages
# supply nlohmann/json.hpp (nlohmann-json3-dev) and stb/stb_image.h
# (libstb-dev); scripts/ollama-stub/miniaudio/miniaudio.h stands in for
# miniaudio (audio input only, every decode fails).
#
# Skips the build when bin/ollama already holds the pinned version
# (FORCE=1 rebuilds). With a cold Go build cache it takes ~7.5 min on 2 idle
# cores (~11 CPU-minutes: user+sys), 15+ min on a busy machine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

mod=github.com/ollama/ollama
version="$(go list -m -f '{{.Version}}' "$mod")"
if [[ -z "$version" ]]; then
	echo "build-ollama: $mod is not in go.mod" >&2
	exit 1
fi
want="${version#v}"
bin="$root/bin/ollama"

installed_version() {
	# `ollama -v` talks to a server if one is running; read the client line.
	"$bin" -v 2>&1 | sed -n 's/.*client version is \([^ ]*\).*/\1/p; s/^ollama version is \([^ ]*\).*/\1/p' | tail -n1
}

if [[ -x "$bin" && "${FORCE:-0}" != 1 ]]; then
	have="$(installed_version || true)"
	if [[ "$have" == "$want" ]]; then
		echo "build-ollama: bin/ollama is already Ollama $have (pinned $version); skipping (FORCE=1 to rebuild)"
		exit 0
	fi
	echo "build-ollama: bin/ollama reports version '${have:-unknown}', want $want; rebuilding"
fi

# Debian packages for the headers the module zip leaves out.
need=()
[[ -f /usr/include/nlohmann/json.hpp ]] || need+=(nlohmann-json3-dev)
[[ -f /usr/include/stb/stb_image.h ]] || need+=(libstb-dev)
command -v g++ >/dev/null || need+=(g++)
if ((${#need[@]})); then
	echo "build-ollama: installing ${need[*]}"
	sudo=""
	[[ "$(id -u)" == 0 ]] || sudo=sudo
	$sudo apt-get update
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${need[@]}"
fi

mkdir -p "$root/bin"
# The stub's -I path is part of Go's build cache key: copy it to a path that does not depend on
# where the checkout lives, so a fresh clone (CI's) reuses an earlier build instead of a cold one.
stub="${XDG_CACHE_HOME:-$HOME/.cache}/eoc-proxy/ollama-stub"
mkdir -p "$stub/miniaudio"
cmp -s "$root/scripts/ollama-stub/miniaudio/miniaudio.h" "$stub/miniaudio/miniaudio.h" ||
	cp "$root/scripts/ollama-stub/miniaudio/miniaudio.h" "$stub/miniaudio/miniaudio.h"
echo "build-ollama: building $mod@$version into bin/ollama (cold: ~7.5 min on 2 idle cores)"
start=$(date +%s)
CGO_ENABLED=1 \
	CGO_CPPFLAGS="-I$stub ${CGO_CPPFLAGS:-}" \
	GOBIN="$root/bin" \
	GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
	go install -ldflags "-s -w -X $mod/version.Version=$want" "$mod@$version"
echo "build-ollama: built bin/ollama ($(installed_version)) in $(($(date +%s) - start))s"
