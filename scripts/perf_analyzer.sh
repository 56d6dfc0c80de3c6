#!/usr/bin/env bash
# Run NVIDIA Triton's perf_analyzer against Convoy on a glibc-2.36 host.
#
# Usage:
#   scripts/perf_analyzer.sh [perf_analyzer args...]
#       e.g. scripts/perf_analyzer.sh -m simple -u 127.0.0.1:8001 -i grpc \
#                --concurrency-range 1:4 --measurement-interval 1000
#   scripts/perf_analyzer.sh --prepare-only      # only download/unpack
#
# Why this route exists:
#   perf_analyzer is what Triton users measure with. Its real binaries ship in
#   the pip package `perf-analyzer` (2.58 .. 2.60), but those wheels are tagged
#   manylinux_2_38 and the binary needs glibc 2.38 (GLIBC_2.38 symbols) and a
#   libstdc++ from GCC >= 13 (GLIBCXX_3.4.32). Debian 12 (bookworm) has glibc
#   2.36, so `pip install perf-analyzer` there only resolves a 0.1.0
#   placeholder. Instead we:
#     1. `pip download` the newest real wheel for platform manylinux_2_38_x86_64
#        (no install; the wheel is a zip holding perf_analyzer/bin/perf_analyzer);
#     2. `apt-get download` Debian trixie's libc6, libstdc++6, libgcc-s1 and the
#        binary's other needs (zlib1g, libssl3t64, libzstd1 for libcrypto) using
#        a PRIVATE apt sources list / state / cache dir, so nothing is installed
#        or changed system-wide;
#     3. `dpkg-deb -x` those into a private root and run the binary through
#        trixie's dynamic loader with --library-path pointing at that root
#        (and --inhibit-cache so the host's ld.so.cache is not consulted);
#     4. put CUDA's runtime library (from the `nvidia-cuda-runtime-cu12` wheel)
#        on that path: the binary dlopens libcudart.so for any --shared-memory
#        mode, `system` included, and only loads it (no driver, no GPU needed).
#        Without it everything but --shared-memory still works.
#   Everything lives under tools/perf_analyzer/ in the repo root (gitignored).
#   Every step is skipped when its result already exists; delete
#   tools/perf_analyzer/ to start over.
#
# Environment:
#   PYTHON              python used for `pip download` (default: python3/python in PATH)
#   PA_VERSIONS         versions to try, newest first (default: "2.60 2.59 2.58")
#   PA_DEBIAN_MIRROR    Debian mirror URL (default: host from the system apt config,
#                       falling back to http://deb.debian.org/debian)
#   PA_DEBIAN_SUITE     default: trixie
#   PA_DEBIAN_KEYRING   default: /usr/share/keyrings/debian-archive-keyring.gpg
#
# Needs on the host: python with pip, apt-get, dpkg-deb (any Debian/Ubuntu), network
# access to PyPI and a Debian mirror (only for the first, preparing run).
#
# All arguments are passed to perf_analyzer unchanged. On a small/noisy machine
# add e.g. `--stability-percentage 25 --max-trials 20` if it reports
# "Failed to obtain stable measurement".

set -euo pipefail

die() { echo "perf_analyzer.sh: error: $*" >&2; exit 1; }
log() { echo "perf_analyzer.sh: $*" >&2; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
TOOLS="${REPO_ROOT}/tools/perf_analyzer"

PA_VERSIONS="${PA_VERSIONS:-2.60 2.59 2.58}"
SUITE="${PA_DEBIAN_SUITE:-trixie}"
KEYRING="${PA_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
# Runtime packages: glibc, C++ runtime, plus what perf_analyzer's NEEDED list
# (libz, libssl, libcrypto) pulls in; libcrypto 3.5 in trixie needs libzstd.
DEBS=(libc6 libstdc++6 libgcc-s1 zlib1g libssl3t64 libzstd1)

ROOT="${TOOLS}/root"           # extracted trixie libraries
WHEEL_DIR="${TOOLS}/wheel"     # downloaded .whl
PA_DIR="${TOOLS}/pa"           # unpacked wheel
APT_DIR="${TOOLS}/apt"         # private apt config/state/cache
DEB_DIR="${TOOLS}/debs"        # downloaded .deb files
LD_SO="${ROOT}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
CUDART_DIR="${TOOLS}/cudart"   # libcudart.so for --shared-memory
LIB_PATH="${ROOT}/usr/lib/x86_64-linux-gnu:${ROOT}/lib/x86_64-linux-gnu:${CUDART_DIR}/lib"

prepare_only=0
if [[ "${1:-}" == "--prepare-only" ]]; then
  prepare_only=1
  shift
fi

[[ "$(uname -m)" == "x86_64" ]] || die "only x86_64 is supported (got $(uname -m))"

pick_python() {
  if [[ -n "${PYTHON:-}" ]]; then
    command -v "${PYTHON}" >/dev/null 2>&1 || die "PYTHON=${PYTHON} not found"
    echo "${PYTHON}"
  elif command -v python3 >/dev/null 2>&1; then
    echo python3
  elif command -v python >/dev/null 2>&1; then
    echo python
  else
    die "no python in PATH (set \$PYTHON to a python that has pip)"
  fi
}

# --- step 1: the perf-analyzer wheel -----------------------------------------
fetch_wheel() {
  if compgen -G "${WHEEL_DIR}/perf_analyzer-*-manylinux_2_38_x86_64.whl" >/dev/null; then
    return 0
  fi
  local py ver tmp
  py="$(pick_python)"
  "${py}" -m pip --version >/dev/null 2>&1 || die "'${py} -m pip' does not work; set \$PYTHON to a python with pip"
  mkdir -p "${WHEEL_DIR}"
  tmp="$(mktemp -d "${TOOLS}/.wheel.XXXXXX")"
  for ver in ${PA_VERSIONS}; do
    log "downloading perf-analyzer==${ver} (manylinux_2_38_x86_64) ..."
    if "${py}" -m pip download --quiet --disable-pip-version-check \
        "perf-analyzer==${ver}" --platform manylinux_2_38_x86_64 \
        --only-binary=:all: --no-deps -d "${tmp}" >&2; then
      if compgen -G "${tmp}/perf_analyzer-*-manylinux_2_38_x86_64.whl" >/dev/null; then
        mv "${tmp}"/perf_analyzer-*-manylinux_2_38_x86_64.whl "${WHEEL_DIR}/"
        rm -rf "${tmp}"
        log "got $(basename "${WHEEL_DIR}"/perf_analyzer-*.whl)"
        return 0
      fi
    fi
    log "perf-analyzer==${ver} not available, trying next"
  done
  rm -rf "${tmp}"
  die "could not download any of perf-analyzer ${PA_VERSIONS} for manylinux_2_38_x86_64 (PyPI reachable?)"
}

unpack_wheel() {
  if [[ -x "${PA_DIR}/perf_analyzer/bin/perf_analyzer" ]]; then
    return 0
  fi
  local whl py tmp
  whl="$(ls "${WHEEL_DIR}"/perf_analyzer-*-manylinux_2_38_x86_64.whl | sort -V | tail -n 1)"
  py="$(pick_python)"
  log "unpacking $(basename "${whl}")"
  tmp="$(mktemp -d "${TOOLS}/.pa.XXXXXX")"
  "${py}" -m zipfile -e "${whl}" "${tmp}" || die "failed to unpack ${whl}"
  [[ -f "${tmp}/perf_analyzer/bin/perf_analyzer" ]] \
    || die "wheel ${whl} has no perf_analyzer/bin/perf_analyzer"
  chmod +x "${tmp}/perf_analyzer/bin/perf_analyzer"
  rm -rf "${PA_DIR}"
  mv "${tmp}" "${PA_DIR}"
}

# --- step 2: Debian trixie runtime libraries ----------------------------------
debian_mirror() {
  if [[ -n "${PA_DEBIAN_MIRROR:-}" ]]; then
    echo "${PA_DEBIAN_MIRROR%/}"
    return
  fi
  # Reuse the host's configured Debian mirror (deb822 "URIs:" or one-line "deb"),
  # skipping the security archive; fall back to deb.debian.org.
  local uri
  uri="$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
              | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}';
            cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\//) {print $i; break}}';
          } | grep -E '^https?://[^ ]*/debian/?$' | grep -v -- '-security' | head -n 1 || true)"
  echo "${uri:-http://deb.debian.org/debian}" | sed 's:/*$::'
}

fetch_debs() {
  local missing=() p
  for p in "${DEBS[@]}"; do
    compgen -G "${DEB_DIR}/${p}_*.deb" >/dev/null || missing+=("${p}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0

  command -v apt-get >/dev/null 2>&1 || die "apt-get not found (needed to fetch Debian ${SUITE} libraries)"
  [[ -r "${KEYRING}" ]] || die "Debian archive keyring ${KEYRING} not readable (set PA_DEBIAN_KEYRING)"

  local mirror
  mirror="$(debian_mirror)"
  mkdir -p "${APT_DIR}/etc" "${APT_DIR}/state/lists/partial" \
           "${APT_DIR}/cache/archives/partial" "${DEB_DIR}"
  echo "deb [arch=amd64 signed-by=${KEYRING}] ${mirror} ${SUITE} main" > "${APT_DIR}/etc/sources.list"
  local apt_opts=(
    -o "Dir::Etc::SourceList=${APT_DIR}/etc/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "Dir::State=${APT_DIR}/state"
    -o "Dir::State::status=/dev/null"
    -o "Dir::Cache=${APT_DIR}/cache"
    -o "APT::Architecture=amd64"
    -o "APT::Architectures::=amd64"
    -o "APT::Sandbox::User=root"
    -o "Debug::NoLocking=1"
  )
  if ! compgen -G "${APT_DIR}/state/lists/*_Packages*" >/dev/null; then
    log "apt-get update (private, ${mirror} ${SUITE})"
    apt-get "${apt_opts[@]}" -q update >&2 \
      || die "private apt-get update for ${mirror} ${SUITE} failed (mirror reachable? keyring has ${SUITE} keys?)"
  fi
  log "apt-get download ${missing[*]}"
  (cd "${DEB_DIR}" && apt-get "${apt_opts[@]}" -q download "${missing[@]}" >&2) \
    || die "apt-get download ${missing[*]} from ${SUITE} failed"
  # The package lists (~20 MB) are only needed for the download.
  rm -rf "${APT_DIR}/state/lists" "${APT_DIR}/cache"
}

extract_debs() {
  if [[ -x "${LD_SO}" && -f "${ROOT}/.extracted" ]]; then
    return 0
  fi
  command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
  log "extracting ${SUITE} libraries into ${ROOT}"
  rm -rf "${ROOT}"
  mkdir -p "${ROOT}"
  local p deb
  for p in "${DEBS[@]}"; do
    deb="$(ls "${DEB_DIR}/${p}"_*.deb | sort -V | tail -n 1)"
    dpkg-deb -x "${deb}" "${ROOT}" || die "dpkg-deb -x ${deb} failed"
  done
  [[ -x "${LD_SO}" ]] || die "no dynamic loader at ${LD_SO} after extraction"
  touch "${ROOT}/.extracted"
}

# --- step 3: check that every library resolves inside the private root --------
check_libs() {
  [[ -f "${TOOLS}/.checked" ]] && return 0
  local out outside
  out="$("${LD_SO}" --inhibit-cache --library-path "${LIB_PATH}" --list \
          "${PA_DIR}/perf_analyzer/bin/perf_analyzer" 2>&1)" \
    || die "perf_analyzer's libraries do not resolve:"$'\n'"${out}"
  if grep -q 'not found' <<<"${out}"; then
    die "missing shared libraries:"$'\n'"${out}"
  fi
  # Anything resolved outside the private root comes from the host (glibc 2.36
  # world); fine only for the vdso. Warn so missing packages get added to DEBS.
  outside="$(grep '=>' <<<"${out}" | grep -v -- "=> ${ROOT}/" || true)"
  if [[ -n "${outside}" ]]; then
    log "warning: libraries resolved from the host, consider adding their ${SUITE} packages:"
    echo "${outside}" >&2
  fi
  "${LD_SO}" --inhibit-cache --library-path "${LIB_PATH}" \
    "${PA_DIR}/perf_analyzer/bin/perf_analyzer" --version >/dev/null 2>&1 \
    || die "perf_analyzer --version failed under ${SUITE}'s loader"
  touch "${TOOLS}/.checked"
}

# --- step 4: CUDA's runtime library, loaded (never used) for --shared-memory system ---
fetch_cudart() {
  if [[ -e "${CUDART_DIR}/lib/libcudart.so" ]]; then
    return 0
  fi
  local py tmp lib
  py="$(pick_python)"
  tmp="$(mktemp -d "${TOOLS}/.cudart.XXXXXX")"
  if ! "${py}" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
      --no-deps "nvidia-cuda-runtime-cu12" -d "${tmp}" >&2; then
    rm -rf "${tmp}"
    log "warning: no nvidia-cuda-runtime-cu12 wheel; --shared-memory will not work"
    return 0
  fi
  "${py}" -m zipfile -e "${tmp}"/nvidia_cuda_runtime_cu12-*.whl "${tmp}/x"
  lib="$(find "${tmp}/x" -name 'libcudart.so.12' | head -n 1)"
  [[ -n "${lib}" ]] || die "the nvidia-cuda-runtime-cu12 wheel holds no libcudart.so.12"
  mkdir -p "${CUDART_DIR}/lib"
  cp "${lib}" "${CUDART_DIR}/lib/"
  ln -sf libcudart.so.12 "${CUDART_DIR}/lib/libcudart.so"
  rm -rf "${tmp}"
  log "got libcudart.so.12 for --shared-memory"
}

prepare() {
  mkdir -p "${TOOLS}"
  fetch_wheel
  unpack_wheel
  fetch_debs
  extract_debs
  check_libs
  fetch_cudart
}

prepare

if [[ ${prepare_only} -eq 1 ]]; then
  log "ready: $(basename "$(ls "${WHEEL_DIR}"/*.whl | sort -V | tail -n 1)") in ${TOOLS}"
  exit 0
fi

exec "${LD_SO}" --inhibit-cache --library-path "${LIB_PATH}" \
  "${PA_DIR}/perf_analyzer/bin/perf_analyzer" "$@"
