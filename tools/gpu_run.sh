#!/usr/bin/env bash
# One call on the GPU machine (the device tool): install the carried wheels,
# build robocache for sm_90, then run the stages named as arguments, in order:
#   tests      the whole test suite (pytest -n 8)
#   core       the resample, fuse, voxelize and import tests
#   vtests     tests/test_voxelize.py only
#   compile    tests/test_compile_export.py
#   bench      python -m robocache.bench (JSON to $OUT/bench.json)
#   bench:K    the benchmark kinds K only (e.g. bench:resample,fuse)
#   fast:K     robocache-only benchmark of kinds K
#   rtests     tests/test_resample.py and tests/test_fuse.py
#   vkernels   per-kernel times of the voxelize cases (tools/voxel_kernels.py)
#   bkernels   per-kernel times of the resample backward case (tools/bwd_kernels.py)
#   bncu       Nsight Compute on the resample backward kernel (queries in order)
#   vncu       Nsight Compute on the voxelize cases (tools/ncu_cases.py voxelize)
#   wprobe     bare dense-write patterns against fill_ and copy_ (tools/write_probe.py)
#   ptxas      the compiler's resource report for every kernel ($OUT/ptxas.txt)
# Carry .whl (nvidia-cutlass, expecttest, pytest-xdist, execnet). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
export CUTLASS_INCLUDE_DIR=$(python3 -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))')
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
t0=$(date +%s)
quiet=-q
if [[ " $* " == *" ptxas "* ]]; then export ROBOCACHE_PTXAS_VERBOSE=1; quiet=-v; fi
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install $quiet --no-build-isolation --no-deps -e . \
  > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
if [[ " $* " == *" ptxas "* ]]; then
  grep -E "Compiling entry|registers|spill" "$OUT/build.log" > "$OUT/ptxas.txt" || true
fi
# SM and memory clocks and power while the stages run (a latency-bound kernel
# follows the SM clock; a copy does not).
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv \
  -lms 1000 > "$OUT/clocks.csv" 2>/dev/null &
clock_pid=$!
rc=0
for stage in "$@"; do
  t0=$(date +%s)
  case "$stage" in
    tests) python3 -m pytest tests -q -n 8 -p no:cacheprovider > "$OUT/tests.log" 2>&1 || rc=1
           tail -15 "$OUT/tests.log" ;;
    core) python3 -m pytest tests/test_resample.py tests/test_fuse.py tests/test_voxelize.py \
            tests/test_import.py -q -n 8 -p no:cacheprovider > "$OUT/core.log" 2>&1 || rc=1
          tail -15 "$OUT/core.log" ;;
    vtests) python3 -m pytest tests/test_voxelize.py -q -n 8 -p no:cacheprovider > "$OUT/vtests.log" 2>&1 || rc=1
            tail -5 "$OUT/vtests.log" ;;
    compile) python3 -m pytest tests/test_compile_export.py -q -n 4 -p no:cacheprovider \
               > "$OUT/compile.log" 2>&1 || rc=1
             tail -15 "$OUT/compile.log" ;;
    bench) python3 -m robocache.bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
    bench:*) kinds=${stage#bench:}; tag=${kinds//,/-}  # the device tool returns no names with commas
             python3 -m robocache.bench --only "$kinds" --json "$OUT/bench-$tag.json" \
               2>&1 | tee "$OUT/bench-$tag.log" ;;
    fast:*) python3 -m robocache.bench --robocache-only --only "${stage#fast:}" 2>&1 | tee -a "$OUT/fast.log" ;;
    vkernels) python3 tools/voxel_kernels.py 2>&1 | tee "$OUT/vkernels.log" ;;
    bkernels) python3 tools/bwd_kernels.py 2>&1 | tee "$OUT/bkernels.log" ;;
    bncu) ncu --clock-control none -k regex:multi_stream_backward_kernel -c 1 --section SpeedOfLight \
            --section Occupancy --section WarpStateStats --section SchedulerStats \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
            --section InstructionStats python3 tools/bwd_kernels.py > "$OUT/bncu.log" 2>&1 || rc=1
          grep -vE "^ *-+ *$|^==PROF==" "$OUT/bncu.log" | grep -E "[0-9]" | head -120 ;;
    rtests) python3 -m pytest tests/test_resample.py tests/test_fuse.py -q -n 8 -p no:cacheprovider \
              > "$OUT/rtests.log" 2>&1 || rc=1
            tail -5 "$OUT/rtests.log" ;;
    vncu) ncu --profile-from-start off --clock-control none --section SpeedOfLight \
            --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
            python3 tools/ncu_cases.py voxelize > "$OUT/vncu.log" 2>&1 || rc=1
          grep -E "bin|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Block Limit|L1/TEX Hit|L2 Hit" "$OUT/vncu.log" | head -150 ;;
    wprobe) python3 tools/write_probe.py 2>&1 | tee "$OUT/wprobe.log" ;;
    ptxas) ;;
    *) echo "unknown stage $stage"; rc=1 ;;
  esac
  echo "$stage: $(( $(date +%s) - t0 )) s"
done
kill $clock_pid 2>/dev/null
exit $rc
