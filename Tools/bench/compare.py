#!/usr/bin/env python3
"""Helper for Tools/bench/compare.sh: dataset generation, statistics, table.

Subcommands:
  gen-text DIR FILE MIB SEED   text tree in DIR (files of 256 KiB..4 MiB) and
                               the same bytes as one FILE
  gen-small DIR COUNT SEED     COUNT files of 1..16 KiB, half text, half random
  report RESULTS KV            the Markdown report from the raw measurements
  median X...                  median, min and max
  order SEED TOOL...           the tools in a shuffled order, seeded by SEED

Everything generated is a function of the seed and of the text files found
under /usr/include and /usr/share (walked in sorted order).
"""
import os
import random
import statistics
import sys

SKIP_EXT = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".zip", ".png", ".jpg",
            ".jpeg", ".gif", ".ico", ".mo", ".ttf", ".otf", ".woff", ".pyc",
            ".so", ".a", ".db", ".gpg", ".pf2", ".bin", ".cache")
CORPUS_BYTES = 48 << 20


# Not peers but floors, measured in the same rounds.
FLOORS = ("plain", "disk")

def corpus(seed):
    """Text pieces (path, bytes) from /usr/include and /usr/share, shuffled."""
    pieces, total = [], 0
    for root in ("/usr/include", "/usr/share"):
        for d, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if total >= CORPUS_BYTES:
                    break
                if name.endswith(SKIP_EXT):
                    continue
                p = os.path.join(d, name)
                try:
                    if os.path.islink(p) or not os.path.isfile(p):
                        continue
                    size = os.path.getsize(p)
                    if size < 512 or size > (256 << 10):
                        continue
                    with open(p, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if b"\0" in data[:8192]:
                    continue
                pieces.append((p, data))
                total += len(data)
            if total >= CORPUS_BYTES:
                break
    if not pieces:
        sys.exit("compare.py: error: no text files found under /usr/include or /usr/share")
    random.Random(seed).shuffle(pieces)
    return pieces


def text_stream(seed):
    """Endless text: the corpus in seeded orders, each piece behind a unique
    header line, so no two stretches are identical (no deduplication) while
    LZ4's 64 KiB window sees ordinary text."""
    pieces = corpus(seed)
    rng = random.Random(seed + 1)
    seq = 0
    while True:
        order = list(range(len(pieces)))
        rng.shuffle(order)
        for i in order:
            path, data = pieces[i]
            seq += 1
            yield ("\n==> %s (part %d) <==\n" % (path, seq)).encode() + data


def gen_text(outdir, outfile, mib, seed):
    total = mib << 20
    rng = random.Random(seed)
    stream = text_stream(seed)
    buf = bytearray()
    written, n = 0, 0
    os.makedirs(outdir, exist_ok=True)
    with open(outfile, "wb") as big:
        while written < total:
            # log-uniform sizes between 256 KiB and 4 MiB
            size = int(2 ** rng.uniform(18, 22))
            size = min(size, total - written)
            while len(buf) < size:
                buf += next(stream)
            chunk, buf = bytes(buf[:size]), buf[size:]
            sub = os.path.join(outdir, "d%02d" % (n % 16))
            os.makedirs(sub, exist_ok=True)
            with open(os.path.join(sub, "t%05d.txt" % n), "wb") as f:
                f.write(chunk)
            big.write(chunk)
            written += size
            n += 1
    print("%d files" % n)


def gen_small(outdir, count, seed):
    rng = random.Random(seed)
    stream = text_stream(seed + 7)
    buf = bytearray()
    for i in range(count):
        sub = os.path.join(outdir, "a%02d" % (i % 20), "b%d" % ((i // 20) % 10))
        os.makedirs(sub, exist_ok=True)
        size = rng.randint(1024, 16384)
        if i % 2 == 0:
            while len(buf) < size:
                buf += next(stream)
            data, buf = bytes(buf[:size]), buf[size:]
            name = "f%05d.txt" % i
        else:
            data = rng.randbytes(size)
            name = "f%05d.bin" % i
        with open(os.path.join(sub, name), "wb") as f:
            f.write(data)


# ---------------------------------------------------------------- report

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_s(x):
    if x != x:
        return "–"
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    if x >= 0.1:
        return "%.2f" % x
    return "%.3f" % x


def load_results(path):
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            p = line.rstrip("\n").split("\t")
            rows.append(dict(ds=p[0], op=p[1], tool=p[2], run=int(p[3]),
                             bytes=int(p[4]), wall=float(p[5]),
                             user=float(p[6]), sys=float(p[7]),
                             rss=int(p[8]), auser=float(p[9]),
                             asys=float(p[10]), arss=int(p[11])))
    return rows


def load_kv(path):
    kv = {}
    with open(path) as f:
        for line in f:
            if "\t" in line:
                k, v = line.rstrip("\n").split("\t", 1)
                kv[k] = v
    return kv


def cells(rows):
    """{(ds, op): {tool: [rows of counted runs]}} in first-seen order."""
    out = {}
    for r in rows:
        if r["run"] == 0 or r["ds"] == "big":
            continue
        out.setdefault((r["ds"], r["op"]), {}).setdefault(r["tool"], []).append(r)
    return out


def stats(cell):
    """Per tool: median wall, min, max, MB/s, user, sys, rss KiB, agent rss
    KiB, and for peers the per-pair ratios peer/locker."""
    lk = {r["run"]: r for r in cell.get("locker", [])}
    st = {}
    for t, rs in cell.items():
        walls = [r["wall"] for r in rs]
        m = med(walls)
        d = dict(med=m, lo=min(walls), hi=max(walls),
                 mbs=rs[0]["bytes"] / 1e6 / m if m > 0 else float("nan"),
                 user=med([r["user"] + r["auser"] for r in rs]),
                 sys=med([r["sys"] + r["asys"] for r in rs]),
                 rss=max(r["rss"] for r in rs),
                 arss=max(r["arss"] for r in rs), n=len(rs))
        if t != "locker":
            d["ratios"] = [r["wall"] / lk[r["run"]]["wall"] for r in rs
                           if r["run"] in lk and lk[r["run"]]["wall"] > 0]
            d["speedup"] = med(d["ratios"])
        st[t] = d
    return st


def report(results, kvpath):
    rows = load_results(results)
    kv = load_kv(kvpath)
    g = lambda k, d="–": kv.get(k, d)
    fl = lambda k: float(kv[k]) if k in kv else float("nan")
    P = print
    P("# Locker compared with other encrypting tools")
    P()
    P("Run from %s to %s (%s)." % (g("start"), g("end"), g("options")))
    if "skipped" in kv:
        P("Skipped: %s." % kv["skipped"])
    for k in sorted(k for k in kv if k.startswith("kept.")):
        P("Dataset %s: %s." % (k[5:], "every round kept until the run ended (no deletion between measurements)"
                                if kv[k] == "1" else "each round deleted after it (not ext4, or for want of "
                                "disk space or inodes); on ext4 file creation may have been slow in the next"))
    P()
    P("## Machine")
    P()
    P("| | |")
    P("|---|---|")
    for k, label in (("cpu", "CPU"), ("nproc", "cores (nproc)"), ("ram", "RAM"),
                     ("os", "OS"), ("kernel", "kernel"),
                     ("fs", "file system of the temporary directory"),
                     ("load", "load average at start")):
        P("| %s | %s |" % (label, g(k)))
    for k in sorted(kv):
        if k.startswith("v."):
            P("| %s | %s |" % (k[2:], kv[k]))
    P()
    P("## Limits of this machine")
    P()
    P("| measurement | result |")
    P("|---|---|")
    P("| AES-256-GCM, 16 KiB blocks, one core (`openssl speed -evp aes-256-gcm`) | %s MB/s |" % g("gcm1"))
    if "gcm2" in kv:
        P("| AES-256-GCM, 16 KiB blocks, `-multi 2` | %s MB/s |" % g("gcm2"))
    P("| LZ4 level 1 on a sample of the text set (`lz4 -b1`), one core | compress %s MB/s, decompress %s MB/s, ratio %s |"
      % (g("lz4c"), g("lz4d"), g("lz4ratio")))
    P("| `lz4 -1` ratio of the whole text set | %sx |" % g("text_ratio"))
    P("| memory write (memset of 256 MiB, one core) | %s MB/s |" % g("mem"))
    if "pc_new" in kv:
        P("| write into new page-cache pages (512 MiB `dd` to tmpfs, first write) | %s MB/s |" % g("pc_new"))
        P("| overwrite of existing page-cache pages (the same, `conv=notrunc`) | %s MB/s |" % g("pc_old"))
    P("| disk write, 1 GiB with fsync (`dd conv=fsync`) | %s MB/s |" % g("disk"))
    if "damon" in kv:
        P("| DAMON proactive reclaim (kdamond) | %s |" % g("damon"))
    if "rss_c" in kv:
        P("| peak RSS of a C program that does nothing (`true`) | %.1f MiB |" % (float(kv["rss_c"].split()[0]) / 1024))
    if "rss_swift" in kv:
        P("| peak RSS of a Swift program that prints one line, built here with `swiftc -O -static-stdlib` (runtime and Foundation linked in; relocations packed where GNU ld can, as Locker's) | %.1f MiB |"
          % (float(kv["rss_swift"].split()[0]) / 1024))
    if "rss_swift_crypto" in kv:
        P("| peak RSS of a Swift program that seals one 64 KiB block with AES-256-GCM through libcrypto, built the same way without Foundation | %.1f MiB |"
          % (float(kv["rss_swift_crypto"].split()[0]) / 1024))
    P()
    cs = cells(rows)
    nruns = max([len(rs) for c in cs.values() for rs in c.values()] or [0])
    P("## Store and fetch")
    P()
    P("Median of %d runs after one warm-up run; MB/s is plaintext MB (10^6 bytes) "
      "per second of median wall time. Speedup is Locker's, the median of the per-round "
      "ratios (peer time / Locker time), with their min–max. CPU times include the "
      "helper process that does part of the work (Locker's agent, the gocryptfs daemon); "
      "peak RSS is the command's largest process (for a pipeline, its largest stage), "
      "with the helper's peak after \"+\"." % nruns)
    P()
    P("`plain` is not a peer but a floor: the same files copied with `tar`, two pipelines at "
      "once over alternate top-level directories (a `cp` for one file), and synced, with no "
      "compression or encryption, one file per file.")
    if kv.get("cold") == "1":
        P()
        P("Every fetch here, of every tool and of `disk`, ran with a cold page cache "
          "(`--cold`): `sync`, then `echo 3 > /proc/sys/vm/drop_caches`, right before it, so "
          "each read its store from the disk, whatever its store's writer had left in memory. "
          "The stores that followed read their sources from the disk too, so only the fetches "
          "compare with a run without `--cold`.")
    if any(r["tool"] == "disk" for r in rows):
        P()
        P("`disk` is the floor of Locker's own fetch of a few large objects, measured right "
          "after it in each round: the disk's time for the same I/O with no decompression or "
          "decryption. `dd` reads the data files Locker's fetch read, past the page cache "
          "(`iflag=direct`), then writes as many bytes as the fetch wrote, past the page "
          "cache (`oflag=direct conv=fsync`). Its speedup is disk time / Locker time.")
    P()
    P("| dataset | op | tool | median s | MB/s | min–max s | user CPU s | sys CPU s | peak RSS MiB | Locker speedup |")
    P("|---|---|---|---|---|---|---|---|---|---|")
    allst = {}
    for (ds, op), cell in cs.items():
        st = stats(cell)
        allst[(ds, op)] = st
        order = sorted(st, key=lambda t: (t != "locker", st[t]["med"]))
        for t in order:
            d = st[t]
            rss = "%.0f" % (d["rss"] / 1024)
            if d["arss"]:
                rss += " (+%.0f)" % (d["arss"] / 1024)
            if t == "locker":
                sp = "—"
            else:
                sp = ("%.2fx (%.2f–%.2f)" % (d["speedup"], min(d["ratios"]), max(d["ratios"]))
                      if d["ratios"] else "–")
            P("| %s | %s | %s | %s | %.0f | %s–%s | %s | %s | %s | %s |" % (
                ds, op, t, fmt_s(d["med"]), d["mbs"], fmt_s(d["lo"]), fmt_s(d["hi"]),
                fmt_s(d["user"]), fmt_s(d["sys"]), rss, sp))
    P()
    P("## Locker only")
    P()
    P("| measurement | result |")
    P("|---|---|")
    if "range.full" in kv:
        f, r = kv["range.full"].split(), kv["range.part"].split()
        P("| get of the whole text object (to /dev/null) | %s s (%s–%s) |" % tuple(fmt_s(float(x)) for x in f))
        P("| ranged get of 1 MiB from its middle (`--range`) | %s s (%s–%s); %.0fx faster |"
          % (tuple(fmt_s(float(x)) for x in r) + (float(f[0]) / float(r[0]),)))
    for op in ("setclass", "passwd"):
        if op + ".small" in kv:
            s, l = float(kv[op + ".small"].split()[0]), float(kv[op + ".large"].split()[0])
            P("| `%s`, store with 1 MiB vs %s MiB | %.3f s vs %.3f s (ratio %.2f) |"
              % (op, g("rewrap_mib"), s, l, l / s))
    if "unlock" in kv:
        P("| unlock latency (`lock --now`, then `unlock --passcode-stdin`) | %s s (%s–%s) |"
          % tuple(fmt_s(float(x)) for x in kv["unlock"].split()))
    big = [r for r in rows if r["ds"] == "big"]
    for r in big:
        P("| %s of one %.0f GiB incompressible object | %.1f s wall (%.0f MB/s), %.1f s user, "
          "peak RSS %.1f MiB CLI, %.1f MiB agent |" % (
              r["op"], r["bytes"] / 2**30, r["wall"], r["bytes"] / 1e6 / r["wall"],
              r["user"] + r["auser"], r["rss"] / 1024, r["arss"] / 1024))
    calls = (("ls", "`locker status`"), ("lp", "`locker put` of a 1-byte file"),
             ("lg", "`locker get` of a 1-byte object"), ("rs", "`restic snapshots`"),
             ("rb", "`restic backup` of a 1-byte file"), ("bl", "`borg list`"),
             ("bc", "`borg create` of a 1-byte file"))
    for k, label in calls:
        if "call." + k in kv:
            P("| per call: %s | %s s (%s–%s) |" % ((label,) + tuple(
                fmt_s(float(x)) for x in kv["call." + k].split())))
    P()
    # CPU limit: user CPU per GiB of a text put vs lz4 compression + GCM of
    # the compressed bytes, from this machine's single-core figures.
    P("## CPU cost against the machine's limits")
    P()
    cpu_ratio = float("nan")
    try:
        lc, ld, g1 = fl("lz4c"), fl("lz4d"), fl("gcm1")
        rt = fl("text_ratio")
        gib = 2**30 / 1e6
        pred_put = gib / lc + gib / rt / g1
        pred_get = gib / ld + gib / rt / g1
        P("| operation | Locker user+sys CPU s per GiB | user CPU s per GiB | predicted (LZ4 + AES-GCM) s per GiB | user / predicted |")
        P("|---|---|---|---|---|")
        for ds in ("text-file", "text-tree"):
            for op, pred in (("put", pred_put), ("get", pred_get)):
                st = allst.get((ds, op), {}).get("locker")
                if not st:
                    continue
                b = cs[(ds, op)]["locker"][0]["bytes"] / 2**30
                u = st["user"] / b
                ratio = u / pred
                if ds == "text-file" and op == "put":
                    cpu_ratio = ratio
                P("| %s %s | %.2f | %.2f | %.2f | %.2f |" % (ds, op, (st["user"] + st["sys"]) / b, u, pred, ratio))
        P()
        P("Predicted = GiB / LZ4 compress (or decompress) speed + (GiB / lz4 ratio) / "
          "AES-256-GCM speed, single core, from the limits above.")
    except (KeyError, ValueError, ZeroDivisionError):
        P("(limits missing)")
    P()
    # targets
    P("## Targets")
    P()
    P("| target | measured | met |")
    P("|---|---|---|")
    yes = lambda ok: "yes" if ok else "**no**"

    def floor_row(ds, st, need):
        """For a missed target: the time it needs against the floor measured
        in the same rounds, which no design of the same shape gets under."""
        if ds == "small" and "plain" in st:
            # Could anything that writes one file per file meet it? The
            # plain copy does no more than that.
            fl, what, why = st["plain"]["med"], "a plain copy (two tar pipelines, no encryption) of the same files", "for one file per file"
        elif "disk" in st:
            fl, what, why = (st["disk"]["med"], "the disk alone, for the same reads and writes (`disk`)",
                             "while the object is read from the disk")
            if "call.lg" in kv:
                # No fetch does its I/O before it has started and asked the
                # agent for the object's key, or is done before its output
                # is synced and in place: Locker's fixed cost for a fetch
                # (a get of one byte, measured in the same run) comes on
                # top of the disk's time.
                fixed = float(kv["call.lg"].split()[0])
                # Three decimals: the two sides are often within 0.01 s.
                P("| … needs %.3f s; %s takes %.3f s, and %.3f s with a fetch's fixed cost "
                  "(`locker get` of one byte, %.3f s) | %s | – |"
                  % (need, what, fl, fl + fixed, fixed,
                     "out of reach " + why if fl + fixed > need else "within reach"))
                return
        else:
            return
        P("| … needs %s s; %s takes %s s | %s | – |"
          % (fmt_s(need), what, fmt_s(fl), "out of reach " + why if fl > need else "within reach"))
    for ds in ("text-tree", "text-file", "random", "small"):
        for op in ("put", "get"):
            st = allst.get((ds, op))
            if not st:
                continue
            peers = [t for t in st if t not in ("locker",) + FLOORS]
            want = ["restic", "borg"] if (ds == "small" or op == "put") else ["restic"]
            for t in want:
                if t in st:
                    v = st[t]["speedup"]
                    P("| %s %s ≥ 2x %s | %.2fx | %s |" % (ds, op, t, v, yes(v >= 2)))
                    if v < 2:
                        floor_row(ds, st, st[t]["med"] / 2)
            if ds != "small" and peers:
                fastest = min(peers, key=lambda t: st[t]["med"])
                v = st[fastest]["speedup"]
                P("| %s %s ≥ 1.5x the fastest peer (%s) | %.2fx | %s |" % (ds, op, fastest, v, yes(v >= 1.5)))
                if v < 1.5:
                    floor_row(ds, st, st[fastest]["med"] / 1.5)
    for k, label in (("ls", "locker status"), ("lp", "locker put, 1 byte")):
        if "call." + k in kv:
            v = float(kv["call." + k].split()[0])
            P("| per-call cost ≤ 0.05 s: %s | %.3f s | %s |" % (label, v, yes(v <= 0.05)))
    if cpu_ratio == cpu_ratio:
        P("| text put user CPU ≤ 1.5x LZ4 + AES-GCM cost | %.2fx | %s |" % (cpu_ratio, yes(cpu_ratio <= 1.5)))
    worst = max(((d["rss"], ds, op) for (ds, op), st in allst.items()
                 for t, d in st.items() if t == "locker"), default=None)
    big_rss = max([r["rss"] for r in big] or [0])
    if worst:
        top = max(worst[0], big_rss)
        P("| Locker CLI peak RSS ≤ 64 MiB (all cells%s) | %.1f MiB | %s |"
          % (" and the large object" if big else "", top / 1024, yes(top <= 64 * 1024)))
        agent = max([d["arss"] for st in allst.values() for t, d in st.items() if t == "locker"]
                    + [r["arss"] for r in big])
        P("| Locker CLI + agent peak RSS ≤ 64 MiB | %.1f MiB | %s |"
          % ((top + agent) / 1024, yes(top + agent <= 64 * 1024)))
        lower = {}
        # Of the cells where a peer is lower, those where it is lower than
        # two of the floor program (CLI and agent, each a Swift process on
        # libcrypto): no Locker built that way could get under it there.
        under_floor = {}
        floor2 = 2 * float(kv["rss_swift_crypto"].split()[0]) if "rss_swift_crypto" in kv else None
        ncell = 0
        for (ds, op), st in allst.items():
            if "locker" not in st:
                continue
            ncell += 1
            lt = st["locker"]["rss"] + st["locker"]["arss"]
            for t, d in st.items():
                if t not in ("locker",) + FLOORS and d["rss"] + d["arss"] < lt:
                    lower[t] = lower.get(t, 0) + 1
                    if floor2 is not None and d["rss"] + d["arss"] < floor2:
                        under_floor[t] = under_floor.get(t, 0) + 1
        P("| Locker CLI + agent peak RSS below every peer's (largest process + helper), every cell | %s | %s |"
          % ("; ".join("%s lower in %d of %d cells" % (t, n, ncell) for t, n in sorted(lower.items()))
             if lower else "below in all %d cells" % ncell, yes(not lower)))
        if lower and floor2 is not None:
            for t, n in sorted(lower.items()):
                m = under_floor.get(t, 0)
                verdict = ("out of reach for a CLI and an agent in Swift on libcrypto" if m == n
                           else "within reach in %d of the %d cells" % (n - m, n))
                P("| … %s: in %d of its %d lower cells it takes less than two of the floor program (%.1f MiB) | %s | – |"
                  % (t, m, n, floor2 / 1024, verdict))
    for op in ("setclass", "passwd"):
        if op + ".small" in kv:
            s, l = float(kv[op + ".small"].split()[0]), float(kv[op + ".large"].split()[0])
            ok = abs(l - s) <= 0.01 or 0.8 <= l / s <= 1.25
            P("| `%s` time the same at 1 MiB and %s MiB (ratio 0.8–1.25 or within 10 ms) | %.2f | %s |"
              % (op, g("rewrap_mib"), l / s, yes(ok)))


def median_cmd(values):
    xs = [float(v) for v in values]
    print("%.4f %.4f %.4f" % (med(xs), min(xs), max(xs)))


def order_cmd(seed, tools):
    """One round's running order: a shuffle seeded by a string (the
    dataset and round), the same on every rerun."""
    tools = list(tools)
    random.Random(seed).shuffle(tools)
    print(" ".join(tools))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "gen-text":
        gen_text(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "gen-small":
        gen_small(args[0], int(args[1]), int(args[2]))
    elif cmd == "report":
        report(args[0], args[1])
    elif cmd == "median":
        median_cmd(args)
    elif cmd == "order":
        order_cmd(args[0], args[1:])
    else:
        sys.exit("compare.py: error: unknown subcommand %r" % cmd)


if __name__ == "__main__":
    main()
