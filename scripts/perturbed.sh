#!/usr/bin/env bash
# The perturbed pass: every test that reads a stored result (marker `replay`, put on
# them by tests/stored_results_plugin.py), run again under the most different numerics
# this machine offers, standing in for the CPUs the stored runs were not made on:
#   ATEN_CPU_CAPABILITY=default   PyTorch's own kernels in their scalar build
#   MKL_CBWR=COMPATIBLE           MKL's GEMM on its reproducible SSE2 path
#   oneDNN off                    torch.backends.mkldnn.enabled = False (the conftest)
#   OPENBLAS_CORETYPE=Prescott    numpy's BLAS on its SSE3 kernels
#   NPY_DISABLE_CPU_FEATURES      numpy's SIMD dispatch held to its baseline
#   LNCOURSE_PORTABLE_KERNEL=1    the course's C kernel without -march=native/-ffast-math
#                                 (=0 keeps the native build, for a long replay that
#                                 needs only the other perturbations)
#   3 threads                     a partition of every parallel reduction that no stored
#                                 run used (they ran on 1 or 2)
# Usage: bash scripts/perturbed.sh [pytest arguments]   (default: the CI selection)
# TESTING.md, "The perturbed pass", says what it found and what each comparison allows.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}
export LNCOURSE_PERTURBED=1 LNCOURSE_PERTURBED_THREADS=${LNCOURSE_PERTURBED_THREADS:-3}
export ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
export LNCOURSE_PORTABLE_KERNEL=${LNCOURSE_PORTABLE_KERNEL:-1}
export OPENBLAS_CORETYPE=Prescott OMP_WAIT_POLICY=PASSIVE
export OMP_NUM_THREADS=$LNCOURSE_PERTURBED_THREADS MKL_NUM_THREADS=$LNCOURSE_PERTURBED_THREADS
export OPENBLAS_NUM_THREADS=$LNCOURSE_PERTURBED_THREADS
# numpy refuses to disable a feature the CPU lacks: the dispatched ones this CPU has
NPY_DISABLE_CPU_FEATURES=$($PY -c '
from numpy._core._multiarray_umath import __cpu_dispatch__ as targets, __cpu_features__ as has
print(" ".join(k for k in targets if has.get(k)))')
export NPY_DISABLE_CPU_FEATURES
if [ $# -eq 0 ]; then
  set -- -m "replay and not slow and not notebooks and not site" -p no:cacheprovider -q \
    --durations=10 tests
fi
exec $PY -m pytest "$@"
