"""matplotlib for the pictures the command line draws (bench's chart, capture-report's timeline): an optional
dependency, asked for before any work is done."""
from __future__ import annotations


def pyplot(what: str):
    """matplotlib.pyplot drawing to files (the Agg backend), or a clear error naming `what` needs it."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"{what} draws with matplotlib, which is not installed: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
