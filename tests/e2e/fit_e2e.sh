#!/bin/bash
# End-to-end checks of `lockstep fit` with real processes.
# Usage: fit_e2e.sh CASE LOCKSTEP PYTHON3
#   CASE: fashion_1rank | fashion_2ranks | synthetic_worlds | under_run | devices_mismatch | bad_flags |
#         missing_data | safetensors | config_file | accumulate_equivalence | data_on_device | zero1 | zero2 |
#         fsdp | gpt_text | gpt_tp
set -u
case_name=$1 lockstep=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "fit_e2e[$case_name]: $*" >&2; exit 1; }

# check_metrics FILE EPOCHS WORLD TRAIN_SAMPLES VAL_SAMPLES MIN_ACC [PREDICTIONS_PER_SAMPLE]
# (gpt: val_acc counts every position of a window, 64 of them)
check_metrics() {
  "$python" - "$@" <<'PY' || exit 1
import json, sys
path, epochs, world, train_samples, val_samples, min_acc = sys.argv[1], *map(int, sys.argv[2:6]), float(sys.argv[6])
per_sample = int(sys.argv[7]) if len(sys.argv) > 7 else 1
lines = [json.loads(l) for l in open(path)]
assert len(lines) == epochs, f"{len(lines)} metrics lines, expected {epochs}"
keys = {"epoch", "step", "train_loss", "val_loss", "val_acc", "epoch_s", "val_s", "samples_per_s"}
for i, m in enumerate(lines):
    assert keys <= m.keys(), f"missing keys {keys - m.keys()}"
    assert m["epoch"] == i, m
    assert m["world_size"] == world, m
    assert m["train_samples"] == train_samples, (m["train_samples"], train_samples)
    assert m["val_samples"] == val_samples, (m["val_samples"], val_samples)
    correct = m["val_acc"] * m["val_samples"] * per_sample
    assert abs(correct - round(correct)) < 1e-6, \
        f"val_acc {m['val_acc']} is not a count over {val_samples} x {per_sample}"
    assert m["epoch_s"] > 0 and m["samples_per_s"] > 0 and m["val_s"] >= 0, m
    assert m["peak_rss_mb"] > 0 and m["model_state_mb"] > 0, m
    assert "peak_cuda_mb" not in m, m  # a GPU's figure: these runs train on the CPU
    assert abs(m["samples_per_s"] - train_samples / m["epoch_s"]) < 1e-6 * m["samples_per_s"], m
assert lines[-1]["val_acc"] >= min_acc, f"final val_acc {lines[-1]['val_acc']} < {min_acc}"
assert lines[-1]["train_loss"] < lines[0]["train_loss"] or len(lines) == 1, "training loss did not fall"
print(f"metrics ok: {len(lines)} epochs, final val_acc {lines[-1]['val_acc']}")
PY
}

# The gpt cases' text, $work/book.txt: words of a small vocabulary in a fixed order of kinds (learnable); and
# run FLAGS...: `lockstep fit --model gpt` on it with SGD (see gpt_text), output in $work/run.out.
write_book() {
  "$python" - "$work/book.txt" <<'PY' || fail "cannot write the text"
import random, sys
random.seed(3)
kinds = [["the", "a", "one", "every"], ["cat", "dog", "rank", "tensor", "model"], ["runs", "sees", "sums", "waits"],
         ["fast.", "slowly.", "again.", "at last."]]
words = [random.choice(kind) for _ in range(2600) for kind in kinds]
open(sys.argv[1], "w").write(" ".join(words) + "\n")
PY
  common=(fit --model gpt --data text --text-file "$work/book.txt" --seed 7 --progress off --threads 1
          --max-epochs 2 --limit-train-batches 20 --limit-val-batches 4 --optimizer sgd --lr 0.3 --lr-schedule constant)
}
run() { "$lockstep" "${common[@]}" "$@" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "fit $* failed"; }; }

# same_losses A.jsonl B.jsonl TOLERANCE: every epoch's train and val losses at most TOLERANCE apart, the same
# sample counts (the model-parallel cases against ddp).
same_losses() {
  "$python" - "$@" <<'PY'
import json, sys
a, b, tolerance = [json.loads(l) for l in open(sys.argv[1])], [json.loads(l) for l in open(sys.argv[2])], float(sys.argv[3])
worst = max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in ("train_loss", "val_loss"))
print(f"{sys.argv[1]} vs {sys.argv[2]}: losses at most {worst:.3g} apart")
assert len(a) == len(b) and all(x["train_samples"] == y["train_samples"] and x["val_samples"] == y["val_samples"]
                              for x, y in zip(a, b)), "other sample counts"
sys.exit(0 if worst <= tolerance else 1)
PY
}

# expect_failure STATUS PATTERN -- CMD... (e2e_lib.sh)
. "$(dirname "$0")/e2e_lib.sh"

# The independent reference. Comparing a strategy with ddp, or N ranks with 1, proves that lockstep agrees
# with itself; a mistake common to both runs would pass. So each such comparison below also checks the ddp
# (or 1-rank) run against fit_replay.py: the same training written with PyTorch alone (torch.nn, Adam,
# DistributedSampler, clip_grad_norm_; no lockstep code), on IDX files it writes itself.
# replay_data TRAIN TEST: writes the data into $work/data (learnable 28x28 images, 10 classes).
replay_data() {
  "$python" "$(dirname "$0")/fit_replay.py" write-idx "$work/data" "$1" "$2" 2 || fail "fit_replay.py write-idx failed"
}
# matches_replay WEIGHTS REPLAY_FLAGS...: WEIGHTS (a run's final.safetensors on $work/data with --seed 7,
# --dropout 0, --lr-schedule constant, Adam) equal to float tolerance what `fit_replay.py replay` trains
# with REPLAY_FLAGS (measured: 0 to 5e-6 apart with one torch, 1.6e-5 from torch 2.15's replay to LibTorch
# 1.13's run; a replay with lr 1.1e-3, or without the clip, is 0.02 away and fails).
matches_replay() {
  local weights=$1
  shift
  "$python" "$(dirname "$0")/fit_replay.py" replay "$work/data" "$work/replay.safetensors" --seed 7 "$@" ||
    fail "fit_replay.py replay $* failed"
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$weights" "$work/replay.safetensors" ||
    fail "$weights: not the weights that PyTorch alone trains (fit_replay.py replay $*)"
}

# trains_like_ddp STRATEGY WHOLE CHUNK [FLAG...] (flags of the strategy run only): with accumulation (no_sync) and clipping by the global norm,
# --strategy STRATEGY trains ddp's weights on 2 and 3 ranks (runs in $work/ddpN and $work/STRATEGYN), and
# its model_state_mb on 2 ranks (MLP 784-256-128-10, Adam) is WHOLE bytes a parameter plus CHUNK bytes for
# each element of its chunks, ceil(n / 2) of each parameter (ddp: 16 bytes a parameter). The strategies'
# equivalence is what the comparison with ddp tests; ddp itself is checked against the replay (above).
# Defines run().
trains_like_ddp() {
  local strategy=$1 whole=$2 chunk=$3
  shift 3
  local own=("$@")
  replay_data 480 120
  common=(fit --data mnist --data-dir "$work/data" --seed 7 --model mlp --dropout 0 --progress off --batch-size 8
          --threads 1 --lr-schedule constant --accumulate-grad-batches 2 --gradient-clip-val 0.5)
  run() { "$lockstep" "${common[@]}" "$@" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "fit $* failed"; }; }
  for world in 2 3; do
    run --devices $world --max-epochs 2 --ckpt-dir "$work/ddp$world" --metrics-file "$work/ddp$world.jsonl"
    matches_replay "$work/ddp$world/final.safetensors" --devices $world --batch-size 8 --accumulate 2 --clip 0.5 \
      --epochs 2
    run --devices $world --max-epochs 2 --ckpt-dir "$work/$strategy$world" --strategy "$strategy" "${own[@]}" \
      --metrics-file "$work/$strategy$world.jsonl"
    "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/$strategy$world/final.safetensors" \
      "$work/ddp$world/final.safetensors" || fail "$strategy trained other weights than ddp on $world ranks"
  done
  "$python" - "$work/ddp2.jsonl" "$work/${strategy}2.jsonl" "$strategy" "$whole" "$chunk" <<'PY' ||
import json, sys
sizes = [784 * 256, 256, 256 * 128, 128, 128 * 10, 10]
ddp, got = (json.loads(open(p).read().splitlines()[-1])["model_state_mb"] for p in sys.argv[1:3])
strategy, whole, chunk = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
want_ddp = 16 * sum(sizes) / 2**20
want = (whole * sum(sizes) + chunk * sum((n + 1) // 2 for n in sizes)) / 2**20
assert abs(ddp - want_ddp) < 1e-9 and abs(got - want) < 1e-9, (ddp, want_ddp, got, want)
print(f"model state: ddp {ddp:.3f} MiB, {strategy} {got:.3f} MiB ({got / ddp:.3f}x)")
PY
    fail "model_state_mb is not what ddp and $strategy hold"
}

case $case_name in
fashion_1rank | fashion_2ranks)
  world=1
  [ "$case_name" = fashion_2ranks ] && world=2
  "$lockstep" fit --devices "$world" --model mlp --max-epochs 2 --limit-train-batches 60 \
    --metrics-file "$work/m.jsonl" --ckpt-dir "$work/ckpt" >"$work/out" 2>&1 || { cat "$work/out"; fail "fit failed"; }
  cat "$work/out"
  grep -Eq "^epoch 2/2  train_loss [0-9.]+  val_loss [0-9.]+  val_acc 0\.[0-9]+" "$work/out" || fail "no epoch line"
  grep -Eq "^final val_acc 0\.[0-9]+ over 10000 test images \($world rank" "$work/out" || fail "no final line"
  grep -q "^\[rank" "$work/out" && fail "rank 0's output should not be prefixed under lockstep fit"
  check_metrics "$work/m.jsonl" 2 "$world" $((60 * 64 * world)) 10000 0.6
  [ -s "$work/ckpt/final.pt" ] || fail "no final weights"
  "$python" "$(dirname "$0")/check_safetensors.py" "$work/ckpt/final.safetensors" "$work/ckpt/final.pt" model=mlp ||
    fail "final.safetensors differs from final.pt"
  unexpected=$(ls -A "$work/ckpt" | grep -vxE 'final\.pt|final\.safetensors|last\.ckpt')
  [ -z "$unexpected" ] || fail "leftovers in the checkpoint dir: $unexpected"
  ;;
synthetic_worlds)
  # 250 test images do not split evenly over 2 or 3 ranks: the sampler pads, validation must not count twice.
  for world in 1 2 3; do
    "$lockstep" fit --devices "$world" --data synthetic --synthetic-size 1000 --model mlp --max-epochs 2 \
      --batch-size 16 --metrics-file "$work/m$world.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "world $world failed"; }
    per_rank=$(( (1000 + world - 1) / world ))
    check_metrics "$work/m$world.jsonl" 2 "$world" $((per_rank * world)) 250 0.5
  done
  ;;
under_run)
  # One rank per process of a surrounding launcher, as under srun or torchrun.
  "$lockstep" run --nproc-per-node 2 --standalone -- "$lockstep" fit --data synthetic --synthetic-size 512 \
    --max-epochs 1 --metrics-file "$work/m.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "fit under run failed"; }
  cat "$work/out"
  grep -Eq "^\[rank 0\] final val_acc" "$work/out" || fail "no final line from rank 0"
  check_metrics "$work/m.jsonl" 1 2 512 128 0.3
  ;;
devices_mismatch)
  # The CLI refuses before it becomes the rank (launch::plan_rank_start): a usage error, exit 2.
  expect_failure 2 "devices 3 contradicts the environment" -- \
    "$lockstep" run --nproc-per-node 2 --standalone -- "$lockstep" fit --devices 3 --data synthetic --max-epochs 1
  ;;
bad_flags)
  expect_failure 2 "--model 'nope' is not known (expected one of: mlp, cnn, resnet18, gpt)" -- "$lockstep" fit --model nope
  expect_failure 2 "--limit-train-batches '1.5' is not a batch count" -- "$lockstep" fit --limit-train-batches 1.5
  # No GPU on CI machines: auto trains on the CPU, and the CLI says so before any rank starts.
  expect_failure 2 "--precision '16-mixed' needs a CUDA device (float16 autocast with a gradient scaler), and this run trains on the CPU (--accelerator 'auto', and no GPU is visible)" -- "$lockstep" fit --precision 16-mixed
  expect_failure 2 "--backend 'nccl' moves CUDA tensors, and this run trains on the CPU (--accelerator 'cpu')" -- "$lockstep" fit --accelerator cpu --backend nccl
  expect_failure 2 "--accelerator 'tpu' is not known (expected one of: auto, cpu, gpu)" -- "$lockstep" fit --accelerator tpu
  expect_failure 2 "--precision 'fp8' is not known (expected one of: 32, bf16-mixed, 16-mixed;" -- "$lockstep" fit --precision fp8
  expect_failure 2 "--max-epochs must be >= 1, got 0" -- "$lockstep" fit --max-epochs 0
  expect_failure 2 "--num-workers 'two' is not a number of loader threads" -- "$lockstep" fit --num-workers two
  expect_failure 2 "--synthetic-shape '3,0,32': height must be in 1..4096, got 0" -- "$lockstep" fit --data synthetic --synthetic-shape 3,0,32
  expect_failure 2 "--data 'mnist' needs --data-dir" -- "$lockstep" fit --data mnist
  expect_failure 2 "--num-nodes 2 needs one launcher per node" -- "$lockstep" fit --num-nodes 2
  expect_failure 2 "--dropout must be in [0, 1), got 1" -- "$lockstep" fit --dropout 1
  expect_failure 2 "--dropout does not apply to --model 'resnet18'" -- "$lockstep" fit --model resnet18 --dropout 0.1
  expect_failure 2 "--ckpt-every-n-steps 5 needs --ckpt-dir, where last.ckpt is written" -- "$lockstep" fit --ckpt-every-n-steps 5
  expect_failure 2 "--max-steps must be >= 1 (or -1: no limit), got 0" -- "$lockstep" fit --max-steps 0
  expect_failure 2 "--max-restarts must be >= 0, got -1" -- "$lockstep" fit --max-restarts -1
  expect_failure 2 'give the restarts to that launcher (`lockstep run --max-restarts K`)' -- \
    "$lockstep" run --nproc-per-node 1 --standalone -- "$lockstep" fit --max-restarts 1
  ;;
callbacks)
  # --save-top-k 2 keeps the 2 best epochs by val_loss (files named from the pattern) besides last.ckpt;
  # --early-stopping-patience 1 with a min delta no epoch can reach stops both ranks after epoch 2.
  "$lockstep" fit --devices 2 --data synthetic --synthetic-size 512 --max-epochs 4 --progress off --ckpt-dir "$work/ck" \
    --save-top-k 2 --checkpoint-filename "{epoch}-{val_loss:.3f}" --metrics-file "$work/m.jsonl" >"$work/out" 2>&1 \
    || { cat "$work/out"; fail "fit --save-top-k failed"; }
  "$python" - "$work" <<'PY' || { ls "$work/ck"; fail "wrong top-k files"; }
import json, os, sys
work = sys.argv[1]
epochs = [json.loads(l) for l in open(f"{work}/m.jsonl")]
best = sorted(epochs, key=lambda e: e["val_loss"])[:2]
want = sorted(f"epoch={e['epoch']}-val_loss={e['val_loss']:.3f}.ckpt" for e in best)
got = sorted(f for f in os.listdir(f"{work}/ck") if f.startswith("epoch="))
assert got == want, (got, want)
assert "last.ckpt" in os.listdir(f"{work}/ck")
print("top-2 files:", got)
PY
  "$lockstep" fit --devices 2 --data synthetic --synthetic-size 512 --max-epochs 5 --progress off \
    --early-stopping-patience 1 --early-stopping-min-delta 10 --metrics-file "$work/stop.jsonl" >"$work/out" 2>&1 \
    || { cat "$work/out"; fail "fit --early-stopping-patience failed"; }
  grep -q "stopping after epoch 2" "$work/out" || { cat "$work/out"; fail "no early stop after epoch 2"; }
  [ "$(wc -l <"$work/stop.jsonl")" -eq 2 ] || fail "early stopping ran $(wc -l <"$work/stop.jsonl") epochs, expected 2"
  # The typo itself, quoted ("val_los" alone would also match the val_loss that the message lists).
  expect_failure 1 "--monitor='val_los') cannot find its metric in the logged metrics" -- "$lockstep" fit --devices 1 --data synthetic --synthetic-size 256 --max-epochs 1 \
    --ckpt-dir "$work/ck2" --save-top-k 1 --monitor val_los
  ;;
nan)
  # A NaN loss on rank 1 at step 4 (injected): by default the job stops, naming the step, the rank and
  # --on-nan; with --on-nan skip both ranks skip that step together and the run finishes with finite metrics.
  common="--devices 2 --data synthetic --synthetic-size 512 --batch-size 32 --max-epochs 2 --progress off"
  export LOCKSTEP_FAULT=1:3:nan
  expect_failure 1 "non-finite training loss nan at step 4 (epoch 0, batch 3) on rank 1" -- \
    "$lockstep" fit $common
  grep -q -- "--on-nan skip" "$work/err" || fail "the NaN error does not name --on-nan skip"
  "$lockstep" fit $common --on-nan skip --metrics-file "$work/skip.jsonl" >"$work/out" 2>&1 \
    || { cat "$work/out"; fail "--on-nan skip did not finish"; }
  grep -q "skipped optimizer step 4 (epoch 0, batch 3): non-finite loss on a rank" "$work/out" || { cat "$work/out"; fail "no skip report"; }
  "$python" - "$work/skip.jsonl" <<'PY' || fail "wrong metrics after skipping a step"
import json, math, sys
epochs = [json.loads(l) for l in open(sys.argv[1])]
assert len(epochs) == 2, epochs
assert all(math.isfinite(e["train_loss"]) and math.isfinite(e["val_loss"]) for e in epochs), epochs
assert epochs[0]["step"] == 7 and epochs[1]["step"] == 15, [e["step"] for e in epochs]  # one step fewer
PY
  unset LOCKSTEP_FAULT
  expect_failure 2 "--on-nan 'ignore' is not known (expected one of: stop, skip)" -- "$lockstep" fit --on-nan ignore
  ;;
bf16)
  # bf16-mixed: the forward under CPU autocast to bfloat16, float32 weights; 2 ranks learn the synthetic
  # task as float32 does (accuracy within a few points), and the weights written stay float32.
  for precision in 32 bf16-mixed; do
    "$lockstep" fit --devices 2 --model cnn --data synthetic --synthetic-size 1024 --max-epochs 2 --progress off \
      --precision "$precision" --metrics-file "$work/$precision.jsonl" --ckpt-dir "$work/ck$precision" >"$work/out" 2>&1 \
      || { cat "$work/out"; fail "fit --precision $precision failed"; }
    grep -q "$precision precision" "$work/out" || { cat "$work/out"; fail "banner lacks the precision"; }
  done
  "$python" - "$work" <<'PY' || fail "bf16-mixed did not train like 32"
import json, sys
work = sys.argv[1]
last = lambda p: [json.loads(l) for l in open(f"{work}/{p}.jsonl")][-1]
a, b = last("32"), last("bf16-mixed")
print("val_acc 32:", a["val_acc"], "bf16-mixed:", b["val_acc"])
assert b["val_acc"] > 0.5, b
assert abs(a["val_acc"] - b["val_acc"]) < 0.1, (a, b)
assert a["train_loss"] != b["train_loss"], "bf16-mixed trained bit-identically to 32: autocast did nothing"
header = json.loads(open(f"{work}/ckbf16-mixed/final.safetensors", "rb").read()[8:8 + int.from_bytes(open(f"{work}/ckbf16-mixed/final.safetensors", "rb").read(8), "little")])
assert all(v["dtype"] in ("F32", "I64") for k, v in header.items() if k != "__metadata__"), header
PY
  ;;
safetensors)
  # final.safetensors read by Python with json + numpy alone, every tensor compared bit for bit with
  # final.pt loaded by torch.jit.load (cnn: F32 parameters and BatchNorm buffers, I64 num_batches_tracked).
  "$lockstep" fit --devices 2 --model cnn --data synthetic --synthetic-size 256 --max-epochs 1 \
    --limit-val-batches 1 --progress off --ckpt-dir "$work/ckpt" >"$work/out" 2>&1 || { cat "$work/out"; fail "fit failed"; }
  cat "$work/out"
  grep -Fxq "weights (safetensors): $work/ckpt/final.safetensors" "$work/out" || fail "no safetensors line"
  "$python" "$(dirname "$0")/check_safetensors.py" "$work/ckpt/final.safetensors" "$work/ckpt/final.pt" \
    format=pt model=cnn epochs=1 producer="lockstep fit" || fail "final.safetensors differs from final.pt"
  ls -A "$work/ckpt" | grep -q '^\.' && fail "temporary files left: $(ls -A "$work/ckpt")"
  ;;
config_file)
  # --config: keys applied in every rank, flags win (max-epochs), --lr-scaling with the real world size,
  # --lr-schedule step in epochs; --print-config prints YAML that --config reads back, launching nothing.
  cat >"$work/run.yaml" <<'YAML'
data: synthetic
synthetic-size: 1000
devices: 2
batch-size: 16
max-epochs: 9
lr-scaling: linear
lr-schedule: step
lr-step-epochs: 1
lr-gamma: 0.5
YAML
  "$lockstep" fit --config "$work/run.yaml" --max-epochs 3 --metrics-file "$work/m.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "fit --config failed"; }
  cat "$work/out"
  grep -Fq "2 rank(s) x batch 16, adam lr 0.002 (linear-scaled from 0.001: global batch 32 / reference 16) step (x0.5 every 1 epochs)" \
    "$work/out" || fail "start-up line lacks the scaled lr and the step schedule"
  "$python" - "$work/m.jsonl" <<'PY' || fail "metrics do not follow the file's schedule"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3, f"{len(lines)} epochs: --max-epochs 3 on the command line should win over the file's 9"
lrs = [m["lr"] for m in lines]
for got, want in zip(lrs, [0.002, 0.001, 0.0005]):  # the last step of each epoch: x0.5 per epoch
    assert abs(got - want) < 1e-12, lrs
print("lr per epoch", lrs)
PY
  "$lockstep" fit --config "$work/run.yaml" --max-epochs 3 --print-config >"$work/printed.yaml" 2>"$work/err" ||
    { cat "$work/err"; fail "--print-config failed"; }
  cat "$work/printed.yaml"
  grep -qx "max-epochs: 3" "$work/printed.yaml" || fail "--print-config lacks the command line's max-epochs"
  grep -qx "lr-scaling: linear" "$work/printed.yaml" || fail "--print-config lacks the file's lr-scaling"
  grep -q "^lockstep fit:" "$work/printed.yaml" && fail "--print-config started training"
  "$lockstep" fit --config "$work/printed.yaml" --print-config >"$work/again.yaml" || fail "printed config rejected"
  cmp "$work/printed.yaml" "$work/again.yaml" || fail "--print-config does not round-trip through --config"
  printf 'max-epoch: 3\n' >"$work/typo.yaml"
  expect_failure 2 "unknown key 'max-epoch' (line 1) (did you mean 'max-epochs'?)" -- "$lockstep" fit --config "$work/typo.yaml"
  printf 'lr-scaling: cubic\n' >"$work/bad.yaml"
  expect_failure 2 "--lr-scaling 'cubic' is not known (expected one of: none, linear, sqrt) (lr-scaling is set in --config" \
    -- "$lockstep" fit --config "$work/bad.yaml"
  ;;
missing_data)
  expect_failure 1 "$work/nowhere" -- "$lockstep" fit --data mnist --data-dir "$work/nowhere" --ckpt-dir "$work/ckpt" \
    --metrics-file "$work/m.jsonl"
  [ ! -e "$work/ckpt/final.pt" ] || fail "weights written although the data was missing"
  [ ! -e "$work/ckpt/final.safetensors" ] || fail "safetensors written although the data was missing"
  [ ! -s "$work/m.jsonl" ] || fail "metrics written although the data was missing"
  # Damaged IDX files (tiny ones, written here): a truncated image file, swapped files (wrong magic),
  # 12 images for 11 labels. Each: exit 1, the file and the problem named, nothing written.
  "$python" - "$work" <<'PY' || fail "cannot write the IDX files"
import os, struct, sys
def idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)
def split(d, prefix, images, labels, pixels=None):
    os.makedirs(d, exist_ok=True)
    idx(f"{d}/{prefix}-images-idx3-ubyte", 0x803, [images, 4, 4], bytes(16 * images if pixels is None else pixels))
    idx(f"{d}/{prefix}-labels-idx1-ubyte", 0x801, [labels], bytes(labels))
root = sys.argv[1]
for name in ("truncated", "swapped", "counts"):
    split(f"{root}/{name}", "t10k", 4, 4)
split(f"{root}/truncated", "train", 10, 10, pixels=155)
split(f"{root}/swapped", "train", 10, 10)
os.replace(f"{root}/swapped/train-labels-idx1-ubyte", f"{root}/swapped/tmp")
os.replace(f"{root}/swapped/train-images-idx3-ubyte", f"{root}/swapped/train-labels-idx1-ubyte")
os.replace(f"{root}/swapped/tmp", f"{root}/swapped/train-images-idx3-ubyte")
split(f"{root}/counts", "train", 12, 11)
PY
  check_idx_error() {  # DIR PATTERN
    rm -rf "$work/ckpt" "$work/m.jsonl"
    expect_failure 1 "$2" -- "$lockstep" fit --data mnist --data-dir "$1" --devices 1 --max-epochs 1 --progress off \
      --ckpt-dir "$work/ckpt" --metrics-file "$work/m.jsonl"
    [ -z "$(ls -A "$work/ckpt" 2>/dev/null)" ] || fail "files written although $1 was damaged: $(ls -A "$work/ckpt")"
    [ ! -s "$work/m.jsonl" ] || fail "metrics written although $1 was damaged"
  }
  check_idx_error "$work/truncated" "$work/truncated/train-images-idx3-ubyte"
  grep -q "expected 160 bytes.*got 155.*truncated" "$work/err" || fail "no truncation details"
  check_idx_error "$work/swapped" "$work/swapped/train-images-idx3-ubyte"
  grep -q "expected 0x00000803, got 0x00000801" "$work/err" || fail "no magic details"
  grep -q "swapped" "$work/err" || fail "the magic error does not suggest swapped files"
  check_idx_error "$work/counts" "12 images"
  grep -q "11 labels" "$work/err" || fail "the count error does not name the labels' count"
  ;;
zero1)
  # --strategy zero1 shards Adam's state over the ranks; its chunks step as the whole parameters would, so
  # the weights are ddp's (and ddp's are the replay's). Its checkpoints hold the whole state in Adam's own
  # format: a ddp run resumes with zero1 and a zero1 run with ddp, each ending on the uninterrupted ddp run.
  replay_data 480 120
  common=(fit --devices 2 --data mnist --data-dir "$work/data" --seed 7 --model mlp --dropout 0 --progress off
          --batch-size 16 --threads 1 --lr-schedule constant)
  run() { "$lockstep" "${common[@]}" "$@" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "fit $* failed"; }; }
  run --max-epochs 2 --ckpt-dir "$work/ddp" --metrics-file "$work/ddp.jsonl"
  matches_replay "$work/ddp/final.safetensors" --devices 2 --batch-size 16 --epochs 2
  run --max-epochs 2 --ckpt-dir "$work/zero" --strategy zero1 --metrics-file "$work/zero.jsonl"
  # Model state per rank, MLP 784-256-128-10 with Adam: ddp 16 bytes a parameter; zero1 keeps parameters and
  # gradient buckets whole (8 bytes) and Adam's 8 bytes for its chunks only, ceil(n / 2) of each parameter.
  "$python" - "$work/ddp.jsonl" "$work/zero.jsonl" <<'PY' || fail "model_state_mb is not what ddp and zero1 hold"
import json, sys
sizes = [784 * 256, 256, 256 * 128, 128, 128 * 10, 10]
ddp, zero = (json.loads(open(p).read().splitlines()[-1])["model_state_mb"] for p in sys.argv[1:3])
want_ddp = 16 * sum(sizes) / 2**20
want_zero = (8 * sum(sizes) + 8 * sum((n + 1) // 2 for n in sizes)) / 2**20
assert abs(ddp - want_ddp) < 1e-9 and abs(zero - want_zero) < 1e-9, (ddp, want_ddp, zero, want_zero)
print(f"model state: ddp {ddp:.3f} MiB, zero1 {zero:.3f} MiB ({zero / ddp:.3f}x)")
PY
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/zero/final.safetensors" "$work/ddp/final.safetensors" \
    || fail "zero1 trained other weights than ddp"
  run --max-epochs 1 --ckpt-dir "$work/a"
  run --max-epochs 2 --ckpt-dir "$work/a" --resume last --strategy zero1
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/a/final.safetensors" "$work/ddp/final.safetensors" \
    || fail "a ddp checkpoint resumed with zero1 did not end on the ddp run"
  run --max-epochs 1 --ckpt-dir "$work/b" --strategy zero1
  run --max-epochs 2 --ckpt-dir "$work/b" --resume last
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/b/final.safetensors" "$work/ddp/final.safetensors" \
    || fail "a zero1 checkpoint resumed with ddp did not end on the ddp run"
  ;;
zero2)
  # --strategy zero2 reduce-scatters the gradients during backward and steps the chunks: parameters whole
  # (4 bytes), gradients and Adam's 8 bytes for the chunks only. Its checkpoints are sharded, and a ddp run
  # resumes from one (the whole state put together from the shards) and ends on the uninterrupted ddp run;
  # a shard gone missing is named.
  trains_like_ddp zero2 4 12
  run --devices 2 --max-epochs 1 --ckpt-dir "$work/c" --strategy zero2
  cp -r "$work/c" "$work/e"
  rm "$work/e"/last.ckpt.step-*.shard-1-of-2
  expect_failure 1 "is sharded over 2 files, and '$work/e/last.ckpt.step-" -- \
    "$lockstep" "${common[@]}" --devices 2 --max-epochs 2 --ckpt-dir "$work/e" --resume last
  run --devices 2 --max-epochs 2 --ckpt-dir "$work/c" --resume last
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/c/final.safetensors" "$work/ddp2/final.safetensors" \
    || fail "a zero2 checkpoint resumed with ddp did not end on the ddp run"
  expect_failure 2 "--strategy 'zero2' does not support --precision '16-mixed' yet" -- \
    "$lockstep" fit --strategy zero2 --precision 16-mixed --accelerator cpu
  ;;
zero_bf16)
  # --precision bf16-mixed with zero1 and zero2: bfloat16 parameters, float32 master chunks (DeepSpeed's bf16
  # ZeRO). ddp's autocast computes with bfloat16 copies of the same float32 weights and reduces the
  # gradients in float32, as zero1's float32 buckets and zero2's float32 chunk gradients do: the weights
  # match ddp's (bit for bit here), clipped too under zero1 (zero2's sharded norm differs from torch's in the
  # last bit, which bfloat16 forward passes amplify: the clip is tested in float32 above), and with
  # gradient accumulation (the micro-batches' bfloat16 gradients sum in float32, as ddp's .grad does;
  # fsdp's too). Model state per
  # rank on 2 ranks: zero1 14 bytes a parameter (bfloat16 parameter and .grad, float32 bucket, master and
  # Adam for half), zero2 10. Checkpoints hold the float32 masters: resumed with zero1 the run is the
  # uninterrupted one bit for bit, resumed with ddp (whole float32 weights) too, and `lockstep export`
  # writes float32 weights.
  bf16=(fit --data synthetic --synthetic-size 480 --model mlp --dropout 0 --progress off --batch-size 8 --threads 1
        --lr-schedule constant --devices 2 --precision bf16-mixed)
  run() { "$lockstep" "${bf16[@]}" "$@" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "fit $* failed"; }; }
  same() {  # A B WHAT
    "$python" "$(dirname "$0")/compare_safetensors.py" --exact "$1" "$2" || fail "$3"
  }
  run --max-epochs 2 --ckpt-dir "$work/ddp" --metrics-file "$work/ddp.jsonl"
  for strategy in zero1 zero2; do
    run --max-epochs 2 --ckpt-dir "$work/$strategy" --strategy $strategy --metrics-file "$work/$strategy.jsonl"
    same "$work/$strategy/final.safetensors" "$work/ddp/final.safetensors" "bf16-mixed $strategy trained other weights than ddp"
  done
  run --max-epochs 2 --ckpt-dir "$work/ddp_acc" --accumulate-grad-batches 2
  for strategy in zero1 zero2 fsdp; do
    own=()  # fsdp's own option (an option of another strategy's is refused)
    [ "$strategy" = fsdp ] && own=(--fsdp-min-unit-params 1000)
    run --max-epochs 2 --ckpt-dir "$work/${strategy}_acc" --accumulate-grad-batches 2 --strategy $strategy "${own[@]}"
    same "$work/${strategy}_acc/final.safetensors" "$work/ddp_acc/final.safetensors" \
      "bf16-mixed $strategy with accumulation trained other weights than ddp"
  done
  run --max-epochs 2 --ckpt-dir "$work/ddp_clip" --gradient-clip-val 0.05
  run --max-epochs 2 --ckpt-dir "$work/zero1_clip" --gradient-clip-val 0.05 --strategy zero1
  same "$work/zero1_clip/final.safetensors" "$work/ddp_clip/final.safetensors" "bf16-mixed zero1 clipped other than ddp"
  "$python" - "$work/ddp.jsonl" "$work/zero1.jsonl" "$work/zero2.jsonl" <<'PY' || fail "model_state_mb is not what bf16 zero1/zero2 hold"
import json, sys
sizes = [784 * 256, 256, 256 * 128, 128, 128 * 10, 10]
ddp, zero1, zero2 = (json.loads(open(p).read().splitlines()[-1])["model_state_mb"] for p in sys.argv[1:4])
half = sum((n + 1) // 2 for n in sizes)
for got, want in ((ddp, 16 * sum(sizes)), (zero1, 8 * sum(sizes) + 12 * half), (zero2, 2 * sum(sizes) + 16 * half)):
    assert abs(got - want / 2**20) < 1e-9, (got, want / 2**20)
print(f"model state: ddp {ddp:.3f} MiB, zero1 {zero1:.3f} MiB, zero2 {zero2:.3f} MiB")
PY
  "$python" - "$work/zero1/final.safetensors" <<'PY' || fail "the final weights of bf16 zero1 are not float32"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"F32"}, dtypes
PY
  run --max-epochs 1 --ckpt-dir "$work/a" --strategy zero1
  cp -r "$work/a" "$work/b"
  "$lockstep" export "$work/a/last.ckpt" -o "$work/a/export.safetensors" >/dev/null || fail "export failed"
  same "$work/a/export.safetensors" "$work/a/final.safetensors" "the export is not the float32 weights the run ended with"
  run --max-epochs 2 --ckpt-dir "$work/a" --strategy zero1 --resume last
  same "$work/a/final.safetensors" "$work/zero1/final.safetensors" "bf16 zero1 resumed is not the uninterrupted run"
  run --max-epochs 2 --ckpt-dir "$work/b" --resume last
  same "$work/b/final.safetensors" "$work/ddp/final.safetensors" "a bf16 zero1 checkpoint resumed with ddp is not ddp's run"
  ;;
fsdp)
  # --strategy fsdp shards the parameters too, one unit per layer here (--fsdp-min-unit-params 1000): 16
  # bytes for the chunks only (parameter, gradient, Adam's two moments). Checkpoints are sharded: each rank
  # writes its chunks, last.ckpt names the shards (no parameter values in it); `lockstep export`
  # consolidates them into the weights the run ended with; a 2-rank checkpoint resumed on 3 ranks
  # (re-sharded) with fsdp ends where the same checkpoint resumed with ddp ends, and the 3-rank run's
  # checkpoints replace the 2-rank shards.
  trains_like_ddp fsdp 0 16 --fsdp-min-unit-params 1000
  # --precision bf16-mixed: fsdp gathers bfloat16 parameters from float32 master shards and computes with
  # them; ddp's autocast computes with bfloat16 copies of float32 weights. The same products, gradients
  # reduced in float32 both ways: the final weights (whole, float32) end close to ddp's. Without clipping:
  # the sharded clip and torch's differ in the last bit of float32 (measured: 4.8e-8 above), and bfloat16
  # forward passes turn such a bit into a different rounding now and then (7e-4 after 2 epochs with
  # torch 2.15), so that comparison says nothing about the mixed precision; the clip is tested in float32.
  bf16=(fit --data synthetic --synthetic-size 480 --model mlp --dropout 0 --progress off --batch-size 8 --threads 1
        --lr-schedule constant --devices 2 --max-epochs 2 --precision bf16-mixed)
  "$lockstep" "${bf16[@]}" --ckpt-dir "$work/bf_ddp" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "bf16 ddp failed"; }
  "$lockstep" "${bf16[@]}" --ckpt-dir "$work/bf_fsdp" --strategy fsdp --fsdp-min-unit-params 1000 >"$work/run.out" 2>&1 \
    || { cat "$work/run.out"; fail "bf16 fsdp failed"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/bf_fsdp/final.safetensors" \
    "$work/bf_ddp/final.safetensors" || fail "bf16-mixed fsdp trained other weights than bf16-mixed ddp"
  # Resumed on another world size: 1 epoch of fsdp on 2 ranks, then fsdp on 3 ranks, against ddp on 3
  # ranks resumed from the same checkpoint.
  run --devices 2 --max-epochs 1 --ckpt-dir "$work/c" --strategy fsdp
  shards() { find "$1" -name "last.ckpt.step-*.shard-*-of-$2" | wc -l; }
  [ "$(shards "$work/c" 2)" = 2 ] || { ls -l "$work/c"; fail "a 2-rank fsdp checkpoint is not 2 shards"; }
  size=$(stat -c %s "$work/c/last.ckpt")
  [ "$size" -lt 100000 ] || fail "last.ckpt of a sharded run holds $size bytes: the parameters (940 KB) went into it"
  "$lockstep" export "$work/c/last.ckpt" -o "$work/c/export.safetensors" >/dev/null || fail "export of a sharded checkpoint failed"
  "$python" "$(dirname "$0")/compare_safetensors.py" --exact "$work/c/export.safetensors" "$work/c/final.safetensors" \
    || fail "the export of a sharded checkpoint is not the weights the run ended with"
  cp -r "$work/c" "$work/d"
  run --devices 3 --max-epochs 2 --ckpt-dir "$work/c" --resume last --strategy fsdp
  run --devices 3 --max-epochs 2 --ckpt-dir "$work/d" --resume last
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/c/final.safetensors" "$work/d/final.safetensors" \
    || fail "an fsdp checkpoint resumed on 3 ranks with fsdp did not end where ddp did"
  [ "$(shards "$work/c" 2)" = 0 ] && [ "$(shards "$work/c" 3)" = 3 ] \
    || { ls -l "$work/c"; fail "the 3-rank checkpoint did not replace the 2-rank shards"; }
  # A model not built in stages (cnn) is one unit, the whole model: the same weights as ddp.
  cnn=(fit --devices 2 --data synthetic --synthetic-size 192 --model cnn --dropout 0 --progress off --batch-size 16
       --threads 1 --max-epochs 1 --lr-schedule constant)
  "$lockstep" "${cnn[@]}" --ckpt-dir "$work/cnn_ddp" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "cnn ddp failed"; }
  "$lockstep" "${cnn[@]}" --ckpt-dir "$work/cnn_fsdp" --strategy fsdp >"$work/run.out" 2>&1 \
    || { cat "$work/run.out"; fail "cnn fsdp failed"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/cnn_fsdp/final.safetensors" \
    "$work/cnn_ddp/final.safetensors" || fail "fsdp trained other cnn weights than ddp"
  ;;
data_on_device)
  # --data-on-device (here the CPU is the device): the images normalised once and gathered with
  # index_select give the loader's bytes, so 2 ranks train bit-identical weights either way. The same
  # flags with --augment on are refused before any rank starts.
  common=(fit --devices 2 --data synthetic --synthetic-size 512 --max-epochs 2 --model mlp --progress off
          --batch-size 32 --threads 1)
  "$lockstep" "${common[@]}" --ckpt-dir "$work/host" >"$work/host.out" 2>&1 || { cat "$work/host.out"; fail "host run failed"; }
  "$lockstep" "${common[@]}" --data-on-device --ckpt-dir "$work/dev" >"$work/dev.out" 2>&1 \
    || { cat "$work/dev.out"; fail "--data-on-device run failed"; }
  cmp "$work/host/final.safetensors" "$work/dev/final.safetensors" || fail "--data-on-device trained other weights"
  grep -q "data kept on cpu, on cpu$" "$work/dev.out" || fail "the banner does not say the data is kept on the device"
  grep -Eq "[0-9]+ loader thread\(s\)/rank, on cpu$" "$work/host.out" || fail "the banner does not name the loader threads and the device"
  expect_failure 2 "--data-on-device keeps the images normalised once on the device, where they cannot be augmented, and --augment 'on' is asked for: set --augment 'off'" -- \
    "$lockstep" fit --data synthetic --data-on-device --augment on
  ;;
accumulate_equivalence)
  # 2 ranks x 16 x --accumulate-grad-batches 2 sees the same 64 samples per optimizer step as 1 rank x 64
  # (the sampler interleaves the ranks), so the weights must agree to float rounding; without dropout,
  # whose masks depend on the rank (measured: 2.8e-6 apart after 16 Adam steps; bound 5e-5). 2 ranks x 16
  # without accumulation (global batch 32) must end far apart (measured: 0.026). Both the 1-rank run and
  # the accumulating one are checked against the replay of 1 x 64 (PyTorch alone; see matches_replay).
  replay_data 512 128
  common=(fit --data mnist --data-dir "$work/data" --seed 7 --max-epochs 2 --model mlp --dropout 0 --progress off
          --limit-val-batches 2 --lr-schedule constant --threads 1)
  "$lockstep" "${common[@]}" --devices 1 --batch-size 64 --ckpt-dir "$work/one" >"$work/one.out" 2>&1 \
    || { cat "$work/one.out"; fail "1-rank run failed"; }
  "$lockstep" "${common[@]}" --devices 2 --batch-size 16 --accumulate-grad-batches 2 --ckpt-dir "$work/acc" \
    >"$work/acc.out" 2>&1 || { cat "$work/acc.out"; fail "2-rank accumulation run failed"; }
  "$lockstep" "${common[@]}" --devices 2 --batch-size 16 --ckpt-dir "$work/small" >"$work/small.out" 2>&1 \
    || { cat "$work/small.out"; fail "2-rank run failed"; }
  "$python" - "$work/one/final.safetensors" "$work/acc/final.safetensors" "$work/small/final.safetensors" <<'PY' \
    || fail "accumulation is not equivalent to the larger batch"
import json, struct, sys
import numpy as np

def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"])
            for k, v in header.items()}

one, acc, small = (load(p) for p in sys.argv[1:4])
assert one.keys() == acc.keys() == small.keys()
worst = max(float(np.max(np.abs(one[k] - acc[k]))) for k in one)
apart = max(float(np.max(np.abs(one[k] - small[k]))) for k in one)
print(f"max |1x64 - 2x16x2| = {worst:.3g}; max |1x64 - 2x16| = {apart:.3g}")
assert worst <= 5e-5, f"2 ranks x 16 x 2 differ from 1 rank x 64 by {worst}"
assert apart > 100 * max(worst, 1e-7), f"global batch 32 ended as close as 64 ({apart}): the check cannot tell"
PY
  matches_replay "$work/one/final.safetensors" --devices 1 --batch-size 64 --epochs 2
  matches_replay "$work/acc/final.safetensors" --devices 1 --batch-size 64 --epochs 2
  ;;
gpt_text)
  # --model gpt --data text: a GPT over the bytes of a text. On a text written here (words of a small
  # vocabulary in a fixed order of kinds: learnable): 2 ranks x 8 end on the weights of 1 rank x 16 (the
  # sampler interleaves the ranks: the same 16 windows a step) and on what PyTorch alone trains
  # (gpt_fit_replay.py); zero1, zero2 and fsdp (a unit per stage) end on ddp's; bf16-mixed runs under
  # ddp and fsdp. These comparisons use SGD: float32 sums in another
  # order differ by ~1e-7, and SGD keeps that size (measured: 1.9e-6 after 40 steps, within
  # compare_safetensors' 1e-4). Adam does not: c_attn's key bias has a gradient that is exactly zero but
  # for rounding (softmax ignores a constant added to a row's scores), Adam divides that noise by its own
  # size and steps it by lr, so two correct runs drift apart there (measured: 4.6e-4 with lr 3e-3).
  # Then Debian's fortunes, the default text, with Adam: the model must beat the unigram baseline.
  write_book
  close() { "$python" "$(dirname "$0")/compare_safetensors.py" --close "$1/final.safetensors" "$2/final.safetensors" \
    || fail "$3"; }
  run --devices 1 --batch-size 16 --ckpt-dir "$work/one"
  grep -Eq "^lockstep fit: gpt \(120576 parameters\) on text $work/book.txt, [0-9]+ bytes \([0-9]+ train / [0-9]+ val windows of 65 bytes\)" \
    "$work/run.out" || { cat "$work/run.out"; fail "no banner naming the text and its windows"; }
  run --devices 2 --batch-size 8 --ckpt-dir "$work/ddp" --metrics-file "$work/ddp.jsonl"
  close "$work/ddp" "$work/one" "2 ranks x 8 trained other weights than 1 rank x 16"
  # The independent reference: the same training in PyTorch alone (measured: 8.9e-7 from torch 2.15's
  # replay, 1.4e-6 from 1.13's; a replay with lr 0.31 or seed 8 is 0.39 or 1.5 away and fails).
  "$python" "$(dirname "$0")/gpt_fit_replay.py" "$work/book.txt" "$work/replay.safetensors" --devices 2 \
    --batch-size 8 --epochs 2 --batches 20 --seed 7 --lr 0.3 || fail "gpt_fit_replay.py failed"
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/ddp/final.safetensors" "$work/replay.safetensors" \
    || fail "the gpt weights are not the ones PyTorch alone trains (gpt_fit_replay.py)"
  check_metrics "$work/ddp.jsonl" 2 2 $((2 * 20 * 8)) $((2 * 4 * 8)) 0.1 64
  for strategy in zero1 zero2 fsdp; do
    run --devices 2 --batch-size 8 --ckpt-dir "$work/$strategy" --strategy "$strategy"
    close "$work/$strategy" "$work/ddp" "$strategy trained other gpt weights than ddp"
  done
  "$python" "$(dirname "$0")/check_safetensors.py" "$work/ddp/final.safetensors" "$work/ddp/final.pt" model=gpt ||
    fail "final.safetensors differs from final.pt"
  for strategy in ddp fsdp; do
    run --devices 2 --batch-size 8 --precision bf16-mixed --strategy "$strategy" --metrics-file "$work/bf_$strategy.jsonl"
    check_metrics "$work/bf_$strategy.jsonl" 2 2 $((2 * 20 * 8)) $((2 * 4 * 8)) 0.1 64
  done
  if [ -d /usr/share/games/fortunes ]; then
    "$lockstep" fit --model gpt --data text --devices 2 --max-epochs 1 --limit-train-batches 150 --limit-val-batches 20 \
      --batch-size 32 --lr 3e-3 --threads 1 --progress off >"$work/out" 2>&1 || { cat "$work/out"; fail "fit on fortunes failed"; }
    cat "$work/out"
    line=$(grep -E "^final val_loss [0-9.]+ perplexity [0-9.]+ \(unigram baseline [0-9.]+\), next-byte val_acc 0\.[0-9]+ over 1280 windows \(2 rank" "$work/out") \
      || fail "no final line with the perplexity and the baseline"
    read -r ppl baseline <<<"$(echo "$line" | sed -E 's/.*perplexity ([0-9.]+) \(unigram baseline ([0-9.]+)\).*/\1 \2/')"
    awk -v p="$ppl" -v b="$baseline" 'BEGIN { exit !(p < 0.9 * b) }' ||
      fail "perplexity $ppl does not beat the unigram baseline $baseline by 10%"
  else
    echo "fit_e2e[gpt_text]: /usr/share/games/fortunes missing (apt-get install fortunes): the default text is not tried"
  fi
  ;;
gpt_tp)
  # --tensor-parallel: the gpt split over 2 ranks (1 data-parallel group), and 2 data x 2 tensor parallel,
  # against 2 data-parallel ranks of the whole model on the same global batches. The unit tests compare
  # the weights in float64 (1e-12, test_trainer_tensor_parallel); here float32 processes must agree on
  # every epoch's losses and counts. The split sums in another order (an all-reduce of partial products),
  # which moves the losses by ~1e-7 (measured: 2.1e-7 at most); 1e-4 leaves room and still fails another
  # training (a run with --momentum 0.001 is 0.38 away).
  write_book
  run --devices 2 --batch-size 8 --metrics-file "$work/ddp.jsonl"
  run --devices 4 --tensor-parallel 2 --batch-size 8 --metrics-file "$work/dp2_tp2.jsonl"
  grep -q "on text .*, 2 data-parallel x 2 tensor-parallel rank(s) x batch 8" "$work/run.out" ||
    { cat "$work/run.out"; fail "no banner naming the mesh"; }
  run --devices 2 --tensor-parallel 2 --batch-size 16 --metrics-file "$work/dp1_tp2.jsonl"
  run --devices 2 --batch-size 8 --momentum 0.001 --metrics-file "$work/momentum.jsonl"
  check_metrics "$work/dp2_tp2.jsonl" 2 4 $((2 * 20 * 8)) $((2 * 4 * 8)) 0.1 64
  check_metrics "$work/dp1_tp2.jsonl" 2 2 $((2 * 20 * 8)) $((2 * 4 * 8)) 0.1 64
  same_losses "$work/dp2_tp2.jsonl" "$work/ddp.jsonl" 1e-4 || fail "2 x 2 tensor parallel trained other losses than ddp"
  same_losses "$work/dp1_tp2.jsonl" "$work/ddp.jsonl" 1e-4 || fail "1 x 2 tensor parallel trained other losses than ddp"
  ! same_losses "$work/momentum.jsonl" "$work/ddp.jsonl" 1e-4 || fail "the comparison cannot tell another training"
  # Clipping by the whole model's norm (0.3 clips most steps here): the same losses as ddp's clipped run,
  # which are not the unclipped run's. The split norm is summed in another order (in float64; ddp's in
  # float32), which moves each step's clip coefficient by ~1e-7 relative, and 40 SGD steps at lr 0.3 grow
  # that (measured: 3.6e-5 apart); 5e-4 still fails the unclipped run (0.29 away).
  run --devices 2 --batch-size 8 --gradient-clip-val 0.3 --metrics-file "$work/ddp_clip.jsonl"
  run --devices 4 --tensor-parallel 2 --batch-size 8 --gradient-clip-val 0.3 --metrics-file "$work/tp_clip.jsonl"
  same_losses "$work/tp_clip.jsonl" "$work/ddp_clip.jsonl" 5e-4 || fail "2 x 2 tensor parallel clipped otherwise than ddp"
  ! same_losses "$work/ddp_clip.jsonl" "$work/ddp.jsonl" 5e-4 || fail "--gradient-clip-val 0.3 clipped nothing"
  expect_failure 2 "--tensor-parallel 2 splits --model 'gpt' only, not 'mlp'" -- \
    "$lockstep" fit --model mlp --data synthetic --tensor-parallel 2 --devices 2
  expect_failure 2 "--tensor-parallel 2 does not divide --devices=3" -- "$lockstep" "${common[@]}" --devices 3 \
    --tensor-parallel 2
  # Checkpoints: one part per tensor-parallel rank (last.ckpt, last.ckpt.tp1.step-40-<save>, the save rank
  # 0's part names); final.safetensors holds the
  # model whole, on ddp's weights, and `lockstep export` puts the parts together into the same tensors;
  # resuming with another --tensor-parallel is refused.
  run --devices 4 --tensor-parallel 2 --batch-size 8 --ckpt-dir "$work/tp"
  [ -f "$work/tp/last.ckpt" ] && compgen -G "$work/tp/last.ckpt.tp1.step-40-*" >/dev/null && [ ! -e "$work/tp/final.pt" ] ||
    { ls -l "$work/tp"; fail "not the checkpoint parts expected"; }
  run --devices 2 --batch-size 8 --ckpt-dir "$work/ddp_ck"
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/tp/final.safetensors" \
    "$work/ddp_ck/final.safetensors" || fail "final.safetensors of 2 x 2 tensor parallel is not ddp's model"
  run --devices 4 --tensor-parallel 2 --batch-size 8 --ckpt-dir "$work/tp" --resume last
  grep -q "resumed from $work/tp/last.ckpt: epoch 2, batch 0, step 40" "$work/run.out" ||
    { cat "$work/run.out"; fail "no resume from both parts"; }
  expect_failure 1 "last.ckpt': written with --tensor-parallel 2, resumed with 1" -- "$lockstep" "${common[@]}" --devices 2 --ckpt-dir "$work/tp" \
    --resume last
  "$lockstep" export "$work/tp/last.ckpt" -o "$work/tp/joined.safetensors" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "lockstep export of the parts failed"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --exact "$work/tp/joined.safetensors" \
    "$work/tp/final.safetensors" || fail "lockstep export of the parts is not final.safetensors"
  ;;
gpt_pp)
  # --pipeline-parallel: the gpt cut into 2 stages (2 data x 2 pipeline, 1F1B, 4 micro-batches; 1 x 2 GPipe),
  # and into 4 stages, against 2 data-parallel ranks of the whole model on the same global batches. The unit
  # tests compare the weights in float64 (1e-12, test_trainer_pipeline_parallel); here float32 processes
  # must agree on every epoch's losses and counts. Micro-batches sum a batch's gradient in parts, which
  # moves the losses by rounding (~1e-7); 1e-4 leaves room and still fails another training (same_losses).
  write_book
  run --devices 2 --batch-size 8 --metrics-file "$work/ddp.jsonl" --ckpt-dir "$work/ddp"
  run --devices 4 --pipeline-parallel 2 --micro-batches 4 --batch-size 8 --metrics-file "$work/dp2_pp2.jsonl"
  grep -q "on text .*, 2 data-parallel x 2 pipeline-parallel rank(s) x batch 8" "$work/run.out" ||
    { cat "$work/run.out"; fail "no banner naming the mesh"; }
  run --devices 2 --pipeline-parallel 2 --micro-batches 2 --pipeline-schedule gpipe --batch-size 16 \
    --metrics-file "$work/dp1_pp2.jsonl"
  run --devices 4 --pipeline-parallel 4 --micro-batches 8 --batch-size 16 --metrics-file "$work/dp1_pp4.jsonl"
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --strategy zero1 \
    --metrics-file "$work/zero1_pp2.jsonl"
  run --devices 2 --batch-size 8 --momentum 0.001 --metrics-file "$work/momentum.jsonl"
  check_metrics "$work/dp2_pp2.jsonl" 2 4 $((2 * 20 * 8)) $((2 * 4 * 8)) 0.1 64
  check_metrics "$work/dp1_pp4.jsonl" 2 4 $((20 * 16)) $((4 * 16)) 0.1 64
  for run_name in dp2_pp2 dp1_pp2 dp1_pp4 zero1_pp2; do
    same_losses "$work/$run_name.jsonl" "$work/ddp.jsonl" 1e-4 || fail "$run_name trained other losses than ddp"
  done
  ! same_losses "$work/momentum.jsonl" "$work/ddp.jsonl" 1e-4 || fail "the comparison cannot tell another training"
  # Clipping by the whole model's norm (0.3 clips most steps here; the tied embedding counted once).
  run --devices 2 --batch-size 8 --gradient-clip-val 0.3 --metrics-file "$work/ddp_clip.jsonl"
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --gradient-clip-val 0.3 \
    --metrics-file "$work/pp_clip.jsonl"
  same_losses "$work/pp_clip.jsonl" "$work/ddp_clip.jsonl" 5e-4 || fail "2 x 2 pipeline clipped otherwise than ddp"
  ! same_losses "$work/ddp_clip.jsonl" "$work/ddp.jsonl" 5e-4 || fail "--gradient-clip-val 0.3 clipped nothing"
  expect_failure 2 "--pipeline-parallel 2 cuts a model built in stages, and --model 'cnn' is one" -- \
    "$lockstep" fit --model cnn --data synthetic --pipeline-parallel 2 --devices 2
  expect_failure 2 "--pipeline-parallel 2 does not divide --devices=3" -- "$lockstep" "${common[@]}" --devices 3 \
    --pipeline-parallel 2
  expect_failure 2 "--micro-batches 4 cuts a batch for a pipeline, and --pipeline-parallel is 1" -- \
    "$lockstep" "${common[@]}" --devices 2 --micro-batches 4
  # Checkpoints: one part per stage (last.ckpt, last.ckpt.tp1.step-40-<save>), each with the whole model;
  # final.safetensors is ddp's model (close), `lockstep export` of last.ckpt is final.safetensors exactly;
  # a resume goes on from both parts; resuming with another --pipeline-parallel is refused.
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --ckpt-dir "$work/pp"
  [ -f "$work/pp/last.ckpt" ] && compgen -G "$work/pp/last.ckpt.tp1.step-40-*" >/dev/null ||
    { ls -l "$work/pp"; fail "not the checkpoint parts expected"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --close "$work/pp/final.safetensors" \
    "$work/ddp/final.safetensors" || fail "final.safetensors of 2 x 2 pipeline is not ddp's model"
  "$lockstep" export "$work/pp/last.ckpt" -o "$work/pp/exported.safetensors" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "lockstep export of a pipeline checkpoint failed"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --exact "$work/pp/exported.safetensors" \
    "$work/pp/final.safetensors" || fail "lockstep export of last.ckpt is not final.safetensors"
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --ckpt-dir "$work/pp" --resume last
  grep -q "resumed from $work/pp/last.ckpt: epoch 2, batch 0, step 40" "$work/run.out" ||
    { cat "$work/run.out"; fail "no resume from both parts"; }
  # Stopped at step 30 (mid-epoch: each stage's part holds its SGD state) and resumed, the run ends on the
  # uninterrupted run's weights, bit for bit.
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --ckpt-dir "$work/pp_cut" --max-steps 30
  run --devices 4 --pipeline-parallel 2 --micro-batches 2 --batch-size 8 --ckpt-dir "$work/pp_cut" --resume last
  grep -q "resumed from $work/pp_cut/last.ckpt: epoch 1, batch 10, step 30" "$work/run.out" ||
    { cat "$work/run.out"; fail "no resume at step 30"; }
  "$python" "$(dirname "$0")/compare_safetensors.py" --exact "$work/pp_cut/final.safetensors" \
    "$work/pp/final.safetensors" || fail "stopped at step 30 and resumed, 2 x 2 pipeline ends elsewhere"
  expect_failure 1 "last.ckpt': written with --pipeline-parallel 2, resumed with 1" -- "$lockstep" "${common[@]}" \
    --devices 2 --ckpt-dir "$work/pp" --resume last
  ;;
pp_image)
  # --pipeline-parallel on the image models built in stages: mlp (2 data x 2 stages, 1F1B, 4 micro-batches)
  # gives ddp's epoch losses (float32: within 1e-4, as gpt_pp); resnet18, whose BatchNorm normalises each
  # micro-batch by its own statistics (so not ddp's step, as in PyTorch's pipelining), trains on 2 stages.
  common=(fit --data synthetic --synthetic-size 512 --model mlp --dropout 0 --seed 7 --progress off --threads 1
          --max-epochs 2 --batch-size 16 --lr-schedule constant)
  run --devices 2 --metrics-file "$work/ddp.jsonl"
  run --devices 4 --pipeline-parallel 2 --micro-batches 4 --metrics-file "$work/pp.jsonl"
  grep -q "2 data-parallel x 2 pipeline-parallel rank(s)" "$work/run.out" || { cat "$work/run.out"; fail "no mesh"; }
  same_losses "$work/pp.jsonl" "$work/ddp.jsonl" 1e-4 || fail "mlp on 2 x 2 pipeline trained other losses than ddp"
  "$lockstep" fit --data synthetic --synthetic-size 128 --model resnet18 --seed 7 --progress off --threads 1 \
    --max-epochs 1 --batch-size 16 --devices 2 --pipeline-parallel 2 --micro-batches 2 \
    --metrics-file "$work/resnet.jsonl" >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "resnet18 on 2 stages failed"; }
  check_metrics "$work/resnet.jsonl" 1 2 128 $((128 / 4)) 0.0
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "fit_e2e[$case_name]: ok"
