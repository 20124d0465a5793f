"""PNG plots of benchmarks/compare.py's results.json: one per test and p, log-log axes.

    python benchmarks/compare_plot.py compare-results/results.json compare-results/

Needs matplotlib, which is never a dependency of minimpi: compare.py runs this with a
Python that has it (its own, or the peers' plot virtualenv from peers/setup.sh). One line
per system (the median of its samples at each size); the machine's limits dashed.
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LIMIT_KEYS = ("sock-block", "sock-spin", "sock-stream", "memcpy")


def size_label(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def main(path: str, outdir: str) -> None:
    with open(path) as f:
        data = json.load(f)
    labels, titles = data["labels"], data["titles"]
    groups = {}                                  # (test, p) -> {system: {size: median}}
    for key, by_p in data["samples"].items():
        for p, by_test in by_p.items():
            for test, by_size in by_test.items():
                line = {int(s): statistics.median(v) for s, v in by_size.items() if v}
                if line:
                    groups.setdefault((test, int(p)), {})[key] = line
    order = list(labels)
    written = []
    for (test, p), lines in sorted(groups.items()):
        if all(len(v) < 2 for v in lines.values()):
            continue                             # a single size (e.g. p=32): no curve
        bandwidth = test == "bandwidth"
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for key in sorted(lines, key=order.index):
            pts = sorted(lines[key].items())
            xs = [s for s, _ in pts]
            ys = [v / 1e9 if bandwidth else v * 1e6 for _, v in pts]
            style = {"linestyle": "--", "linewidth": 1.2, "marker": "."} if key in LIMIT_KEYS \
                else {"linewidth": 2.0 if key.startswith("minimpi") else 1.4, "marker": "o",
                      "markersize": 3.5}
            ax.plot(xs, ys, label=labels.get(key, key), **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted({s for v in lines.values() for s in v})
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes], rotation=45, fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("message size")
        ax.set_ylabel("GB/s" if bandwidth else "us per call")
        ax.set_title(f"{titles.get(test, test)}, p = {p}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = os.path.join(outdir, f"{test}_p{p}.png")
        fig.savefig(name, dpi=110)
        plt.close(fig)
        written.append(os.path.basename(name))
    print(f"plots: {len(written)} PNGs in {outdir}: {', '.join(written)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
