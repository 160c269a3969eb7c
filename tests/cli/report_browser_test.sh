#!/bin/bash
# `lockstep report` in a real browser: writes a fixture run dir (a Lightning-format metrics.csv with step
# rows and 3 epoch rows carrying the per-rank breakdown of 2 ranks, a user's own key, hparams.yaml with
# text to escape, scaling.csv), writes the report, then loads it in headless Chromium and checks:
#   - the browser logged no console message, JS error, blocked or failed load;
#   - the page ran no script (an escaped hparams value must not turn into a <script> element);
#   - every chart's data-points equals the points in its DOM and what the fixture holds;
#   - the slowest rank is named; a screenshot PNG of the page is written and is not trivially small.
# Chromium is required (scripts/install-deps.sh installs it): without it the test fails, it never skips.
# Usage: report_browser_test.sh LOCKSTEP_BIN OUT_DIR
set -euo pipefail
lockstep=$1
out=$2
browser=""
for candidate in chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null; then browser=$candidate && break; fi
done
if [ -z "$browser" ]; then
  echo "report_browser_test: chromium not found in PATH; install it: apt-get install chromium (scripts/install-deps.sh)" >&2
  exit 1
fi
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

flags=(--headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir="$out/profile"
  --enable-logging=stderr --v=0)
timeout 90 "$browser" "${flags[@]}" --dump-dom "file://$report" >"$out/dom.html" 2>"$out/dom.log"
timeout 90 "$browser" "${flags[@]}" --window-size=1280,3600 --hide-scrollbars --screenshot="$out/report.png" \
  "file://$report" >/dev/null 2>"$out/screenshot.log"

status=0
# Messages of the page itself (not Chromium's own start-up chatter about D-Bus and the like).
if grep -E "CONSOLE|Uncaught|Refused to|Failed to load|ERR_(FILE|NAME|CONNECTION|BLOCKED)" "$out/dom.log" "$out/screenshot.log"; then
  echo "report_browser_test: the browser logged the page's errors above" >&2
  status=1
fi
python3 - "$out/dom.html" "$expected" <<'PY' || status=1
import sys
from html.parser import HTMLParser

class Charts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.stack, self.scripts, self.text = {}, [], 0, []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "figure" and "chart" in (a.get("class") or "").split():
            self.stack.append(a["id"])
            self.charts[a["id"]] = [int(a["data-points"]), 0]
        elif self.stack and "pt" in (a.get("class") or "").split():
            assert "data-x" in a and "data-y" in a, f"a point of {self.stack[-1]} lacks data-x/data-y: {a}"
            self.charts[self.stack[-1]][1] += 1
    def handle_endtag(self, tag):
        if tag == "figure" and self.stack:
            self.stack.pop()
    def handle_data(self, data):
        self.text.append(data)

page = Charts()
page.feed(open(sys.argv[1], encoding="utf-8").read())
expected = dict((k, int(v)) for k, v in (item.split("=") for item in sys.argv[2].split()))
failures = []
text = "".join(page.text)
if page.scripts:
    failures.append(f"{page.scripts} <script> element(s) in the DOM (an unescaped string?)")
if "<script>document.title='pwned'</script> & more" not in text:
    failures.append("the hparams value with markup is not shown as text")
if "Straggler: rank 1" not in text:
    failures.append("the straggler note (rank 1, 30% over the median) is missing")
for chart, (declared, drawn) in sorted(page.charts.items()):
    if declared != drawn:
        failures.append(f"{chart}: data-points={declared} but {drawn} points in the DOM")
    if chart not in expected:
        failures.append(f"{chart}: a chart the test does not expect ({drawn} points)")
for chart, count in expected.items():
    if chart not in page.charts:
        failures.append(f"{chart}: missing (expected {count} points)")
    elif page.charts[chart][1] != count:
        failures.append(f"{chart}: {page.charts[chart][1]} points, the fixture holds {count}")
for failure in failures:
    print("report_browser_test:", failure, file=sys.stderr)
print(f"report_browser_test: {len(page.charts)} charts checked:",
      ", ".join(f"{k}={v[1]}" for k, v in sorted(page.charts.items())))
sys.exit(1 if failures else 0)
PY
size=$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)
if [ "$size" -lt 50000 ]; then
  echo "report_browser_test: the screenshot $out/report.png has $size bytes (expected a page of charts, > 50 kB)" >&2
  status=1
fi
[ $status -eq 0 ] && echo "report_browser_test: ok ($report, screenshot $out/report.png: $size bytes)"
exit $status
