#!/bin/sh
# Installs PyPI's torch (LibTorch 2.x inside: headers, libraries, TorchConfig.cmake) into a venv, the
# second LibTorch that lockstep builds and tests against (.ci/run; README, "LibTorch 2.x"), numpy (the
# tests' Python checks read safetensors files with it; Debian's python3-torch brings it, the wheel does
# not), and Hugging Face Accelerate with torchvision (`lockstep launch` runs seed 000's Accelerate script,
# which reads MNIST through torchvision, and is compared with Accelerate's own launcher:
# tests/e2e/accelerate_launch.sh). torchvision 0.29.2 is the newest on PyPI for these machines; it asks
# for torch >= 2.14 and its compiled ops load and run with torch 2.15.0 (checked: torchvision.ops.nms).
# Pinned: the newest torch that pip offers on the project's machines when this was written. PyPI's Linux
# wheel is a CUDA build (about 5 GiB with its nvidia-* wheels); it runs on the CPU when no GPU is present. Idempotent: nothing is downloaded when these versions are already installed.
# Into a virtual environment, not into python3 itself: Debian's python3 is externally managed (PEP 668:
# pip refuses), and a torch 2.x there would shadow Debian's python3-torch 1.13, which the 1.13 build's
# tests compare with. --system-site-packages: a python3 that already has these versions (pyenv's, on
# the project's machines) lends them and nothing is downloaded; otherwise pip installs them in the venv.
#   install-pip-torch.sh             install (idempotent: nothing is downloaded when the versions are there)
#   install-pip-torch.sh --python    print the venv's python3 (CMake: -DLOCKSTEP_PYTHON=...)
#   install-pip-torch.sh --version   print the pinned torch version (CMake: -DLOCKSTEP_REQUIRE_TORCH_VERSION=...)
#   LOCKSTEP_PIP_TORCH=2.15.0        the version (default below)
#   LOCKSTEP_TORCH_VENV=/opt/lockstep-torch2   the venv
#   PYTHON=python3                   the interpreter the venv is made from
set -eu
version=${LOCKSTEP_PIP_TORCH:-2.15.0}
numpy_version=2.4.6
accelerate_version=1.15.0
torchvision_version=0.29.2
venv=${LOCKSTEP_TORCH_VENV:-/opt/lockstep-torch2}
python=$venv/bin/python3
case ${1:-} in
  --python) echo "$python"; exit 0 ;;
  --version) echo "$version"; exit 0 ;;
  "") ;;
  *) echo "install-pip-torch: unknown argument '$1' (use --python, --version or nothing)" >&2; exit 2 ;;
esac
if [ ! -x "$python" ]; then
  echo "install-pip-torch: making the venv $venv from ${PYTHON:-python3} ($(${PYTHON:-python3} --version 2>&1))"
  "${PYTHON:-python3}" -m venv --system-site-packages "$venv"
fi
want="$version $numpy_version $accelerate_version $torchvision_version"
have=$("$python" -c 'import accelerate, numpy, torch, torchvision
print(torch.__version__.split("+")[0], numpy.__version__, accelerate.__version__, torchvision.__version__.split("+")[0])' \
  2>/dev/null || true)
if [ "$have" = "$want" ]; then
  echo "install-pip-torch: torch, numpy, accelerate, torchvision $want already installed for $python"
  exit 0
fi
echo "install-pip-torch: installing torch==$version numpy==$numpy_version accelerate==$accelerate_version" \
  "torchvision==$torchvision_version into $venv"
"$python" -m pip install --quiet --disable-pip-version-check "torch==$version" \
  "numpy==$numpy_version" "accelerate==$accelerate_version" "torchvision==$torchvision_version"
"$python" -c 'import torch; print("install-pip-torch: torch", torch.__version__, "at", torch.utils.cmake_prefix_path)'
