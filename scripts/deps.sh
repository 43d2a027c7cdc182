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
libcriterion-dev clang"

# Python packages for tests and tools. The venv is refreshed whenever this script changes
# (the stamp is this script's SHA-256; the Makefile checks the same).
PY_PKGS="pytest numpy safetensors gguf tokenizers jinja2 httpx openai anthropic ollama jsonschema huggingface_hub transformers tiktoken"
VENV_STAMP="$(sha256sum scripts/deps.sh | cut -c1-64)"

missing=""
for p in $DEB_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "deps: installing Debian packages:$missing"
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -f .venv/.stamp ] || [ "$(cat .venv/.stamp)" != "$VENV_STAMP" ]; then
	echo "deps: creating .venv with: $PY_PKGS"
	PY=python3
	[ -d .venv ] || "$PY" -m venv .venv
	.venv/bin/python -m pip install -q --upgrade pip >/dev/null
	.venv/bin/python -m pip install -q $PY_PKGS
	echo "$VENV_STAMP" > .venv/.stamp
fi
echo "deps: ready"
