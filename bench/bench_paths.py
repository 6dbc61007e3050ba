"""Benchmark: what the path policy costs a file read.

file_read resolves the path, checks it against the allowed folders and the secret rules,
then opens the file beneath its folder (openat2, or an O_NOFOLLOW walk) and re-checks it with
fstat. Baseline measured in the same run: a plain `open(path).read()` of the same file, which
checks nothing. Files: 1 KiB at depth 1 and at depth 8 (the walk opens one folder per level).

Run:  python bench/bench_paths.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def timed(fn, n: int) -> float:
    """Median microseconds per call over 5 batches of n."""
    fn()
    batches = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(batches)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    from jarvis.security import beneath
    from jarvis.security.paths import PathPolicy

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shallow = root / "a.txt"
        deep_dir = root.joinpath(*[f"d{i}" for i in range(7)])
        deep_dir.mkdir(parents=True)
        deep = deep_dir / "b.txt"
        for f in (shallow, deep):
            f.write_bytes(b"x" * 1024)
        policy = PathPolicy([root])

        def plain(p: Path):
            return lambda: open(p, "rb").read()  # noqa: SIM115

        print(f"{'file':<10} {'opener':<8} {'policy us':>10} {'plain open us':>14} {'ratio':>6}")
        for label, target in (("depth 1", shallow), ("depth 8", deep)):
            base = timed(plain(target), n)
            for opener in ("openat2", "walk"):
                beneath._openat2_ok = None if opener == "openat2" else False
                if opener == "openat2" and not beneath.openat2_supported():
                    continue
                cost = timed(lambda t=target: policy.read(str(t)), n)
                print(f"{label:<10} {opener:<8} {cost:>10.1f} {base:>14.1f} {cost / base:>5.1f}x")
        os.sync()


if __name__ == "__main__":
    main()
