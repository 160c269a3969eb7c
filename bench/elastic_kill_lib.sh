# What bench/elastic_recovery.sh and bench/elastic_hosts.sh measure around a kill, sourced by both.
#
#   kill_and_time METRICS CMD...   runs CMD (the kill) and waits for the first step record beyond the last
#                                  one before it; sets kill_before (that last step), kill_lines (the
#                                  records before the kill) and kill_seconds (kill -> that new step)
#   steps_redone METRICS           after the run: step records written after the kill for steps done
#                                  before it (the steps trained again)
#   final_val_acc METRICS          the last val_acc recorded

now_ns() { date +%s%N; }
# The largest "step" among the metrics file's records (0 when none).
max_step() { grep -o '"step":[0-9]*' "$1" 2>/dev/null | cut -d: -f2 | sort -n | tail -1; }

kill_and_time() {
  local metrics=$1
  shift
  local t_kill t_next
  t_kill=$(now_ns)
  "$@"
  kill_before=$(max_step "$metrics")
  kill_lines=$(wc -l <"$metrics")
  until (($(max_step "$metrics") > kill_before)); do sleep 0.01; done
  t_next=$(now_ns)
  kill_seconds=$(awk -v a="$t_kill" -v b="$t_next" 'BEGIN { print (b - a) / 1e9 }')
}

steps_redone() {
  tail -n +$((kill_lines + 1)) "$1" | grep '"batch":' | grep -o '^{"step":[0-9]*' | cut -d: -f2 |
    awk -v b="$kill_before" '$1 <= b' | sort -un | wc -l
}

final_val_acc() {
  grep '"val_acc"' "$1" | tail -1 | grep -o '"val_acc":[0-9.]*' | cut -d: -f2
}
