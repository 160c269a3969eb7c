#!/bin/bash
# gpu-check.sh: what only a GPU machine can prove (docs/gpu.md). Run on the lent GPU machine from the
# project's root, after ../shared/device/prepare.sh filled .device-carry/ here and the tree was sent along:
#
#   bash scripts/gpu-check.sh            # builds with .device-carry/build.sh unless build/ has lockstep
#
# Every step runs whatever the previous ones did; each writes its log under $OUT (the device tool brings it
# back; default ./gpu-check-out) and one line to $OUT/summary.txt: PASS/FAIL and its figures. Steps:
#   build, env, ctest -L cuda, fit (1 GPU; 2 ranks sharing it over gloo; 16-mixed; bf16-mixed;
#   --data-on-device; the refusal of 2 ranks on 1 GPU over nccl), W1 s/epoch against the bare LibTorch
#   loop on the GPU, ResNet18 ms/step against PyTorch (Python) on the same model shape.
set -uo pipefail
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
data=${DATA_DIR:-/tmp/data/fashion-mnist}
lockstep=build/lockstep
note() { echo "$*" | tee -a "$summary"; }
# step NAME CMD...: runs CMD with its output in $out/NAME.log; notes PASS or FAIL with the exit status.
step() {
  local name=$1
  shift
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    note "PASS $name ($((SECONDS - start)) s)"
  else
    note "FAIL $name (exit $?, $((SECONDS - start)) s): tail of $name.log:"
    tail -15 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"
  fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
epoch_s() { grep -o '"epoch_s": *[0-9.e+-]*' "$1" | sed 's/.*: *//' | tail -n +2 | median; }  # first epoch warms up
last_acc() { grep -o '"val_acc": *[0-9.e+-]*' "$1" | tail -1 | sed 's/.*: *//'; }

nvidia-smi -L >"$out/gpus.txt" 2>&1
note "device: $(head -1 "$out/gpus.txt")"
[ -x "$lockstep" ] || step build bash .device-carry/build.sh
step env "$lockstep" env --gpu
step ctest_cuda ctest --test-dir build -L cuda --output-on-failure
step test_comm_nccl build/tests/comm/test_comm --gtest_filter='Backends.*'

fit() { "$lockstep" fit --data-dir "$data" --model mlp --progress off --batch-size 64 --optimizer adam --lr 1e-3 \
  --lr-schedule constant "$@"; }
step fit_gpu fit --accelerator gpu --devices 1 --max-epochs 3 --metrics-file "$out/fit_gpu.jsonl"
step fit_data_on_device fit --accelerator gpu --devices 1 --max-epochs 3 --data-on-device \
  --metrics-file "$out/fit_dev.jsonl"
step fit_two_ranks_share_gpu fit --accelerator gpu --devices 2 --backend gloo --max-epochs 2 \
  --metrics-file "$out/fit_two.jsonl"
step fit_16_mixed fit --accelerator gpu --devices 1 --max-epochs 2 --precision 16-mixed --metrics-file "$out/fit_fp16.jsonl"
step fit_bf16_mixed fit --accelerator gpu --devices 1 --max-epochs 2 --precision bf16-mixed --metrics-file "$out/fit_bf16.jsonl"
refuse() { ! fit --accelerator gpu --devices 2 --max-epochs 1 --limit-train-batches 2 && grep -q "visible GPU" "$out/refuse_two_ranks_nccl.log"; }
step refuse_two_ranks_nccl refuse
step fit_cpu_reference fit --accelerator cpu --devices 1 --max-epochs 3 --threads 8 --metrics-file "$out/fit_cpu.jsonl"
for f in fit_gpu fit_dev fit_two fit_fp16 fit_bf16 fit_cpu; do
  [ -s "$out/$f.jsonl" ] && note "  $f: val_acc $(last_acc "$out/$f.jsonl"), epoch_s (median after the first) $(epoch_s "$out/$f.jsonl")"
done

# W1: the bare LibTorch loop on the GPU (data there, randperm, index_select), then lockstep fit, same run.
step w1_bare build/bench/bare_loop --data-dir "$data" --epochs 4 --device cuda
grep '"epoch_s"' "$out/w1_bare.log" >"$out/w1_bare.jsonl" 2>/dev/null
step w1_fit fit --accelerator gpu --devices 1 --max-epochs 4 --num-workers 1 --metrics-file "$out/w1_fit.jsonl"
step w1_fit_data_on_device fit --accelerator gpu --devices 1 --max-epochs 4 --data-on-device --metrics-file "$out/w1_dev.jsonl"
note "W1 s/epoch (median of epochs 2-4): bare loop $(epoch_s "$out/w1_bare.jsonl"), lockstep fit $(epoch_s "$out/w1_fit.jsonl"), with --data-on-device $(epoch_s "$out/w1_dev.jsonl") (targets: <= 1.2 s, >= the bare loop's speed)"

# ResNet18 (lockstep's CIFAR form, the same shape on both sides), ms/step at batch 32 and 256.
for b in 32 256; do
  step "resnet18_lockstep_b$b" build/bench/ddp_bench --mode bare --model resnet18 --device cuda --batch "$b" --steps 100 --warmup 20
  step "resnet18_python_b$b" python3 bench/resnet18_step.py --device cuda --batch "$b" --steps 100 --warmup 20
  note "ResNet18 batch $b ms/step: lockstep $(grep -o 'step_ms=[0-9.]*' "$out/resnet18_lockstep_b$b.log" | cut -d= -f2), PyTorch $(grep -o 'step_ms=[0-9.]*' "$out/resnet18_python_b$b.log" | cut -d= -f2)"
done
echo "gpu-check: summary in $summary"
