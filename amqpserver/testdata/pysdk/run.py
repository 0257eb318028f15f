"""Runs every test_*.py module here side by side, each in its own process
(each test class starts its own broker on its own loopback address), and
prints each module's output in turn. Exits non-zero if any module fails.

    WALBUS_BIN=/path/to/walbus python3 run.py [-j N] [module ...]
"""

import argparse
import glob
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def run(module):
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "unittest", "-v", module], cwd=HERE,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return module, p.returncode, p.stdout, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=4, help="modules run at once")
    ap.add_argument("modules", nargs="*")
    args = ap.parse_args()
    modules = args.modules or sorted(os.path.basename(f)[:-3] for f in glob.glob(os.path.join(HERE, "test_*.py")))
    failed = []
    with ThreadPoolExecutor(args.j) as pool:
        for module, code, out, took in pool.map(run, modules):
            print(f"=== {module} ({took:.1f}s): {'ok' if code == 0 else 'FAILED'}")
            print(out)
            if code != 0:
                failed.append(module)
    if failed:
        print(f"FAILED: {' '.join(failed)}")
        sys.exit(1)
    print(f"all {len(modules)} modules passed")


if __name__ == "__main__":
    main()
