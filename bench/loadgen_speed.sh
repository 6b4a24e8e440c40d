#!/usr/bin/env bash
# Load-generator speed and timing accuracy (DESIGN §5): what users run (`python -m app bench
# ... --json`, start-up and the results store included), a plain aiohttp loop (the baseline of
# the ratios) and the peer clients that are installed, against the shared yardstick's stub
# server, in one run; prints its tables and the same-run ratios CLI / plain loop.
#
# usage: bench/loadgen_speed.sh [YARDSTICK_DIR]
#   YARDSTICK_DIR  the load-generator yardstick (stub_server.py, measure.py, summarize.py,
#                  clients/); default: ../shared/tools/loadgen next to the repository root.
# env:
#   SUITES     any of "tput burst timing poisson workers plain" (default: all); "plain" runs the
#              baseline client (bench/loadgen/plain_aiohttp.py) through the same suites; "workers" runs our
#              client in burst mode at c=256 with --workers 1 and 2, allowed both cores (the stub
#              keeps core 0 and shares it): how far --workers takes one client past one core
#   PEERS      peer adapters to try (default "vllm_bench guidellm aiperf wrk"); each runs only
#              when its tool is installed (vllm_bench: VLLM_PYTHON, default the repo's
#              .venv-vllm; guidellm/aiperf: the venvs the yardstick's adapters name; wrk: PATH)
#   DURATION   seconds per measurement (default 15)
#   TIMING_REPEAT  runs of the timing measurement per client (default 1); with more, a table of
#              the median and range of each timing error follows (bench/loadgen/timing_spread.py)
#   RESULTS    JSON-lines file to append to (default: a new file under /tmp)
#   PORT       the stub's port (default: a random one in 20000-39999)
#   BENCH_PYTHON  python with aiohttp, uvloop and orjson for the stub (default: the repo's .venv)
#   STUB_GC    "off" runs the stub with Python's garbage collector disabled (every client alike):
#              the stub stamps a request when it reads it, so its own collector pauses count as
#              client TTFT error; comparing both runs separates the two (bench/loadgen/python_nogc.sh)
#   MAX_FOREIGN, MAX_ATTEMPTS, WAIT_QUIET  passed to measure.py (other users' CPU load: the
#              tables show it in the "foreign %" column)
# Each measurement pins the stub to core 0 and the client to core 1 (measure.py).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
ys=${1:-$root/../shared/tools/loadgen}
if [ ! -f "$ys/measure.py" ] || [ ! -f "$ys/stub_server.py" ]; then
  echo "loadgen_speed: no yardstick at $ys: it is not part of this repository; pass the folder" \
       "holding stub_server.py and measure.py as the first argument" >&2
  exit 2
fi
ys=$(cd "$ys" && pwd)
py=${BENCH_PYTHON:-$root/.venv/bin/python}
server_py=$py
if [ "${STUB_GC:-on}" = off ]; then
  export NOGC_PYTHON=$py
  server_py=$root/bench/loadgen/python_nogc.sh
fi
SUITES=${SUITES:-"tput burst timing poisson workers plain"}
PEERS=${PEERS:-"vllm_bench guidellm aiperf wrk"}
DURATION=${DURATION:-15}
res=${RESULTS:-$(mktemp /tmp/loadgen_speed.XXXXXX.jsonl)}
port=${PORT:-$((20000 + RANDOM % 20000))}  # not the yardstick's fixed default: others may use it
export VLLM_PYTHON=${VLLM_PYTHON:-$root/.venv-vllm/bin/python}
export TOKENIZER=${TOKENIZER:-/tmp/stub-tokenizer}

has() { case " $SUITES " in *" $1 "*) return 0 ;; esac; return 1; }
m() {
  "$py" "$ys/measure.py" --server-python "$server_py" --results "$res" --duration "$DURATION" \
    --max-foreign "${MAX_FOREIGN:-10}" --max-attempts "${MAX_ATTEMPTS:-2}" \
    --wait-quiet "${WAIT_QUIET:-20}" --port "$port" "$@" | cut -c1-120
}

available() {  # is the peer's tool installed here?
  case $1 in
    wrk) command -v wrk >/dev/null ;;
    vllm_bench) [ -x "$VLLM_PYTHON" ] && "$VLLM_PYTHON" -c "import vllm" 2>/dev/null ;;
    guidellm) [ -x "${GUIDELLM:-/tmp/guidellm-venv/bin/guidellm}" ] ;;
    aiperf) [ -x "${AIPERF:-/tmp/aiperf-venv/bin/aiperf}" ] ;;
    *) return 1 ;;
  esac
}

tokenizer() {  # the offline tokenizer the peers need (built once, with the vLLM venv)
  [ -f "$TOKENIZER/tokenizer.json" ] && return 0
  "$VLLM_PYTHON" "$ys/make_tokenizer.py" "$TOKENIZER" "$root/README.md" >/dev/null
}

suite() {  # suite NAME CMD PARSER
  local name=$1 cmd=$2 parser=$3
  for conc in 64 256; do
    has tput && m --label "$name/tput/c$conc" --parser "$parser" --client-cmd "$cmd" \
      --concurrency "$conc" --max-tokens 128
    has burst && m --label "$name/burst/c$conc" --parser "$parser" --client-cmd "$cmd" \
      --concurrency "$conc" --max-tokens 128 --server-args=--burst
  done
  [ "$name" = wrk ] && return 0
  if has timing; then
    local k label
    for k in $(seq 1 "${TIMING_REPEAT:-1}"); do
      label=$name; [ "$k" -gt 1 ] && label="$name#$k"
      m --label "$label/timing/c64" --parser "$parser" --client-cmd "$cmd" \
        --concurrency 64 --max-tokens 128 --server-args="--ttft-ms 50 --itl-ms 10"
    done
  fi
  if has poisson; then
    for r in 200 500 1000; do
      m --label "$name/poisson/r$r" --parser "$parser" --client-cmd "$cmd" --rate "$r" \
        --max-tokens 16
    done
  fi
}

echo "results: $res   (stub GC: ${STUB_GC:-on}; load before: $(cut -d' ' -f1-3 /proc/loadavg))"
suite servefit "$root/bench/loadgen/servefit_cli.sh" baseline
has plain && suite plain "$root/bench/loadgen/plain_aiohttp.sh" baseline
if has workers; then
  for w in 1 2; do
    SERVEFIT_WORKERS=$w m --label "servefit-workers$w-2cores/burst/c256" --parser baseline \
      --client-cmd "$root/bench/loadgen/servefit_cli.sh" --concurrency 256 --max-tokens 128 \
      --server-args=--burst --client-cpu 0,1
  done
fi
for peer in $PEERS; do
  if ! available "$peer"; then
    echo "peer $peer: not installed here, skipped"
    continue
  fi
  [ "$peer" != wrk ] && { tokenizer || { echo "peer $peer: no tokenizer, skipped"; continue; }; }
  parser=$peer
  [ "$peer" = wrk ] && parser=none
  suite "$peer" "$ys/clients/$peer.sh" "$parser"
done
"$py" "$ys/summarize.py" "$res" --last
echo
"$py" "$root/bench/loadgen/ratios.py" "$res"
if [ "${TIMING_REPEAT:-1}" -gt 1 ]; then
  echo
  "$py" "$root/bench/loadgen/timing_spread.py" "$res"
fi
