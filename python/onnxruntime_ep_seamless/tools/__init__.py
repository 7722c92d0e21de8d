"""The tools around the EP: CLI, benchmarks, conformance and coverage reports, capture reports.

Nothing in the EP's pipeline imports this package; `python -m onnxruntime_ep_seamless …` runs its CLI.
"""
