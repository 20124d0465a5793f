"""An application that starts its own parallel job: word frequencies of text files.

    python examples/embedding/word_count.py README.md docs/*.md          # 4 ranks on this host
    python examples/embedding/word_count.py -n 8 --hosts a:4,b:4 *.txt    # over ssh

No `minimpi run`: the program calls ``minimpi.launch(count_words, n=..., args=...)``, which
starts the ranks (with the same agents, authentication, output forwarding and clean-up as
`minimpi run`), runs ``count_words`` in each and hands back every rank's return value. Each
rank counts the lines ``rank, rank + size, ...`` of the files, the counts are summed with
``comm.reduce`` (Counter + Counter) at rank 0. The program checks the
parallel answer against a serial count and exits non-zero if they differ.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys

import minimpi

WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


def count_lines(lines):
    return collections.Counter(w.lower() for line in lines for w in WORD.findall(line))


def count_words(paths):
    """Runs in every rank: count my share of the lines, sum the counts at rank 0.
    Returns (words this rank counted, the total Counter at rank 0 / None elsewhere)."""
    from minimpi import MPI
    comm = MPI.COMM_WORLD
    lines = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines += f.read().splitlines()
    mine = count_lines(lines[comm.rank::comm.size])
    print(f"counted {sum(mine.values())} words in {len(lines[comm.rank::comm.size])} lines")
    total = comm.reduce(mine, op=MPI.SUM, root=0)
    return sum(mine.values()), total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("-n", type=int, default=4, help="number of ranks (default 4)")
    p.add_argument("--hosts", help="e.g. a:4,b:4 (default: this host)")
    p.add_argument("--top", type=int, default=5)
    args = p.parse_args(argv)

    results = minimpi.launch(count_words, n=args.n, args=(args.files,), hosts=args.hosts)
    total = results[0][1]
    serial = collections.Counter()
    for path in args.files:
        with open(path, encoding="utf-8", errors="replace") as f:
            serial += count_lines(f.read().splitlines())
    if total != serial or sum(n for n, _ in results) != sum(serial.values()):
        print("parallel and serial counts differ", file=sys.stderr)
        return 1
    for word, n in total.most_common(args.top):
        print(f"{n:6d}  {word}")
    print(f"{sum(total.values())} words, {len(total)} distinct, counted by {args.n} ranks: "
          f"same as the serial count")
    return 0


if __name__ == "__main__":     # the ranks import this file to find count_words: guard main()
    sys.exit(main())
