#!/bin/bash
# Loads a page of `lockstep report` in headless Chromium and checks it (tests/cli/report_browser_test.sh on a
# fixture, tests/e2e/report_e2e.sh on a real run):
#   - the browser logged no console message, JS error, blocked or failed load;
#   - the page ran no script (an escaped string from the files must not turn into a <script> element);
#   - every chart's data-points equals the points in its DOM, and each chart named in EXPECTED ("id=count
#     ...") has that many; with EXPECTED "" every chart must have at least one point;
#   - each TEXT appears in the page's text; a screenshot PNG (OUT_DIR/report.png) is not trivially small.
# Chromium is required (scripts/install-deps.sh installs it): without it the check fails, it never skips.
# Usage: report_in_browser.sh REPORT.html OUT_DIR EXPECTED [TEXT...]
set -euo pipefail
report=$(realpath "$1")
out=$2
expected=$3
shift 3
browser=""
for candidate in chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null; then browser=$candidate && break; fi
done
if [ -z "$browser" ]; then
  echo "report_in_browser: chromium not found in PATH; install it: apt-get install chromium (scripts/install-deps.sh)" >&2
  exit 1
fi
mkdir -p "$out"
flags=(--headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir="$out/profile"
  --enable-logging=stderr --v=0)
timeout 90 "$browser" "${flags[@]}" --dump-dom "file://$report" >"$out/dom.html" 2>"$out/dom.log"
timeout 90 "$browser" "${flags[@]}" --window-size=1280,3600 --hide-scrollbars --screenshot="$out/report.png" \
  "file://$report" >/dev/null 2>"$out/screenshot.log"

status=0
# Messages of the page itself (not Chromium's own start-up chatter about D-Bus and the like).
if grep -E "CONSOLE|Uncaught|Refused to|Failed to load|ERR_(FILE|NAME|CONNECTION|BLOCKED)" "$out/dom.log" "$out/screenshot.log"; then
  echo "report_in_browser: the browser logged the page's errors above" >&2
  status=1
fi
python3 - "$out/dom.html" "$expected" "$@" <<'PY' || status=1
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
for wanted in sys.argv[3:]:
    if wanted not in text:
        failures.append(f"the page does not show: {wanted}")
if not page.charts:
    failures.append("no chart on the page")
for chart, (declared, drawn) in sorted(page.charts.items()):
    if declared != drawn:
        failures.append(f"{chart}: data-points={declared} but {drawn} points in the DOM")
    if expected and chart not in expected:
        failures.append(f"{chart}: a chart the test does not expect ({drawn} points)")
    if not expected and drawn == 0:
        failures.append(f"{chart}: no data point")
for chart, count in expected.items():
    if chart not in page.charts:
        failures.append(f"{chart}: missing (expected {count} points)")
    elif page.charts[chart][1] != count:
        failures.append(f"{chart}: {page.charts[chart][1]} points, the data holds {count}")
for failure in failures:
    print("report_in_browser:", failure, file=sys.stderr)
print(f"report_in_browser: {len(page.charts)} charts checked:",
      ", ".join(f"{k}={v[1]}" for k, v in sorted(page.charts.items())))
sys.exit(1 if failures else 0)
PY
size=$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)
if [ "$size" -lt 50000 ]; then
  echo "report_in_browser: the screenshot $out/report.png has $size bytes (expected a page of charts, > 50 kB)" >&2
  status=1
fi
[ $status -eq 0 ] && echo "report_in_browser: ok ($report, screenshot $out/report.png: $size bytes)"
exit $status
