#!/bin/sh
# Installs every Debian package lockstep needs to build, test and run (Debian 12 "bookworm"), then the one
# pip package its tests need that Debian lacks: tensorboard (pinned), into Debian's /usr/bin/python3.
# Idempotent: packages already present are left alone and nothing is downloaded twice.
# Run as root (or with sudo). Needs Debian's package archive, and PyPI for tensorboard.
set -eu

packages="
  build-essential cmake ccache git pkg-config clang-format clang-tidy
  libtorch-dev libgloo-dev libopenblas0-openmp
  zlib1g-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist fortunes python3-vega-datasets
  python3 python3-torch python3-pip python3-venv
  openmpi-bin libopenmpi-dev slurm-wlm slurm-client munge
  iproute2 chromium
"
# clang-format: the format check (scripts/check-format.sh, ctest format_check); Debian 12's is version 14.
# clang-tidy: CI's static checks (scripts/clang-tidy.sh, .clang-tidy); Debian 12's is version 14.
# libopenblas0-openmp: without it LibTorch falls back to reference BLAS (~30x slower matmuls).
# fortunes, python3-vega-datasets: real data of the "bring your own data" examples (examples/char_lm.cpp: the
# fortunes' text; examples/tabular.cpp: vega_datasets' seattle-weather.csv).
# python3-torch: the torchrun-compatibility test and the Python DDP peer in bench/.
# python3-pip: installs tensorboard (below). python3-venv: the venv of PyPI's torch 2.x (scripts/install-pip-torch.sh).
# openmpi-bin, slurm-wlm, slurm-client, munge: real launch paths (mpirun; a local Slurm cluster that
# scripts/slurm-local-cluster.sh starts for tests/e2e/slurm_e2e.sh) for the scale-out tests.
# libopenmpi-dev: MPI's headers and libmpi, so CMake builds lockstep_comm_mpi (--backend mpi; Debian's
# LibTorch has no ProcessGroupMPI). Without it the build goes on and --backend mpi explains what is missing.
# iproute2: ip netns, veth and tc for the emulated hosts of scripts/netns-hosts.sh (tests/e2e/netns_e2e.sh).
# chromium: headless, for tests/cli/report_browser_test.sh (ctest test_report_browser), which loads the page
# of `lockstep report` in a real browser; the test fails without it (never skips).

missing=""
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ -z "$missing" ]; then
  echo "install-deps: all Debian packages present"
else
  echo "install-deps: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq $missing
fi

# tensorboard: its own reader checks lockstep's event files (ctest test_log_tensorboard_reader,
# tests/log/read_tensorboard.py); Debian 12 has no package of it. Into /usr/bin/python3, the python3 that
# test uses. --break-system-packages: Debian 12 marks its python3 externally managed (PEP 668) and pip
# refuses without it; pip installs under /usr/local and leaves Debian's own packages (numpy) as they are.
python=/usr/bin/python3
tensorboard_version=2.21.0
if [ "$($python -c 'import tensorboard; print(tensorboard.__version__)' 2>/dev/null)" = "$tensorboard_version" ]; then
  echo "install-deps: tensorboard $tensorboard_version present"
else
  echo "install-deps: installing tensorboard==$tensorboard_version (pip)"
  $SUDO $python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --break-system-packages "tensorboard==$tensorboard_version"
fi
echo "install-deps: done"
