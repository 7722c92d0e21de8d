"""Every ONNX backend node test case through our EP, CPU fallback disabled, next to stock ORT.

Per case (onnxruntime_ep_seamless.tools.conformance.run_case): stock ORT's CPU EP runs it (its
outcome is recorded for the report); our EP's session is created with fallback disabled
(parity.ep_session), so it fails unless we claim every node: such a case is *declined*, with
our partitioner's reasons, and that is fine. A claimed case must match the expected outputs
within onnx's tolerances (rtol 1e-3, atol 1e-7): a claimed-and-wrong case fails this test.

Data: onnx 1.21.0 (1678 cases) and, of onnx 1.22.0, the cases that are new or changed (the
rest are byte-identical). test_summary checks coverage: we must pass >= 95% of the 1.21.0 cases
stock ORT passes. Run `python -m onnxruntime_ep_seamless conformance` for the per-op table.
"""
import hashlib

import pytest

import parity
from onnxruntime_ep_seamless.tools import conformance

BASE = conformance.DEFAULT_DATA_VERSION
MIN_RATIO = 0.95  # of the cases stock ORT passes on the BASE data, the share we must pass


def _digest(case_dir):
    h = hashlib.sha1()
    for path in sorted(case_dir.rglob("*.*")):
        h.update(path.relative_to(case_dir).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _cases():
    params, seen = [], {}
    for version in conformance.DATA_VERSIONS:
        for path in conformance.case_dirs(version):
            digest = _digest(path)
            if seen.get(path.name) == digest:
                continue  # the same case as in an earlier data set
            seen.setdefault(path.name, digest)
            params.append(pytest.param(conformance.Case(path.name, path, version), id=f"{version}-{path.name}"))
    return params


CASES = _cases()
RESULTS: dict[str, conformance.Result] = {}


def ep_session(model_bytes, optimize=True, device="cpu"):
    """parity.ep_session (our EP alone, fallback disabled); unoptimized when ORT would fold every node."""
    return parity.ep_session(model_bytes) if optimize else conformance.ep_session(model_bytes, optimize=False)


@pytest.mark.parametrize("case", CASES)
def test_node(case):
    result = conformance.run_case(case, make_ep_session=ep_session, make_stock_session=parity.stock_session)
    RESULTS[f"{case.version}-{case.name}"] = result
    assert result.status != "failed", f"{case.name} ({result.op}) is claimed and wrong: {result.detail}"


def test_summary():
    base = [r for key, r in RESULTS.items() if key.startswith(f"{BASE}-")]
    if len(base) < sum(1 for c in CASES if c.values[0].version == BASE):
        pytest.skip("not every case ran (a selection): no coverage summary")
    print("\n" + conformance.summary(list(RESULTS.values()), per_op=False, title=f"onnx node tests ({BASE} + changes)"))
    totals = conformance.totals(base)
    assert totals["failed"] == 0
    assert totals["ratio"] >= MIN_RATIO, (
        f"we pass {totals['passed_of_stock_passing']} of the {totals['stock_passed']} {BASE} cases stock ORT passes "
        f"({100 * totals['ratio']:.1f}% < {100 * MIN_RATIO:.0f}%)")
