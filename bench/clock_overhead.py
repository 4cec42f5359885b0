"""What the device clock (docs/device-clock.md) costs in host time on the demo model's greedy
decode: bench/decode_mode.py children with the clock on (the default) and with
NEURON_SIM_DEVICE_CLOCK=0, started in the order on, off, off, on (on a loaded machine the child
started first or second runs measurably slower: an on/off pair alone showed 5-7% between two
children with the clock off) and called in turn (these machines' speed drifts over seconds);
the median per setting over both of its children is printed. Not a test: timing only.

    .venv/bin/python bench/clock_overhead.py [--dtype bfloat16] [--tokens 32] [--calls 20]"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    children = []
    for clock in ("1", "0", "0", "1"):
        env = dict(os.environ, NEURON_SIM_DEVICE_CLOCK=clock)
        child = subprocess.Popen([sys.executable, os.path.join(HERE, "decode_mode.py"), "--dtype", args.dtype,
                                  "--tokens", str(args.tokens)], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"decode_mode.py with NEURON_SIM_DEVICE_CLOCK={clock} did not start")
        children.append((clock, child))
    seconds = {"1": [], "0": []}
    for call in range(args.calls):
        for clock, child in (children if call % 2 == 0 else children[::-1]):
            child.stdin.write("\n")
            child.stdin.flush()
            seconds[clock].append(float(child.stdout.readline().split()[0]))
    for _, child in children:
        child.stdin.close()
        child.wait()
    on, off = statistics.median(seconds["1"]), statistics.median(seconds["0"])
    print(f"demo decode, {args.tokens} tokens, {args.dtype}: clock on {on * 1e3:.1f} ms, off {off * 1e3:.1f} ms "
          f"per call (medians of {2 * args.calls} calls each); on/off {on / off:.4f}")


if __name__ == "__main__":
    main()
