#!/bin/bash
# Issue 26's run, end to end: `lockstep fit --devices 2 --logger tensorboard,csv,jsonl --default-root-dir D`
# with rank 1 made slow on purpose, then `lockstep report D`. Rank 1's slowness is a lag of its step clock
# (LOCKSTEP_FAULT=1:0:lag1000: its step timer measures 1 s more in every forward, with no sleep), so it is
# named whatever the load; no sleep is compared with a clock. Checks:
#   - the straggler line names rank 1 in every epoch (and under fsdp), and the epoch records hold the
#     per-rank breakdown;
#   - TensorBoard's own reader (the tensorboard package) reads back every scalar of metrics.csv from the
#     event file, with its step and value (float32) and a wall time within the run; metrics.jsonl holds the
#     same records; hparams.yaml holds the run's configuration;
#   - the report loads in headless Chromium without an error, its charts hold their points, the straggler
#     is named; its screenshot is written next to it.
# Usage: report_e2e.sh LOCKSTEP_BIN TENSORBOARD_PYTHON OUT_DIR
set -uo pipefail
lockstep=$1
python=$2
out=$3
fail() { echo "report_e2e: $*" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
work=$out
root="$out/D"
start=$(date +%s.%N)
LOCKSTEP_FAULT=1:0:lag1000 "$lockstep" fit --devices 2 --max-epochs 3 --data synthetic --synthetic-size 1024 \
  --batch-size 32 --threads 1 --progress off --breakdown-every-n-batches 2 --log-every-n-steps 4 \
  --logger tensorboard,csv,jsonl --default-root-dir "$root" >"$out/fit.out" 2>&1 || { cat "$out/fit.out"; fail "fit failed"; }
end=$(date +%s.%N)
cat "$out/fit.out"
for epoch in 1 2 3; do
  grep -Eq "^epoch $epoch: rank 1 is a straggler: [0-9.]+ ms busy a step, [0-9]+% over the other ranks' median" \
    "$out/fit.out" || fail "no straggler line naming rank 1 in epoch $epoch"
done
run="$root/lightning_logs/version_0"
grep -q "logging (tensorboard,csv,jsonl) to $run" "$out/fit.out" || fail "the run directory is not announced"
grep -qx "devices: 2" "$run/hparams.yaml" || fail "hparams.yaml lacks the run's configuration"
"$python" - "$run" "$start" "$end" <<'PY' || fail "the logs do not agree"
import csv, glob, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
import numpy as np

run, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = list(csv.DictReader(open(f"{run}/metrics.csv")))
records = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
assert len(rows) == len(records), f"{len(rows)} csv rows, {len(records)} jsonl records"
events, = glob.glob(f"{run}/events.out.tfevents.*")
acc = EventAccumulator(events, size_guidance={"scalars": 0})
acc.Reload()
scalars = {tag: {e.step: e for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
checked = 0
for row, record in zip(rows, records):
    step = int(row["step"])
    assert record["step"] == step, (record, row)
    for key, text in row.items():
        if key == "step" or text == "":
            continue
        value = float(text)
        assert record[key] == value, f"step {step} {key}: jsonl {record[key]}, csv {value}"
        event = scalars[key][step]
        assert event.value == float(np.float32(value)), f"step {step} {key}: event {event.value}, csv {value}"
        assert start <= event.wall_time <= end, f"{key}: wall time {event.wall_time} outside the run"
        checked += 1
epochs = [r for r in records if "val_loss" in r]
assert len(epochs) == 3, f"{len(epochs)} epoch records"
for r in epochs:
    assert r["breakdown/slowest_rank"] == 1 and r["breakdown/slowest_excess_pct"] > 20, r
    for rank in (0, 1):
        assert all(f"breakdown/rank_{rank}/{p}_ms" in r for p in ("data", "forward", "backward", "allreduce", "optimizer", "step")), r
print(f"report_e2e: {checked} scalars read back by tensorboard as written; {len(epochs)} epochs name rank 1")
PY
# Under fsdp the breakdown's phases include the parameter gathers: the lagging rank is still the one named.
LOCKSTEP_FAULT=1:0:lag1000 "$lockstep" fit --devices 2 --max-epochs 1 --data synthetic --synthetic-size 512 \
  --batch-size 32 --threads 1 --progress off --strategy fsdp --fsdp-min-unit-params 1000 >"$out/fsdp.out" 2>&1 \
  || { cat "$out/fsdp.out"; fail "fsdp fit failed"; }
grep -Eq "^epoch 1: rank 1 is a straggler" "$out/fsdp.out" || { cat "$out/fsdp.out"; fail "fsdp: no straggler line naming rank 1"; }
"$lockstep" report "$root" -o "$out/report.html" || fail "lockstep report failed"
# Each chart's points, counted from metrics.csv: chart id -> the cells of the keys it plots.
expected=$("$python" - "$run/metrics.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
count = lambda *keys: sum(1 for r in rows for k in keys if r.get(k, "") != "")
print(" ".join(f"{chart}={n}" for chart, n in {
    "chart-loss": count("train_loss_step", "train_loss_epoch", "val_loss"), "chart-lr": count("lr"),
    "chart-val-acc": count("val_acc"), "chart-throughput": count("time/samples_per_s"),
    "chart-epoch-time": count("time/epoch_s", "time/val_s"),
    "chart-memory": count("memory/peak_rss_mb", "memory/model_state_mb"),
    "chart-step-ms": count("breakdown/rank_0/step_ms", "breakdown/rank_1/step_ms"),
    "chart-breakdown": 2 * 5}.items()))
PY
)
"$(dirname "$0")/../cli/report_in_browser.sh" "$out/report.html" "$out" "$expected" "Straggler: rank 1" \
  || fail "the report did not pass in the browser"
echo "report_e2e: ok ($out/report.html, $out/report.png)"
