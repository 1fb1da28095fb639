"""examples/python/validate_kernel.py runs and passes (small shapes, NumPy 'kernels')."""

import subprocess
import sys

from conftest import REPO


def test_validate_kernel_example():
    r = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "validate_kernel.py"), "--numpy",
                        "--tokens", "2", "--keys", "2048", "--reps", "1", "--threads", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all checks PASS" in r.stdout
