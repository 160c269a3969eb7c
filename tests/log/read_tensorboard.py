#!/usr/bin/env python3
"""read_tensorboard.py WRITER DIR: runs WRITER DIR (write_tensorboard_events), then reads DIR's event file
with the tensorboard package's own reader (EventAccumulator) and checks that it holds exactly the scalars
DIR/expected.json lists: every tag, every step, each value (as float32) and each wall time."""
import json
import os
import socket
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as error:
    sys.exit(f"read_tensorboard: the tensorboard package is missing for {sys.executable} ({error}); "
             "install it: scripts/install-deps.sh (pip: tensorboard==2.21.0)")


def main():
    writer, out_dir = sys.argv[1], sys.argv[2]
    process = subprocess.Popen([writer, out_dir])
    assert process.wait() == 0, f"{writer} {out_dir} exited with {process.returncode}"
    with open(os.path.join(out_dir, "expected.json")) as f:
        expected = json.load(f)
    event_files = [n for n in os.listdir(out_dir) if n.startswith("events.out.tfevents.")]
    assert event_files == [expected["event_file"]], f"event files {event_files}, expected {expected['event_file']}"
    # events.out.tfevents.<unix_seconds>.<hostname>.<pid>.0, the seconds of the writer's (fake) clock
    name = f"events.out.tfevents.1764000000.{socket.gethostname()}.{process.pid}.0"
    assert event_files == [name], f"event file {event_files}, expected {name}"

    accumulator = EventAccumulator(out_dir, size_guidance={"scalars": 0})  # 0: keep every event
    accumulator.Reload()
    assert accumulator.file_version == 2.0, f"file_version {accumulator.file_version!r}, expected 2 (brain.Event:2)"
    by_tag = {}
    for scalar in expected["scalars"]:
        by_tag.setdefault(scalar["tag"], []).append(scalar)
    tags = sorted(accumulator.Tags()["scalars"])
    assert tags == sorted(by_tag), f"tags {tags}, expected {sorted(by_tag)}"
    checked = 0
    for tag, want in by_tag.items():
        got = accumulator.Scalars(tag)
        assert len(got) == len(want), f"{tag}: {len(got)} events, expected {len(want)}"
        for g, w in zip(got, want):
            assert g.step == w["step"], f"{tag}: step {g.step}, expected {w['step']}"
            # simple_value is a float32 and expected.json holds the float32 the writer stored: the reader
            # widens it to a double exactly, so they are equal, not merely close.
            assert g.value == w["value"], \
                f"{tag} at step {g.step}: value {g.value!r}, expected {w['value']!r}"
            assert g.wall_time == w["wall_time"], f"{tag} at step {g.step}: wall_time {g.wall_time!r}, " \
                f"expected {w['wall_time']!r}"
            checked += 1
    print(f"read_tensorboard: {checked} scalars of {len(by_tag)} tags read back by tensorboard "
          f"{__import__('tensorboard').__version__} as written")


if __name__ == "__main__":
    main()
