#!/usr/bin/env bash
# `lockstep launch` (accelerate launch's command line), with real processes.
#
#   accelerate_launch.sh CASE LOCKSTEP EXAMPLE TORCH_VERSION [PYTHON]
#
#   env           tests/e2e/accelerate_probe.py (a Python Accelerator() that leaves every setting to the
#                 launcher) under Accelerate's own launcher (python -m accelerate.commands.launch) and under
#                 lockstep launch, with the same flags, from the same minimal environment: every variable
#                 Accelerate's launcher gives a worker, lockstep launch gives too, with the same value, but
#                 for those listed below with the reason; and what the Python Accelerator made of them.
#                 Two launches: --multi_gpu (Accelerate's torchrun path) and --cpu (its one-process path).
#   seed_script   seed 000's accelerate launch line with `lockstep launch` for `accelerate launch`:
#                 `--num_processes=2 --mixed_precision=fp16 seed_train_accelerate.py` (the seed's script,
#                 torchvision's MNIST reading Fashion-MNIST) trains 2 epochs on 2 processes and saves.
#   cpp_bf16      examples/accelerate (C++, lockstep's Accelerator; sets no precision itself) under
#                 `lockstep launch --num_processes=2 --mixed_precision=bf16 --gradient_accumulation_steps=2`
#                 trains in bf16-mixed with 2 accumulation steps (its own line says so) and learns.
#   cpp_fp16      the same with --mixed_precision=fp16: LibTorch >= 2.5 trains in 16-mixed on the CPU
#                 (float16 autocast and the GradScaler) and learns; 1.13 fails with the error that says why.
#   cpp_own       --mixed_precision=fp16 for a program that sets its own precision (--mixed-precision bf16):
#                 the program's wins, as in Accelerate.
# TORCH_VERSION: the LibTorch of this build. PYTHON (env, seed_script): the python3 whose torch is this
# build's (LOCKSTEP_PYTHON), with Accelerate and torchvision (scripts/install-pip-torch.sh).
set -uo pipefail
case_name=$1 lockstep=$2 example=$3 torch_version=$4 python=${5:-python3}
here=$(cd "$(dirname "$0")" && pwd)
case $lockstep in */*) lockstep=$(cd "$(dirname "$lockstep")" && pwd)/$(basename "$lockstep") ;; esac
case $example in */*) example=$(cd "$(dirname "$example")" && pwd)/$(basename "$example") ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "accelerate_launch[$case_name]: $*" >&2; exit 1; }

# launch NAME FLAGS... -- CMD...: under Accelerate's launcher (NAME=accelerate) or lockstep launch
# (NAME=lockstep) from a minimal environment (HOME: an empty folder, so no accelerate config is read);
# output in $work/NAME.out.
launch() {
  local name=$1
  shift
  local base=(env -i PATH="$PATH" HOME="$work/home" LANG=C.UTF-8 PYTHON_EXEC="$python")
  mkdir -p "$work/home"
  if [ "$name" = accelerate ]; then
    "${base[@]}" "$python" -m accelerate.commands.launch "$@" >"$work/$name.out" 2>&1
  else
    "${base[@]}" "$lockstep" launch "$@" >"$work/$name.out" 2>&1
  fi
  local status=$?
  [ "$status" -eq 0 ] || { cat "$work/$name.out"; fail "$name exited with status $status: $*"; }
}

needs_python_accelerate() {
  "$python" -c 'import accelerate, torchvision' 2>/dev/null ||
    fail "$python has no accelerate or torchvision (scripts/install-pip-torch.sh installs both)"
}

# compare LAUNCH_NAME WORLD EXPECTED_STATE_JSON: the two launches' worker files, key by key.
compare() {
  "$python" - "$work" "$1" "$2" "$3" <<'PY' || fail "the $1 launches differ"
import json, sys
work, launch, world, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
# Set by both, with values that name one job or differ by design:
differ = {
    "MASTER_PORT": "a free port per single-machine job (Accelerate: 29500 unless that is taken)",
    "TORCHELASTIC_RUN_ID": "a random id per single-machine job (Accelerate's torchrun: none)",
    "TORCHELASTIC_USE_AGENT_STORE": "torchrun's agent serves the store; lockstep's rank 0 does (False)",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "each launcher's own: lockstep also forwards SIGUSR1 (Slurm's preemption "
                                      "notice)",
}
# Set by Accelerate's launcher, not by lockstep launch:
absent = {
    "TORCHELASTIC_ERROR_FILE": "torchrun's @record error files: lockstep launch writes them under --log_dir",
    "KMP_AFFINITY": "Accelerate's one-process CPU launch pins compactly; N workers would share the first cores",
    "KMP_BLOCKTIME": "as KMP_AFFINITY (Intel OpenMP's settings; LibTorch's OpenMP here is GNU's)",
}
# Set by lockstep launch only, with the value it must have:
extra = {
    "multi_gpu": {
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": ("3", "Accelerate hands --gradient_accumulation_steps to "
                                                   "DeepSpeed only; lockstep to every program"),
        "ACCELERATE_USE_CPU": ("True", "no GPU here: the Python Accelerator then joins the others over Gloo "
                               "(MULTI_CPU) instead of each worker training alone"),
    },
    "cpu": {},
}[launch]
bad = []
for rank in range(world):
    a = json.load(open(f"{work}/{launch}.accelerate.rank{rank}.json"))
    l = json.load(open(f"{work}/{launch}.lockstep.rank{rank}.json"))
    for key in sorted(a["env"]):
        if key in absent:
            continue
        if key not in l["env"]:
            bad.append(f"rank {rank}: accelerate launch sets {key}={a['env'][key]!r}, lockstep launch does not")
        elif a["env"][key] != l["env"][key] and key not in differ:
            bad.append(f"rank {rank}: {key}: accelerate launch {a['env'][key]!r}, lockstep launch {l['env'][key]!r}")
    for key, (value, _) in extra.items():
        if l["env"].get(key) != value:
            bad.append(f"rank {rank}: lockstep launch should set {key}={value!r}, got {l['env'].get(key)!r}")
    want = dict(expected, process_index=rank)
    if l["accelerator"] != want:
        bad.append(f"rank {rank}: the Python Accelerator under lockstep launch: {l['accelerator']}, expected {want}")
    for key in ("mixed_precision", "autocast"):
        if a["accelerator"][key] != l["accelerator"][key]:
            bad.append(f"rank {rank}: Accelerator().{key}: accelerate launch {a['accelerator'][key]!r}, "
                       f"lockstep launch {l['accelerator'][key]!r}")
    print(f"{launch} rank {rank}: {len(a['env'])} variables from accelerate launch, {len(l['env'])} from "
          f"lockstep launch; lockstep only: {sorted(set(l['env']) - set(a['env']))}")
    print(f"  Accelerator() under accelerate launch: {a['accelerator']}")
    print(f"  Accelerator() under lockstep launch:   {l['accelerator']}")
for line in bad:
    print(line, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# The C++ example on 2 processes, 2 epochs of 40 batches, under lockstep launch with FLAGS... [-- ARGS].
run_example() {
  local flags=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  "$lockstep" launch --num_processes=2 "${flags[@]}" "$example" --epochs 2 --limit-batches 40 "${args[@]}" \
    >"$work/out" 2>&1
}

expect_line() {
  grep -Eq -- "$1" "$work/out" || { cat "$work/out"; fail "output lacks /$1/"; }
}

case "$case_name" in
env)
  needs_python_accelerate
  probe=$here/accelerate_probe.py
  multi=(--multi_gpu --num_processes 2 --mixed_precision fp16 --gradient_accumulation_steps 3 --debug
         --num_cpu_threads_per_process 1)
  launch accelerate "${multi[@]}" "$probe" "$work/multi_gpu.accelerate"
  launch lockstep "${multi[@]}" "$probe" "$work/multi_gpu.lockstep"
  compare multi_gpu 2 '{"mixed_precision": "fp16", "gradient_accumulation_steps": 3, "num_processes": 2,
    "distributed_type": "DistributedType.MULTI_CPU", "device": "cpu:0", "autocast": false}'
  cpu=(--cpu --num_processes 1 --mixed_precision bf16 --num_cpu_threads_per_process 1)
  launch accelerate "${cpu[@]}" "$probe" "$work/cpu.accelerate"
  launch lockstep "${cpu[@]}" "$probe" "$work/cpu.lockstep"
  compare cpu 1 '{"mixed_precision": "bf16", "gradient_accumulation_steps": 1, "num_processes": 1,
    "distributed_type": "DistributedType.MULTI_CPU", "device": "cpu:0", "autocast": true}'
  ;;
seed_script)
  needs_python_accelerate
  [ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  mkdir -p "$work/data/MNIST/raw"
  for f in /usr/share/datasets/fashion-mnist/*-ubyte.gz; do
    gunzip -c "$f" >"$work/data/MNIST/raw/$(basename "$f" .gz)" || fail "cannot unpack $f"
  done
  # The seed's line, `accelerate` replaced by `lockstep` (and 2 processes for this 2-core machine).
  (cd "$work" && PYTHON_EXEC="$python" "$lockstep" launch --num_processes=2 --mixed_precision=fp16 \
    "$here/seed_train_accelerate.py" "$work/data" --epochs 2 --limit-batches 40 --save "$work/model.pt") \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "the seed's script failed under lockstep launch"; }
  cat "$work/out"
  # Python Accelerate on a CPU: fp16 is named, but it runs no autocast (accelerator.native_amp False).
  expect_line "^\[rank 0\] accelerator: 2 process\(es\), DistributedType.MULTI_CPU, mixed_precision fp16, device cpu"
  [ "$(grep -c '^\[rank 0\] Epoch [12]: loss=' "$work/out")" -eq 2 ] || fail "not two epoch lines from rank 0"
  ! grep -q '^\[rank 1\] Epoch' "$work/out" || fail "rank 1 printed an epoch line: not one job of 2 processes"
  "$python" - "$work/out" "$work/model.pt" <<'PY' || fail "the run did not learn, or saved no model"
import re, sys, torch
losses = [float(x) for x in re.findall(r"^\[rank 0\] Epoch \d+: loss=([0-9.]+)", open(sys.argv[1]).read(), re.M)]
assert losses[1] < losses[0], f"loss did not fall: {losses}"
state = torch.load(sys.argv[2])
assert sorted(state) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "fc3.bias", "fc3.weight"], sorted(state)
print(f"epoch losses {losses}; model.pt holds {sorted(state)}")
PY
  ;;
cpp_bf16)
  run_example --mixed_precision=bf16 --gradient_accumulation_steps=2 ||
    { cat "$work/out"; fail "examples/accelerate failed under lockstep launch"; }
  cat "$work/out"
  expect_line "^\[rank 0\] training on 2 process\(es\), 40 batches of 64 per process and epoch, precision bf16-mixed, gradient accumulation 2$"
  expect_line "^\[rank 0\] epoch 2: train_loss [0-9.]+ train_acc 0\.[5-9]"
  ;;
cpp_fp16)
  run_example --mixed_precision=fp16
  status=$?
  cat "$work/out"
  major=${torch_version%%.*} rest=${torch_version#*.}
  minor=${rest%%.*}
  if [ "$major" -gt 2 ] || { [ "$major" -eq 2 ] && [ "$minor" -ge 5 ]; }; then
    [ "$status" -eq 0 ] || fail "fp16 on the CPU failed with LibTorch $torch_version (>= 2.5: it should train)"
    expect_line "^\[rank 0\] training on 2 process\(es\), .*precision 16-mixed, gradient accumulation 1$"
    expect_line "^\[rank 0\] epoch 2: train_loss [0-9.]+ train_acc 0\.[5-9]"
  else
    [ "$status" -ne 0 ] || fail "fp16 on the CPU ran with LibTorch $torch_version, whose CPU autocast has no float16"
    expect_line "precision \"16-mixed\" \(fp16\) cannot run on device \"cpu\" with LibTorch [0-9.]+: its CPU autocast lowers to bfloat16 only"
    expect_line "the precision is the launcher's: ACCELERATE_MIXED_PRECISION"
  fi
  ;;
cpp_own)
  run_example --mixed_precision=fp16 -- --mixed-precision bf16 ||
    { cat "$work/out"; fail "examples/accelerate failed under lockstep launch"; }
  cat "$work/out"
  expect_line "^\[rank 0\] training on 2 process\(es\), .*precision bf16-mixed, gradient accumulation 1$"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "accelerate_launch[$case_name]: ok"
