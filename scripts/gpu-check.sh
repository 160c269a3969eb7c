#!/bin/bash
# gpu-check.sh: what only a GPU machine can prove (docs/gpu.md). Run on the lent GPU machine from the
# project's root, after ../shared/device/prepare.sh filled .device-carry/ here and the tree was sent along:
#
#   bash scripts/gpu-check.sh            # builds what it runs (build_targets) unless build/ has lockstep
#
# Every step runs whatever the previous ones did; each writes its log under $OUT (the device tool brings it
# back; default ./gpu-check-out) and one line to $OUT/summary.txt: PASS/FAIL and its figures. Steps:
#   build, env, ctest -L cuda, fit (1 GPU; 2 ranks sharing it over gloo; 16-mixed; bf16-mixed;
#   --data-on-device; the refusal of 2 ranks on 1 GPU over nccl), in-place recovery (3 ranks sharing the
#   GPU over gloo, one killed: tests/e2e/elastic_fit_e2e.sh), W1 s/epoch against the bare LibTorch
#   loop on the GPU, with and without --cuda-graphs, ResNet18 ms/step against PyTorch (Python) on the
#   same model shape. GPU_CHECK_QUICK=1 leaves out 16-mixed, bf16-mixed, the strategies and ResNet18;
#   GPU_CHECK_RESNET=0 only ResNet18.
set -uo pipefail
# The logs go to a folder of their own and come back as one archive (the device tool returns 8 files).
final=${OUT:-$PWD/gpu-check-out}
out=$(mktemp -d /tmp/gpu-check.XXXXXX)
mkdir -p "$final"
trap 'tar czf "$final/gpu-check-logs.tgz" -C "$out" . ; cp "$out/summary.txt" "$final/"' EXIT
summary=$out/summary.txt
: >"$summary"
data=${DATA_DIR:-/tmp/data/fashion-mnist}
lockstep=build/lockstep
note() { echo "$*" | tee -a "$summary"; }
# step NAME CMD...: runs CMD (at most STEP_TIMEOUT s, default 150: a hang costs device time, not the whole
# check) with its output in $out/NAME.log; notes PASS or FAIL with the exit status.
step() {
  local name=$1
  shift
  local start=$SECONDS
  if timeout -k 5 "${STEP_TIMEOUT:-150}" bash -c '"$@"' step "$@" >"$out/$name.log" 2>&1; then
    note "PASS $name ($((SECONDS - start)) s)"
  else
    note "FAIL $name (exit $?, $((SECONDS - start)) s): tail of $name.log:"
    tail -15 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"
  fi
}
export -f step note  # timeout runs each step's command in a new bash, which sees exported functions
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
epoch_s() { grep -o '"epoch_s": *[0-9.e+-]*' "$1" | sed 's/.*: *//' | tail -n +2 | median; }  # first epoch warms up
last_acc() { grep -o '"val_acc": *[0-9.e+-]*' "$1" | tail -1 | sed 's/.*: *//'; }

nvidia-smi -L >"$out/gpus.txt" 2>&1
note "device: $(head -1 "$out/gpus.txt")"
# .device-carry/build.sh's configure, then only the targets run below (the whole tree takes minutes more).
build_targets() {
  mkdir -p /tmp/deps /tmp/data/fashion-mnist
  for f in .device-carry/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
  cp .device-carry/data/*.gz /tmp/data/fashion-mnist/
  export CPLUS_INCLUDE_PATH=/tmp/deps/usr/include
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)');/tmp/deps/usr" &&
    cmake --build build -j16 --target lockstep_cli lockstep_fit_rank test_cuda bare_loop ddp_bench
}
export -f build_targets
export out summary data lockstep
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
[ -x "$lockstep" ] || STEP_TIMEOUT=400 step build build_targets
step env "$lockstep" env --gpu
# The CUDA tests, each case in a process of its own: a crash in one does not hide the others.
for case in $(build/tests/cuda/test_cuda --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'); do
  step "cuda_${case#Cuda.}" build/tests/cuda/test_cuda --gtest_filter="$case"
done

fit() { "$lockstep" fit --data-dir "$data" --model mlp --progress off --batch-size 64 --optimizer adam --lr 1e-3 \
  --lr-schedule constant "$@"; }
export -f fit
step fit_gpu fit --accelerator gpu --devices 1 --max-epochs 3 --metrics-file "$out/fit_gpu.jsonl"
step fit_data_on_device fit --accelerator gpu --devices 1 --max-epochs 3 --data-on-device \
  --metrics-file "$out/fit_dev.jsonl"
quick() { [ "${GPU_CHECK_QUICK:-0}" = 1 ]; }  # GPU_CHECK_QUICK=1: no 16/bf16 runs, strategies or ResNet18
quick || step fit_16_mixed fit --accelerator gpu --devices 1 --max-epochs 2 --precision 16-mixed --metrics-file "$out/fit_fp16.jsonl"
quick || step fit_bf16_mixed fit --accelerator gpu --devices 1 --max-epochs 2 --precision bf16-mixed --metrics-file "$out/fit_bf16.jsonl"
refuse() { ! fit --accelerator gpu --devices 2 --max-epochs 1 --limit-train-batches 2 && grep -q "visible GPU" "$out/refuse_two_ranks_nccl.log"; }
export -f refuse
step refuse_two_ranks_nccl refuse
# Two processes sharing the GPU over Gloo (DDP's CUDA buckets) train what one process trains on the same
# global batch (2 x 32 against 1 x 64; no dropout, so only the rounding may differ).
exact() { "$lockstep" fit --data-dir "$data" --model mlp --progress off --optimizer adam --lr 1e-3 \
  --lr-schedule constant --accelerator gpu --dropout 0 --max-epochs 1 --limit-train-batches 150 "$@"; }
export -f exact
step two_ranks_one_gpu exact --devices 2 --backend gloo --batch-size 32 --ckpt-dir "$out/two" --metrics-file "$out/fit_two.jsonl"
step one_rank_global_batch exact --devices 1 --batch-size 64 --ckpt-dir "$out/one"
step two_ranks_equal_one python3 tests/e2e/compare_safetensors.py --close "$out/two/final.safetensors" "$out/one/final.safetensors"
for f in fit_gpu fit_dev fit_two fit_fp16 fit_bf16; do
  [ -s "$out/$f.jsonl" ] && note "  $f: val_acc $(last_acc "$out/$f.jsonl"), epoch_s (median after the first) $(epoch_s "$out/$f.jsonl"), $(grep -o '"peak_cuda_mb": *[0-9.e+-]*' "$out/$f.jsonl" | tail -1)"
done

# In-place recovery with DDP's buckets on the GPU: 3 ranks sharing it over Gloo, rank 2 killed in epoch 2;
# the weights equal 3 ranks stopped at that step and resumed on 2 (and the same keeping the global batch).
for c in kill_rank2 kill_rank2_global; do
  step "elastic_fit_$c" env ELASTIC_FIT_FLAGS="--accelerator gpu --data-dir $data" \
    bash tests/e2e/elastic_fit_e2e.sh "$c" "$lockstep" python3
done

# Two GPUs or more (the lent machines so far have one): NCCL between two ranks, each on its GPU. 2 x batch 32
# trains what 1 x 64 trains; with --cuda-graphs too; a rank that hangs after step 3 is named by rank 0 within
# the collective timeout (--collective-timeout 20), and the job ends instead of hanging.
gpus=$(grep -c '^GPU ' "$out/gpus.txt")
if [ "$gpus" -ge 2 ]; then
  step nccl_two_gpus exact --devices 2 --batch-size 32 --ckpt-dir "$out/nccl2" --metrics-file "$out/fit_nccl2.jsonl"
  step nccl_two_gpus_equal_one python3 tests/e2e/compare_safetensors.py --close "$out/nccl2/final.safetensors" "$out/one/final.safetensors"
  step nccl_two_gpus_graphs exact --devices 2 --batch-size 32 --cuda-graphs --ckpt-dir "$out/nccl2g"
  step nccl_two_gpus_graphs_equal_one python3 tests/e2e/compare_safetensors.py --close "$out/nccl2g/final.safetensors" "$out/one/final.safetensors"
  hang() { ! LOCKSTEP_FAULT=1:3:hang timeout 120 "$lockstep" fit --data-dir "$data" --model mlp --progress off \
      --accelerator gpu --devices 2 --max-epochs 1 --collective-timeout 20 && grep -q "rank 1" "$out/nccl_timeout_names_rank.log"; }
  export -f hang
  step nccl_timeout_names_rank hang
else
  note "NCCL between two GPUs: not run ($gpus GPU visible; it needs 2)"
fi

# W1: the bare LibTorch loop on the GPU (data there, randperm, index_select; LibTorch's Adam, the issue's
# baseline, and lockstep's FusedAdam), then lockstep fit, in one run.
for o in torch fused; do
  step "w1_bare_$o" build/bench/bare_loop --data-dir "$data" --epochs 4 --device cuda --optimizer "$o"
  grep '"epoch_s"' "$out/w1_bare_$o.log" >"$out/w1_bare_$o.jsonl" 2>/dev/null
done
step w1_fit fit --accelerator gpu --devices 1 --max-epochs 4 --num-workers 1 --metrics-file "$out/w1_fit.jsonl"
step w1_fit_data_on_device fit --accelerator gpu --devices 1 --max-epochs 4 --data-on-device --metrics-file "$out/w1_dev.jsonl"
note "W1 s/epoch (median of epochs 2-4): bare loop $(epoch_s "$out/w1_bare_torch.jsonl") (with FusedAdam $(epoch_s "$out/w1_bare_fused.jsonl")), lockstep fit $(epoch_s "$out/w1_fit.jsonl"), with --data-on-device $(epoch_s "$out/w1_dev.jsonl") (targets: <= 1.2 s, >= the bare loop's speed)"
# The same with the step captured in a CUDA graph (--cuda-graphs): target <= 0.3 s/epoch, val_acc as without.
step w1_fit_graphs fit --accelerator gpu --devices 1 --max-epochs 4 --num-workers 1 --cuda-graphs --metrics-file "$out/w1_graphs.jsonl"
step w1_fit_graphs_data_on_device fit --accelerator gpu --devices 1 --max-epochs 4 --data-on-device --cuda-graphs \
  --metrics-file "$out/w1_graphs_dev.jsonl"
grep -h "cuda graphs" "$out/w1_fit_graphs.log" "$out/w1_fit_graphs_data_on_device.log" | sort -u | sed 's/^/  /' | tee -a "$summary"
note "W1 --cuda-graphs s/epoch (median of epochs 2-4): $(epoch_s "$out/w1_graphs.jsonl"), with --data-on-device $(epoch_s "$out/w1_graphs_dev.jsonl") (target: <= 0.3 s); val_acc $(last_acc "$out/w1_graphs.jsonl") / $(last_acc "$out/w1_graphs_dev.jsonl") against $(last_acc "$out/w1_fit.jsonl") without"
# NCCL's group is shut down before it is destroyed: LibTorch's warning about it must not appear.
if grep -l "destroy_process_group" "$out"/fit_gpu.log "$out"/w1_fit*.log >/dev/null 2>&1; then
  note "FAIL nccl_shutdown: a rank's log warns that the NCCL group was destroyed without shutdown"
else
  note "PASS nccl_shutdown: no destroy_process_group warning in the 1-GPU fit logs"
fi

# Sharded strategies on the GPU: two processes sharing it over Gloo, the wide MLP of docs/sharding.md.
for s in $(quick || echo ddp zero1 zero2 fsdp); do
  step "shard_$s" fit --accelerator gpu --devices 2 --backend gloo --strategy "$s" --mlp-hidden 4096,4096,4096 \
    --max-epochs 1 --limit-train-batches 40 --limit-val-batches 10 --metrics-file "$out/shard_$s.jsonl"
  [ -s "$out/shard_$s.jsonl" ] && note "  shard_$s: $(grep -o '"\(val_loss\|model_state_mb\|peak_rss_mb\|peak_cuda_mb\|epoch_s\)": *[0-9.e+-]*' "$out/shard_$s.jsonl" | tr '\n' ' ')"
done

quick && { note "16-mixed, bf16-mixed, the strategies and ResNet18: skipped (GPU_CHECK_QUICK=1)"; exit 0; }
[ "${GPU_CHECK_RESNET:-1}" = 0 ] && { note "ResNet18: skipped (GPU_CHECK_RESNET=0)"; exit 0; }
# ResNet18 (lockstep's CIFAR form, the same shape on both sides), ms/step at batch 32 and 256, three rounds
# in turn: ddp_bench with LibTorch's SGD and with lockstep's ForeachSgd, then PyTorch.
for round in 1 2 3; do
  for b in 32 256; do
    for o in torch lockstep; do
      timeout 60 build/bench/ddp_bench --mode bare --model resnet18 --device cuda --batch "$b" --steps 100 \
        --warmup 20 --optimizer "$o" >>"$out/resnet18_lockstep.log" 2>&1
    done
  done
  timeout 90 python3 bench/resnet18_step.py --device cuda --batch 32,256 --steps 100 --warmup 20 >>"$out/resnet18_python.log" 2>&1
done
ms() { grep "batch=$2 " "$out/$1" | grep -- "$3" | grep -o 'step_ms=[0-9.]*' | cut -d= -f2 | tr '\n' ' '; }
for b in 32 256; do
  note "ResNet18 batch $b ms/step (3 rounds): lockstep+ForeachSgd $(ms resnet18_lockstep.log $b optimizer=lockstep)| LibTorch SGD $(ms resnet18_lockstep.log $b optimizer=torch)| PyTorch $(ms resnet18_python.log $b python)"
done
echo "gpu-check: summary in $final/summary.txt, the logs in $final/gpu-check-logs.tgz"
