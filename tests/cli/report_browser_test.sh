#!/bin/bash
# `lockstep report` in a real browser: writes a fixture run dir (a Lightning-format metrics.csv with step
# rows and 3 epoch rows carrying the per-rank breakdown of 2 ranks, a user's own key, hparams.yaml with
# text to escape, scaling.csv), writes the report, then loads it in headless Chromium and checks:
#   - the browser logged no console message, JS error, blocked or failed load;
#   - the page ran no script (an escaped hparams value must not turn into a <script> element);
#   - every chart's data-points equals the points in its DOM and what the fixture holds;
#   - the slowest rank is named; a screenshot PNG of the page is written and is not trivially small.
# The browser part is report_in_browser.sh (shared with tests/e2e/report_e2e.sh).
# Usage: report_browser_test.sh LOCKSTEP_BIN OUT_DIR
set -euo pipefail
lockstep=$1
out=$2
rm -rf "$out"
run="$out/root/lightning_logs/version_0"
mkdir -p "$run" "$out/root/lightning_logs/version_bogus"

# metrics.csv: 10 steps logged per epoch (every 10th of 100), then the epoch row; rank 1 is 30% slower in
# the last epoch. A user key (grad_norm) on the step rows.
step_rows=30
epochs=3
{
  b="breakdown/rank_0/data_ms,breakdown/rank_0/forward_ms,breakdown/rank_0/backward_ms,breakdown/rank_0/allreduce_ms"
  b="$b,breakdown/rank_0/optimizer_ms,breakdown/rank_0/step_ms,breakdown/rank_1/data_ms,breakdown/rank_1/forward_ms"
  b="$b,breakdown/rank_1/backward_ms,breakdown/rank_1/allreduce_ms,breakdown/rank_1/optimizer_ms,breakdown/rank_1/step_ms"
  echo "epoch,step,train_loss_step,lr,grad_norm,train_loss_epoch,val_loss,val_acc,time/epoch_s,time/val_s,time/samples_per_s,memory/peak_rss_mb,memory/model_state_mb,$b,breakdown/slowest_rank,breakdown/slowest_excess_pct"
  for e in 0 1 2; do
    for i in $(seq 1 10); do
      s=$((e * 100 + i * 10 - 1))
      awk -v e=$e -v s=$s 'BEGIN { printf "%d,%d,%.4f,%.5f,%.3f,,,,,,,,,,,,,,,,,,,,,,\n", e, s, 2.3 * exp(-s / 120) + 0.3, 0.001 * (1 - s / 300), 5 / (1 + s / 50) }'
    done
    awk -v e=$e 'BEGIN {
      slow = e == 2 ? 1.3 : 1.05
      printf "%d,%d,,,,%.4f,%.4f,%.4f,%.2f,%.2f,%.1f,%.1f,%.2f,", e, e * 100 + 99, 1.2 - 0.3 * e, 1.1 - 0.25 * e, 0.70 + 0.06 * e, 6.1 - 0.2 * e, 0.8, 9800 + 150 * e, 410 + 3 * e, 1.02
      printf "1.2,4.0,8.1,1.5,0.7,15.5,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,1,%.1f\n", 1.2 * slow, 4.0 * slow, 8.1 * slow, 1.5, 0.7, 15.5 * slow, (slow - 1) * 100 / ((1 + slow) / 2) * 1
    }'
  done
} >"$run/metrics.csv"
cat >"$run/hparams.yaml" <<'YAML'
model: mlp
strategy: ddp
devices: 2
batch_size: 64
lr: 0.001
max_epochs: 3
precision: "32-true"
note: "<script>document.title='pwned'</script> & more"
YAML
cat >"$out/root/scaling.csv" <<'CSV'
ranks,time_per_epoch_s,speedup,efficiency_pct
1,6.10,1.00,100.0
2,3.40,1.79,89.7
4,2.05,2.98,74.4
CSV

report="$out/report.html"
"$lockstep" report "$out/root" -o "$report"
# The expected points, from the fixture above: chart id -> count.
expected="chart-loss=$((step_rows + 2 * epochs)) chart-val-acc=$epochs chart-lr=$step_rows"
expected="$expected chart-throughput=$epochs chart-epoch-time=$((2 * epochs)) chart-memory=$((2 * epochs))"
expected="$expected chart-step-ms=$((2 * epochs)) chart-breakdown=$((2 * 5)) chart-metric-0=$step_rows"
expected="$expected chart-scaling-efficiency=3 chart-scaling-speedup=3"

"$(dirname "$0")/report_in_browser.sh" "$report" "$out" "$expected" \
  "<script>document.title='pwned'</script> & more" "Straggler: rank 1"
