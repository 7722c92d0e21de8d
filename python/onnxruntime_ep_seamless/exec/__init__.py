"""The executors: a compiled partition run on the CPU (compute.py) or on a GPU (cuda_compute.py, cuda_capture.py)."""
