#!/usr/bin/env python3
"""peer-bench-rows.py: the rows and the table of scripts/peer-bench.sh.

  peer-bench-rows.py RAW TYPE ROUND "MODES"
      prints one round's rows (engine, type, test, round, tok/s; tab
      separated) from llama-bench / llama-batched-bench JSONL (one file pair
      per llama.cpp load mode) and turnstile's decode.csv. Test names are
      normalised so both engines share them: pp512, tg, tg@d512, tgx8, tgx32.
  peer-bench-rows.py --table ROWS "TYPES" TG "MODES" SHAPE
      prints the Markdown table of medians and turnstile / llama.cpp ratios,
      one column per type and llama.cpp load mode.
"""
import csv
import json
import re
import statistics
import sys


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def engine(mode):
    return "llama.cpp" if mode == "mmap" else f"llama.cpp-{mode}"


def rows(raw, typ, rnd, modes):
    for mode in modes:
        eng = engine(mode)
        for j in jsonl(f"{raw}/lb-{mode}-{typ}-{rnd}.jsonl"):
            if j["n_gen"] == 0:
                name = f"pp{j['n_prompt']}"
            else:
                name = "tg" + (f"@d{j['n_depth']}" if j.get("n_depth", 0) else "")
            print(eng, typ, name, rnd, j["avg_ts"], sep="\t")
        for j in jsonl(f"{raw}/lbb-{mode}-{typ}-{rnd}.jsonl"):
            print(eng, typ, f"tgx{j['pl']}", rnd, j["speed_tg"], sep="\t")
    with open(f"{raw}/ts-{typ}-{rnd}/decode.csv") as f:
        for row in csv.DictReader(f):
            # tg64, tg64@d512, tg64x8 -> tg, tg@d512, tgx8
            test = re.sub(r"^tg\d+", "tg", row["test"])
            print("turnstile", typ, test, rnd, row["tokens_per_second"], sep="\t")


def table(path, types, tg, modes, shape):
    v = {}
    with open(path) as f:
        for line in f:
            eng, typ, test, _, tps = line.rstrip("\n").split("\t")
            v.setdefault((eng, typ, test), []).append(float(tps))
    tests = [("tg", f"decode tg{tg}, 1 sequence, from empty"),
             ("tg@d512", f"decode tg{tg} after a 512-token prompt"),
             ("tgx8", "batched decode, 8 sequences"), ("tgx32", "batched decode, 32 sequences"),
             ("pp512", "prefill 512, warm")]
    cols = [(t, m) for t in types for m in modes]
    label = lambda t, m: t.upper() + ("" if m == "mmap" else f" (llama.cpp {m})")
    print(f"| {shape}: tok/s, turnstile / llama.cpp (medians) | " + " | ".join(label(t, m) for t, m in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for test, name in tests:
        cells = []
        for t, m in cols:
            a, b = v.get(("turnstile", t, test)), v.get((engine(m), t, test))
            if not a or not b:
                cells.append("n/a")
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            cells.append(f"{ma / mb:.2f} ({ma:.1f} / {mb:.1f})")
        if any(c != "n/a" for c in cells):
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5].split(), sys.argv[6])
    else:
        rows(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split())
