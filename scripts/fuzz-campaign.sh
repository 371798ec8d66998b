#!/bin/sh
# A fuzzing campaign of a fixed size: runs a libFuzzer binary in fork mode
# (N_JOBS fuzzing processes at a time, sharing one growing corpus) until the
# executions of all jobs add up to EXECS, then prints libFuzzer's final lines
# and the total. Generic: any libFuzzer binary and seed corpus; built for
# tests/fuzz/fuzz_stream.cpp (docs/development.md, "Fuzzing", says how to
# build a binary that runs on a host without GStreamer).
#
#   scripts/fuzz-campaign.sh BINARY CORPUS_DIR N_JOBS EXECS [LIBFUZZER_FLAG...]
#
# CORPUS_DIR is read, never written: new inputs go to WORK/corpus, crashes,
# timeouts and out-of-memory inputs to WORK/artifacts, the log to
# WORK/fuzz.log, where WORK is $FUZZ_WORK or ./fuzz-campaign-DATE. Extra
# arguments go to libFuzzer (e.g. -ignore_crashes=1 to keep going after a
# crash, -max_len=N, -rss_limit_mb=N). Exit status: 0 when the executions
# were reached and no artifact was written, 1 otherwise, 2 on bad arguments.
set -eu

usage() {
  echo "usage: $0 BINARY CORPUS_DIR N_JOBS EXECS [LIBFUZZER_FLAG...]" >&2
  exit 2
}
[ $# -ge 4 ] || usage
binary=$1
corpus=$2
jobs=$3
execs=$4
shift 4
[ -x "$binary" ] || { echo "$binary: not an executable" >&2; exit 2; }
[ -d "$corpus" ] || { echo "$corpus: not a directory" >&2; exit 2; }
case $jobs in '' | *[!0-9]* | 0) echo "N_JOBS must be a positive integer" >&2; exit 2 ;; esac
case $execs in '' | *[!0-9]* | 0) echo "EXECS must be a positive integer" >&2; exit 2 ;; esac

work=${FUZZ_WORK:-fuzz-campaign-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$work/corpus" "$work/artifacts"
log=$work/fuzz.log

# Undefined behaviour is a crash that libFuzzer reports and saves; leaks are
# reported too (ASan's default).
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export UBSAN_OPTIONS

echo "fuzzing: $binary, seeds $corpus, $jobs jobs, $execs executions; work in $work"
start=$(date +%s)
status=0
# Fork mode stops once the jobs' executions reach -runs (the last job may
# take it a little past). The seed corpus comes second: libFuzzer adds new
# inputs only to the first directory.
"$binary" -fork="$jobs" -runs="$execs" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "$corpus" >"$log" 2>&1 || status=$?
elapsed=$(( $(date +%s) - start ))

echo "--- libFuzzer's last lines ($log):"
tail -n 12 "$log"
# Fork mode's status lines start with "#<executions so far>:".
total=$(grep -E '^#[0-9]+:' "$log" | tail -n 1 | sed 's/^#\([0-9]*\):.*/\1/')
[ -n "$total" ] || total=0
artifacts=$(find "$work/artifacts" -type f | wc -l)
echo "---"
echo "total executions: $total (asked for $execs) in ${elapsed} s, libFuzzer exit status $status"
echo "corpus: $(find "$work/corpus" -type f | wc -l) new inputs in $work/corpus"
echo "artifacts (crashes, timeouts, out of memory): $artifacts in $work/artifacts"
if [ "$status" -ne 0 ] || [ "$artifacts" -ne 0 ] || [ "$total" -lt "$execs" ]; then
  exit 1
fi
exit 0
