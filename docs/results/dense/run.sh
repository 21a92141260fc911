#!/bin/bash
# The dense FP32 kernel (codegen/dense.py) on the GPU: ResNet-152 and DenseNet-201 built at batch 1 and 8 (their
# dense candidates beside the sparse picks), then
#   probe.py     per distinct conv shape and batch, every dense tile against the sparse pick at 0.7 and cuDNN FP32;
#   variants.py  per ResNet-152 batch-1 shape, tiles, K splits, pipeline depths and a no-main-loop twin (variants.*);
#   checks       its template cases (tests/gpu/test_kernels.py -k "dense or concat_slice": also taking a
#                producer's epilogue or a pre-activation, or storing into a concat's channel slice) and every
#                kernel of both bundles (tests/gpu/test_manifest_kernels.py) against float64, then the template
#                cases under compute-sanitizer memcheck and racecheck.
#   bash docs/results/dense/run.sh OUT [probe|variants|checks ...]      (probe and checks by default)
# SNN_CACHE_DIR: a compiler cache filled on a CPU machine with the same build and the cases (all hits here).
set -uo pipefail
out=$(realpath -m "${1:?usage: run.sh OUT [probe|variants|checks ...]}"); shift
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(probe checks)
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
. docs/results/env.sh
env_report > "$out/env.txt"
for net in resnet152 densenet201; do
  snn-codegen build $net --gpu "$GPU" --batch 1,8 -j 16 2>&1 | tail -2
done | tee "$out/build.log"
for step in "${steps[@]}"; do
  case $step in
    probe) python3 "$here/probe.py" generated/resnet152/h100/manifest.json "$out/probe.json" > "$out/probe.log" 2>&1
           echo "probe exit code: $?" | tee -a "$out/probe.log"; tail -54 "$out/probe.log" ;;
    variants) python3 "$here/variants.py" time "$out/variants.json" > "$out/variants.log" 2>&1
           echo "variants exit code: $?" | tee -a "$out/variants.log"; grep -v '^{' "$out/variants.log" ;;
    checks)
      python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k "dense or concat_slice" 2>&1 | tail -3 | tee "$out/checks.log"
      SNN_RESULTS="$out" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_manifest_kernels.py 2>&1 | tail -3 \
        | tee -a "$out/checks.log"
      # --report-api-errors no: cuda-python probes optional driver entry points; those are not kernel errors
      for tool in memcheck racecheck; do
        # racecheck on the dense kernels alone: with torch's float64 reference convs instrumented too, the hand-off
        # cases had not finished after 575 s
        only=(); [ $tool = racecheck ] && only=(--kernel-name kns=dconv_)
        compute-sanitizer --tool $tool "${only[@]}" --report-api-errors no --error-exitcode 9 --target-processes all \
          python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py -k "dense or concat_slice" > "$out/$tool.log" 2>&1
        echo "$tool exit code: $? (0: no error found)" | tee -a "$out/$tool.log"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$out/$tool.log" | tail -3
      done ;;
    *) echo "unknown step $step (probe, variants, checks)"; exit 2 ;;
  esac
done
