#!/usr/bin/env python3
"""Measures what two writers creating files in the same directories cost
against two writers each in directories of their own: the question behind
the order in which `put -r` writes a batch and `get -r` writes a tree's
groups (Store.orderedForWriting, TreeFetch.fetchGroups).

In each round, two processes create 20,000 files of 8 KiB in 200 new
directories, either taking every other file of every directory ("same")
or every other directory ("split"), then the files are deleted. Deleting
them is deliberate: ext4 creates files slowly for minutes after a mass
deletion, which is when the difference shows. The order of the two modes
alternates from round to round. Prints each round's times, then each
mode's median and the median of the per-round ratios split / same.

Usage: Tools/bench/directory-contention.py [rounds] [dir]   (8, a new
directory under /tmp)
"""
import os
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing import Process

DIRECTORIES, FILES = 200, 100
DATA = os.urandom(8192)


def writer(root, mode, part):
    for d in range(DIRECTORIES):
        if mode == "split" and d % 2 != part:
            continue
        for f in range(FILES):
            if mode == "same" and f % 2 != part:
                continue
            fd = os.open(f"{root}/d{d:03}/f{f:03}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, DATA)
            os.close(fd)


def run(root, mode):
    os.makedirs(root)
    for d in range(DIRECTORIES):
        os.mkdir(f"{root}/d{d:03}")
    start = time.monotonic()
    writers = [Process(target=writer, args=(root, mode, part)) for part in (0, 1)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
        if w.exitcode != 0:
            sys.exit(f"a writer failed ({mode})")
    elapsed = time.monotonic() - start
    shutil.rmtree(root)
    return elapsed


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    base = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="locker-contention.")
    times = {"same": [], "split": []}
    ratios = []
    for r in range(rounds):
        order = ("same", "split") if r % 2 == 0 else ("split", "same")
        got = {mode: run(f"{base}/{mode}{r}", mode) for mode in order}
        for mode in order:
            times[mode].append(got[mode])
        ratios.append(got["split"] / got["same"])
        print(f"round {r + 1}: same {got['same']:.2f} s, split {got['split']:.2f} s", flush=True)
    for mode in ("same", "split"):
        print(f"{mode}: median {statistics.median(times[mode]):.2f} s "
              f"({min(times[mode]):.2f}-{max(times[mode]):.2f})")
    print(f"split / same: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
          f"split took less in {sum(x < 1 for x in ratios)} of {rounds}")
    if len(sys.argv) <= 2:
        os.rmdir(base)


if __name__ == "__main__":
    main()
