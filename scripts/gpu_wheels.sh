#!/usr/bin/env bash
# The wheels benchmarks/gpu_suite.py installs offline on a GPU machine that reaches no package registry
# (`--wheels .gpu-wheels`): what the suite imports besides torch and this package (the working tree), pinned to the
# versions the CPU results were made with. pip downloads each without its dependencies; the two published only as
# source (gym, vmas) are built into wheels here. .gpu-wheels/ is git-ignored; the script fails above 64 MiB (what
# the device tool carries).
# Environment: PYTHON, the interpreter whose pip runs (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.gpu-wheels
PYTHON="${PYTHON:-python3}"
PACKAGES=(skrl==2.1.1 vmas==1.5.2 gymnasium==1.4.0 farama-notifications==0.0.6 gym==0.26.2 gym-notices==0.0.8
  pettingzoo==1.27.0)
rm -rf "$OUT" && mkdir -p "$OUT/source"
"$PYTHON" -m pip download -q --no-deps -d "$OUT/source" "${PACKAGES[@]}"
mv "$OUT"/source/*.whl "$OUT"/ 2>/dev/null || true
for sdist in "$OUT"/source/*.tar.gz; do  # pure-Python packages published as source only: built once, here
  [[ -e "$sdist" ]] || continue
  "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" "$sdist"
done
rm -rf "$OUT/source"
size=$(du -sm "$OUT" | cut -f1)
ls -1 "$OUT"
(( size <= 64 )) || { echo "gpu_wheels: $OUT is $size MiB, over the 64 MiB the device tool carries" >&2; exit 1; }
echo "gpu_wheels: $(ls "$OUT" | wc -l) wheels, $size MiB in $OUT"
