#!/usr/bin/env bash
# Whether the Megatron rules' conda env installs on the platform its files document, x86_64 with
# glibc 2.39 or newer (envs/megatron.yaml): pip resolves the yaml's pip list (the container's
# list, envs/requirements-megatron-gpu.txt, included) and the pins envs/megatron.post-deploy.sh
# installs without dependencies, for CPython 3.12 and that platform's wheels only, so a pin with no
# such wheel fails the run. Not resolved, by name: transformer-engine-torch, the sdist the
# post-deploy script builds against the env's torch. One pure-Python sdist is built into a wheel
# here first, as pip builds it on any platform: antlr4-python3-runtime 4.9.3, the newest of the
# 4.9 releases omegaconf 2.3 accepts, none of which has a wheel.
# pip download rather than pip install --dry-run: the .venv's pip (23.2) checks Requires-Python
# against the interpreter running it when installing, not --python-version. It fetches every
# wheel (about 3 GB: 85 s here, 390 s with the machine loaded) into a temporary folder, removed on
# exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/disk.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && need_free_gb 4 "the Megatron env's wheels")
glibc_minor=39
platforms=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for minor in $(seq 5 "$glibc_minor"); do
    platforms+=(--platform "manylinux_2_${minor}_x86_64")
done
target=(--only-binary=:all: "${platforms[@]}" --python-version 3.12 --implementation cp)
start=$SECONDS
.venv/bin/python -c '
import sys, yaml
for entry in yaml.safe_load(open(sys.argv[1]))["dependencies"]:
    if isinstance(entry, dict):
        print("\n".join(entry["pip"]))
' envs/megatron.yaml > "$work/conda-pip.txt"
mapfile -t no_deps < <(grep -e '--no-deps' envs/megatron.post-deploy.sh | grep -oE '[A-Za-z0-9._-]+==[^ ]+' \
    | grep -v '^transformer-engine-torch==')
echo "not resolved: transformer-engine-torch (an sdist envs/megatron.post-deploy.sh builds against torch)"
pip_run() {
    if ! .venv/bin/pip "$@" > "$work/pip.log" 2>&1 || grep -q "does not provide the extra" "$work/pip.log"; then
        cat "$work/pip.log" >&2
        exit 1
    fi
}
pip_run wheel --no-cache-dir --no-deps --no-binary :all: -w "$work/built" antlr4-python3-runtime==4.9.3
pip_run download --no-cache-dir -d "$work/wheels" "${target[@]}" --find-links "$work/built" -r "$work/conda-pip.txt"
pip_run download --no-cache-dir -d "$work/wheels" "${target[@]}" --no-deps "${no_deps[@]}"
echo "resolved for manylinux_2_${glibc_minor}_x86_64, CPython 3.12: $(find "$work/wheels" -type f | wc -l)" \
    "distributions ($(du -sh "$work/wheels" | cut -f1)) in $((SECONDS - start)) s"
