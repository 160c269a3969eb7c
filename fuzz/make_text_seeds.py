#!/usr/bin/env python3
"""Writes the text and protocol seeds of fuzz/corpus (the binary ones: fuzz_make_seeds).

   fuzz/make_text_seeds.py LOCKSTEP_CLI CORPUS_DIR

Real files where lockstep writes them: a `lockstep fit` run with --logger csv,jsonl gives metrics.csv,
metrics.jsonl and hparams.yaml, and --print-config the YAML config; the rest are the formats' documented
shapes (the store protocol of src/comm/tcp_store_protocol.h, torchrun/Slurm/Open MPI/TF_CONFIG variables,
heartbeat lines).
"""
import json, os, shutil, struct, subprocess, sys, tempfile

cli, corpus = sys.argv[1], sys.argv[2]


def put(target, name, data):
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- a real run's files -----------------------------------------------------------------------------------
run = tempfile.mkdtemp()
flags = ["fit", "--data", "synthetic", "--synthetic-size", "256", "--batch-size", "32", "--model", "mlp",
         "--max-epochs", "2", "--logger", "csv,jsonl", "--log-every-n-steps", "2", "--progress", "off"]
config = subprocess.run([cli] + flags + ["--print-config"], cwd=run, check=True, capture_output=True).stdout
subprocess.run([cli] + flags, cwd=run, check=True, capture_output=True)
logs = os.path.join(run, "lightning_logs", "version_0")
put("fit_config", "print_config.yaml", config)
put("fit_config", "small.yaml", "model: cnn\nmax-epochs: 3\nlr: 0.01\nstrategy: zero1\nprecision: bf16-mixed\n")
put("fit_config", "lists.yaml", "devices: 2\nlogger: [csv, jsonl]\nsynthetic-shape: [3, 32, 32]\n")
put("metrics_csv", "metrics.csv", open(os.path.join(logs, "metrics.csv"), "rb").read())
put("metrics_jsonl", "metrics.jsonl", open(os.path.join(logs, "metrics.jsonl"), "rb").read())
put("hparams_yaml", "hparams.yaml", open(os.path.join(logs, "hparams.yaml"), "rb").read())
shutil.rmtree(run)

# --- environments -----------------------------------------------------------------------------------------
put("env", "torchrun.txt", "RANK=3\nLOCAL_RANK=1\nWORLD_SIZE=4\nLOCAL_WORLD_SIZE=2\nGROUP_RANK=1\n"
    "MASTER_ADDR=10.0.0.1\nMASTER_PORT=29500\nTORCHELASTIC_RUN_ID=job42\nTORCHELASTIC_RESTART_COUNT=1\n")
put("env", "slurm.txt", "SLURM_PROCID=5\nSLURM_LOCALID=1\nSLURM_NTASKS=8\nSLURM_NNODES=4\nSLURM_NODEID=2\n"
    "SLURM_JOB_ID=123456\nSLURM_STEP_ID=0\nSLURM_JOB_NODELIST=gpu[01-03,7],cpu-a1\n"
    "SLURM_STEP_NODELIST=node[001-004]\nSLURM_TASKS_PER_NODE=2(x4)\nSLURM_NTASKS_PER_NODE=2\n")
put("env", "ompi.txt", "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_RANK=1\n"
    "OMPI_COMM_WORLD_LOCAL_SIZE=2\nOMPI_COMM_WORLD_NODE_RANK=0\nOMPI_MCA_ess_base_jobid=4021092353\n"
    "MASTER_ADDR=node1\nLOCKSTEP_NNODES=2\n")
put("env", "tf_config.txt", "TF_CONFIG=" + json.dumps({"cluster": {"chief": ["host0:2222"],
    "worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 1}}) + "\n")

# --- heartbeat lines ----------------------------------------------------------------------------------------
put("heartbeat", "beats.txt", "0 0 0 -\n12 11 1 allreduce float32[4096]\n13 13 0 barrier\nbye\n")

# --- the store's frames (src/comm/tcp_store_protocol.h) --------------------------------------------------
def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def s(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack(">I", len(b)) + b


HELLO, SET, CAS, GET, ADD, DELETE, CHECK, NUMKEYS, WAIT, PROOF = range(1, 11)
hello = frame(bytes([HELLO]) + struct.pack(">II", 0x4C4B5354, 2) + s("fuzz") + struct.pack(">ii", 2, 1))
ops = (frame(bytes([SET]) + s("k") + s("v")) + frame(bytes([GET]) + s("k") + struct.pack(">q", 10))
       + frame(bytes([ADD]) + s("n") + struct.pack(">q", 5)) + frame(bytes([CAS]) + s("k") + s("v") + s("w"))
       + frame(bytes([CHECK]) + struct.pack(">I", 2) + s("k") + s("n")) + frame(bytes([NUMKEYS]))
       + frame(bytes([WAIT]) + struct.pack(">I", 1) + s("k") + struct.pack(">q", 10))
       + frame(bytes([DELETE]) + s("k")))
put("store", "hello_only.bin", b"\x00" + hello)
put("store", "hello_other_job.bin", b"\x00" + frame(bytes([HELLO]) + struct.pack(">II", 0x4C4B5354, 2)
    + s("other") + struct.pack(">ii", 3, 0)))
put("store", "ops_after_hello.bin", b"\x01" + ops)
put("store", "live_key.bin", b"\x01" + frame(bytes([SET]) + s("node/1/live") + s("x")))
put("store", "get_missing_key.bin", b"\x01" + frame(bytes([GET]) + s("absent") + struct.pack(">q", 50)))
put("store", "proof_wrong.bin", b"\x02" + frame(bytes([PROOF]) + s(b"n" * 32) + s(b"p" * 32)))
put("store", "proof_empty.bin", b"\x02" + frame(bytes([PROOF]) + s(b"") + s(b"")))
print("text seeds written under", corpus)
