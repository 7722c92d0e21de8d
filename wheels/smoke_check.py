"""Part of wheels/smoke.sh: the installed wheel runs the demo model with CPU fallback disabled,
every node on SeamlessCPUExecutionProvider, with stock ORT's answers. Run from outside the checkout."""
import os
import sys

import numpy as np
import onnxruntime as ort

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.tools.cli import random_feeds

package_dir = os.path.dirname(os.path.abspath(seamless.__file__))
assert os.path.basename(os.path.dirname(package_dir)) == "site-packages", f"not the installed package: {package_dir}"
assert os.path.dirname(seamless.get_library_path()) == package_dir
try:  # the CPU distribution says so when asked for another variant
    seamless.get_library_path("cuda")
    raise AssertionError("the CPU wheel carries a CUDA library")
except FileNotFoundError as exc:
    assert "CPU distribution" in str(exc), exc

so = seamless.session_options()
so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
sess = ort.InferenceSession(seamless.DEMO_MODEL, so)
report = seamless.assert_ep_selected(sess)
assert report.ep_nodes and not report.fallback_nodes, str(report)

stock = ort.InferenceSession(seamless.DEMO_MODEL, providers=["CPUExecutionProvider"])
feeds = random_feeds(stock, {"batch": 2, "seq": 16})
worst = 0.0
for _ in range(3):
    for got, want in zip(sess.run(None, feeds), stock.run(None, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))))
assert worst < 1e-4, worst
print(f"smoke_check: onnxruntime {ort.__version__}, python {sys.version.split()[0]}: "
      f"{len(report.ep_nodes)}/{len(report.ep_nodes)} nodes on {seamless.get_ep_name()}, "
      f"fallback disabled, max |diff| vs stock {worst:.2g}")
