#!/bin/sh
# running_runs.sh JOBS_DIR PID_FILE EXIT_CODE_FILE [STOP_REQUEST_FILE]
# Prints "<job> <run id>" for every run under JOBS_DIR whose run.sh is alive
# and has not written its exit code; with STOP_REQUEST_FILE, also makes that
# file in the run's folder (run.sh then stops the job). Run as the training
# user, who owns these folders (kill -0 reaches only that user's processes).
jobs_dir=$1 pid_file=$2 exit_file=$3 stop_file=$4
for run in "$jobs_dir"/*/runs/*/; do
  [ -f "$run$pid_file" ] && [ ! -L "$run$pid_file" ] && [ ! -e "$run$exit_file" ] || continue
  pid=$(head -c 16 "$run$pid_file")
  case "$pid" in ''|*[!0-9]*|0|1) continue;; esac
  kill -0 "$pid" 2>/dev/null || continue
  run=${run%/}
  job=${run%/runs/*}
  echo "${job##*/} ${run##*/}"
  if [ -n "$stop_file" ]; then : > "$run/$stop_file"; fi
done
exit 0
