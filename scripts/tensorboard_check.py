#!/usr/bin/env python3
"""tensorboard_check.py: TensorBoard itself reads the events file qlora-train writes (output.tensorboard: true).

Reads RUN_DIR/events.out.tfevents.* with tensorboard's EventAccumulator and checks every scalar against
RUN_DIR/metrics.jsonl: train/loss, train/lr, train/grad_norm at every step and eval/loss at every evaluation
equal the metrics as float32 holds them (2^-24 relative), train/tokens_per_s to 0.05, and the steps are the same. Installs the
`tensorboard` package with pip when it is missing (so it is not part of CI). Exit 1 on a mismatch.

    python3 scripts/tensorboard_check.py RUN_DIR
"""
import glob
import importlib
import json
import os
import subprocess
import sys


def accumulator_class():
    try:
        module = importlib.import_module("tensorboard.backend.event_processing.event_accumulator")
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "tensorboard"])
        module = importlib.import_module("tensorboard.backend.event_processing.event_accumulator")
    return module.EventAccumulator


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
    if not files:
        sys.exit(f"{run}: no events.out.tfevents.* (was the run made with output.tensorboard: true?)")
    expected = {"train/loss": {}, "train/lr": {}, "train/grad_norm": {}, "train/tokens_per_s": {}, "eval/loss": {}}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                for tag, key in [("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                                 ("train/tokens_per_s", "tokens_per_s")]:
                    expected[tag][m["step"]] = m[key]
            elif "eval_loss" in m:
                expected["eval/loss"][m["step"]] = m["eval_loss"]
    EventAccumulator = accumulator_class()
    failed, checked = 0, 0
    got = {tag: {} for tag in expected}
    for path in files:  # a resumed run writes one file per start
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        unknown = set(tags) - set(expected)
        if unknown:
            print(f"{path}: unexpected tags {sorted(unknown)}")
            failed += 1
        for tag in tags:
            for event in acc.Scalars(tag):
                got[tag][event.step] = event.value
    for tag, want in expected.items():
        if sorted(got[tag]) != sorted(want):
            print(f"{tag}: steps {sorted(got[tag])} in the events file, {sorted(want)} in metrics.jsonl")
            failed += 1
            continue
        for step, value in want.items():
            # float32 of the double: within 2^-24 of it, relative; metrics.jsonl's 9 digits: within 5e-9
            tol = 0.05 if tag == "train/tokens_per_s" else 6.5e-8 * abs(value)
            if abs(got[tag][step] - value) > tol:
                print(f"{tag} step {step}: {got[tag][step]!r} in the events file, {value!r} in metrics.jsonl")
                failed += 1
            checked += 1
    import tensorboard
    print(f"tensorboard {tensorboard.__version__}: {len(files)} events file(s), {checked} scalars checked, "
          f"{failed} mismatches")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
