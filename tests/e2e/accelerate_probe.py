"""A Python Accelerate program that reports what it was launched with (tests/e2e/accelerate_launch.sh).

Each worker writes PREFIX.rank<RANK>.json: its whole environment, and what Hugging Face Accelerate's
Accelerator() (no arguments: every setting left to the launcher) made of it. The same program runs under
`accelerate launch` and under `lockstep launch` with the same flags, and the two are compared key by key.
"""
import json
import os
import sys

from accelerate import Accelerator


def main() -> int:
    prefix = sys.argv[1]
    accelerator = Accelerator()
    state = {
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
        "num_processes": accelerator.num_processes,
        "process_index": accelerator.process_index,
        "distributed_type": str(accelerator.distributed_type),
        "device": str(accelerator.device),
        "autocast": accelerator.native_amp,
    }
    with open(f"{prefix}.rank{os.environ.get('RANK', '0')}.json", "w") as out:
        json.dump({"env": dict(os.environ), "accelerator": state}, out, indent=1, sort_keys=True)
    accelerator.wait_for_everyone()
    print(f"probe rank {accelerator.process_index}/{accelerator.num_processes} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
