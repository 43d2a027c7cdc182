#!/usr/bin/env bash
# Installs what saragossa needs to build and test, and nothing that is already there.
# Idempotent: a second run on a ready machine does no work and prints one line.
#   Debian packages (DESIGN.md §8) through apt-get (sudo when not root),
#   a Python virtual environment in .venv with the packages the tests and tools use.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PKGS="build-essential pkg-config python3-venv
libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libpcre2-dev
libutf8proc-dev libfftw3-dev libsndfile1-dev libsoxr-dev libedit-dev liburing-dev
libcriterion-dev zlib1g-dev clang
libespeak-ng-dev libprotobuf-c-dev protobuf-c-compiler libopus-dev libopusenc-dev chromium"

# Python packages for tests and tools. The venv is refreshed whenever this script changes
# (the stamp is this script's SHA-256; the Makefile checks the same).
PY_PKGS="pytest numpy safetensors gguf tokenizers jinja2 httpx openai anthropic ollama jsonschema huggingface_hub transformers tiktoken prometheus_client playwright"
VENV_STAMP="$(sha256sum scripts/deps.sh | cut -c1-64)"

# Each step says what it does before it starts and how long it took. The long ones (apt-get,
# pip: about 40 s on a fresh machine) show their lines that name a package as they go, one
# indented line each; their whole output goes to a log whose end is printed when they fail.
LOG="$(mktemp -t saragossa-deps.XXXXXX)"
trap 'rm -f "$LOG"' EXIT
step_t0=0
step() { echo "deps: $*"; step_t0=$SECONDS; }
done_step() { echo "deps: $* ($((SECONDS - step_t0)) s)"; }
# run PATTERN CMD...: CMD's output into the log, the lines matching PATTERN (none for "-")
# shown as they come.
run() {
	local pattern="$1" rc=0
	shift
	: > "$LOG"
	if [ "$pattern" = - ]; then
		"$@" >> "$LOG" 2>&1 || rc=$?
	else
		set +e
		"$@" 2>&1 | tee -a "$LOG" | { grep --line-buffered -E "$pattern" || true; } | sed -u -e 's/^/deps:   /'
		rc=${PIPESTATUS[0]}
		set -e
	fi
	if [ "$rc" -ne 0 ]; then
		echo "deps: failed (exit $rc): $*" >&2
		tail -n 30 "$LOG" | sed -e 's/^/deps:   /' >&2
		exit "$rc"
	fi
}

missing=""
for p in $DEB_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	step "apt-get update (package lists), then installing Debian packages:$missing"
	run - $SUDO apt-get update -qq
	run '^(Get:|Setting up )' $SUDO apt-get install -y --no-install-recommends $missing
	done_step "Debian packages installed"
fi

if [ ! -f .venv/.stamp ] || [ "$(cat .venv/.stamp)" != "$VENV_STAMP" ]; then
	PY=python3
	if [ ! -d .venv ]; then
		step "creating the Python virtual environment .venv"
		"$PY" -m venv .venv
		done_step "created .venv"
	fi
	step "installing into .venv (for the tests and tools, not the engine): $PY_PKGS"
	run - .venv/bin/python -m pip install -q --upgrade pip
	run '^(Collecting |Installing collected|Successfully installed)' .venv/bin/python -m pip install --progress-bar off $PY_PKGS
	done_step "Python packages installed"
	echo "$VENV_STAMP" > .venv/.stamp
fi
echo "deps: ready"
