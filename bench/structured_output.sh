#!/usr/bin/env bash
# Memory use and memory formation on ONE llama.cpp server reached three ways, in one run:
# the native API with GBNF, the OpenAI chat endpoint with JSON schemas (the agent's action
# and the reflection's lines; llm.structuredOutput auto), and the same endpoint with no
# constraint.
# Usage: bench/structured_output.sh [REPEAT] [BENCHES] [ARMS]   (REPEAT default 1; BENCHES
# default "memuse formation"; ARMS default "native schema none"; figures in bench/RESULTS.md,
# "Structured output per backend"; each arm's output in /tmp/bench-structured-<bench>-<arm>.log)
set -euo pipefail
cd "$(dirname "$0")/.."
repeat="${1:-1}"
benches="${2:-memuse formation}"
arms="${3:-native schema none}"
model="$(.venv/bin/python -c 'from runtime.services.models import resolve_model; print(resolve_model(None).path)')"
port="$(.venv/bin/python -c 'from runtime.services.llama import free_port; print(free_port())')"
.venv/bin/python -m runtime.services.llama_portable -m "$model" --host 127.0.0.1 --port "$port" \
    --parallel 2 -c 8192 -t 2 > /tmp/bench-structured-server.log 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 1; done
url="http://127.0.0.1:$port"
for bench in $benches; do
    for arm in $arms; do
        case "$arm" in
            native) cfg='{}' ;;
            schema) cfg='{"llm": {"api": "openai-chat"}}' ;;
            none) cfg='{"llm": {"api": "openai-chat", "structuredOutput": "none"}}' ;;
        esac
        echo "== $bench $arm: $cfg" >&2
        extra=()
        [ "$bench" = formation ] && extra=(--no-write)
        .venv/bin/python -m "bench.$bench" --repeat "$repeat" --llm-url "$url" --config "$cfg" \
            "${extra[@]}" > "/tmp/bench-structured-$bench-$arm.log" 2>&1
        tail -n 25 "/tmp/bench-structured-$bench-$arm.log"
    done
done
