#!/bin/bash
# One fairjob worker (the `bench` binary's worker mode, c=25) drains N no-op
# jobs pre-filled on a private redis-server; for measuring the worker alone.
#
#   tests/perf/worker_drain.sh <bench binary> <N> none
#       prints the worker's CPU ticks (1/100 s), context switches and VmHWM (kB)
#       at the end of the drain, and the drain's rate
#   tests/perf/worker_drain.sh <bench binary> <N> callgrind <out file>
#       the same under `valgrind --tool=callgrind`; instructions per job =
#       (Ir at N=10000 - Ir at N=2000) / 8000 (start-up and shutdown cancel)
#
# PRE="LD_PRELOAD=..." runs the worker with another allocator.
set -e
BIN=$1; N=$2; TOOL=${3:-none}; OUT=${4:-/dev/null}
PORT=$((20000 + RANDOM % 10000))
DIR=$(mktemp -d)
redis-server --port $PORT --save '' --appendonly no --dir $DIR --daemonize yes --pidfile $DIR/r.pid >/dev/null
sleep 0.3
R="redis-cli -p $PORT"
$R eval "for i=1,tonumber(ARGV[1]) do redis.call('LPUSH','queue:bench','{\"retry\":true,\"queue\":\"bench\",\"class\":\"BenchNoopJob\",\"args\":['..i..'],\"jid\":\"'..string.format('%024x',i)..'\",\"created_at\":1764200000.123,\"enqueued_at\":1764200000.123}') end redis.call('SADD','queues','bench') return 1" 0 $N >/dev/null
export FAIRJOB_BENCH_N=$N FAIRJOB_LOG=warn
ARGS="--worker-url redis://127.0.0.1:$PORT/ --worker-concurrency 25 --worker-queue bench"
if [ "$TOOL" = callgrind ]; then
  env $PRE valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN $ARGS 2>$DIR/vg.log &
else
  env $PRE $BIN $ARGS &
fi
WPID=$!
until [ "$($R exists bench:last)" = "1" ]; do sleep 0.2; done
FIRST=$($R get bench:first); LAST=$($R get bench:last)
if [ "$TOOL" = none ]; then
  CPU=$(awk '{print $14+$15}' /proc/$WPID/stat)
  CS=$(cat /proc/$WPID/task/*/status | awk '/ctxt_switches/ {s+=$2} END {print s}')
  RSS=$(awk '/VmHWM/ {print $2}' /proc/$WPID/status)
  echo "cpu_ticks=$CPU ctxsw=$CS hwm_kb=$RSS"
fi
kill -TERM $WPID; wait $WPID || true
$R shutdown nosave >/dev/null 2>&1 || true
echo "n=$N rate=$(echo "$N / ($LAST - $FIRST)" | bc)"
rm -rf $DIR
