"""What the batch benchmarks against DuckDB and DataFusion share."""

import subprocess
import sys
import time


def datafusion():
    """DataFusion's Python package, installed into this Python when missing
    (it is not among what the test script installs)."""
    try:
        import datafusion as df
    except ImportError:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "datafusion==55.0.0"], check=True
        )
        import datafusion as df
    return df


def best(f, runs=3):
    """The best time of `runs` calls of `f`, and its last result."""
    times = []
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - start)
    return min(times), result
