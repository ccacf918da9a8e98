#!/usr/bin/env bash
# Isaac Lab 3.0 beside the package, kit-less on the CPU, for tests/test_isaaclab_real.py and
# benchmarks/isaaclab_pendulum_speed.py (docs/isaaclab.md, "Isaac Lab 3.0 on a CPU"):
#   .isaaclab-venv/     a venv of PYTHON: torch 2.13.0 (CPU), isaaclab 3.0.0 without its pins, Newton/Warp, this package
#   .isaaclab-assets/   stand-in USD assets for Isaac-Pendulum-MARL-Direct (ISAACSIM_ASSET_ROOT)
#   .isaaclab-cache/    warp/ (WARP_CACHE_PATH: compiled kernels) and env.sh (both variables, to source)
# A second run reinstalls nothing (a stamp records what was installed) and ends with the same check, in seconds.
# Environment: PYTHON, the venv's interpreter (default python3; 3.11 or later, as the package's CI uses).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
VENV="$ROOT/.isaaclab-venv"
ASSETS="$ROOT/.isaaclab-assets"
CACHE="$ROOT/.isaaclab-cache"
PYTHON="${PYTHON:-python3}"

# isaaclab 3.0.0 asks for Python 3.12 and torch==2.11.0 (a CUDA build); kit-less Newton on the CPU needs neither, so
# it goes in without its dependencies and these go in beside it, torch held at the package's version.
TORCH="torch==2.13.0"
ISAACLAB="isaaclab==3.0.0"
SIM_DEPS=("newton[sim]==1.6.1" "warp-lang==1.17.0" "usd-exchange==3.0.1" "newton-usd-schemas" "gymnasium"
  "hydra-core" "lazy_loader" "prettytable" "psutil" "trimesh" "einops" "scipy" "numpy>=2" "filelock" "rich" "tqdm"
  "packaging")
STAMP="$VENV/.skrl-marl-ext-setup"
WANT="$TORCH $ISAACLAB ${SIM_DEPS[*]} -e $ROOT"

start=$SECONDS
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup_isaaclab: $VENV is up to date"
else
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' \
    || { echo "setup_isaaclab: $PYTHON is older than Python 3.11; set PYTHON to a 3.11 interpreter" >&2; exit 1; }
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  mkdir -p "$CACHE"
  echo "$TORCH" > "$CACHE/constraints.txt"
  pip=("$VENV/bin/python" -m pip install -q -c "$CACHE/constraints.txt")
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "${pip[@]}" "$TORCH"
  "${pip[@]}" --no-deps --ignore-requires-python "$ISAACLAB"
  "${pip[@]}" "${SIM_DEPS[@]}"
  "${pip[@]}" -e "$ROOT"
  echo "$WANT" > "$STAMP"
fi

"$VENV/bin/python" scripts/make_isaaclab_assets.py "$ASSETS"
mkdir -p "$CACHE/warp"
cat > "$CACHE/env.sh" <<EOF
export ISAACSIM_ASSET_ROOT="$ASSETS"
export WARP_CACHE_PATH="$CACHE/warp"
EOF
# builds and steps the env: compiles Warp's kernels into the cache on the first run
ISAACSIM_ASSET_ROOT="$ASSETS" WARP_CACHE_PATH="$CACHE/warp" "$VENV/bin/python" scripts/isaaclab_smoke.py \
  | grep -F "Isaac-Pendulum-MARL-Direct:"
echo "setup_isaaclab: done in $((SECONDS - start)) s; 'source $CACHE/env.sh' before running $VENV/bin/isaaclab"
