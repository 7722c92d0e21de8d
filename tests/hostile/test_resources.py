"""Peak memory of a run (peak_memory.py, each side in a fresh process): ours at most 1.2x stock ORT's CPU EP."""
import json
import os
import subprocess
import sys

import pytest

from peak_memory import CASES

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peak_memory.py")


def peak_mib(side: str, case: str) -> float:
    out = subprocess.run([sys.executable, SCRIPT, side, case], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_needs_no_more_memory_than_stock(case):
    stock, ours = peak_mib("stock", case), peak_mib("ours", case)
    print(f"{case}: peak {ours} MiB, stock {stock} MiB ({ours / stock:.2f}x)")
    assert ours <= 1.2 * stock, f"{case}: a run peaks at {ours} MiB, stock ORT at {stock} MiB"
