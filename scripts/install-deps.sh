#!/usr/bin/env bash
# Installs the system packages turnstile's tests use when they are missing.
# Everything here is optional for building: `go build ./...` needs only Go and gcc.
#
# NVRTC: the CUDA kernel tests compile every kernels/*.cu to cubin through NVRTC,
# which needs no GPU. Debian bookworm ships NVRTC 11.8 in its non-free component
# (package libnvrtc11.2). When no libnvrtc is found and we are root on Debian, this
# enables non-free for apt and installs it. Outside CI it never fails the build:
# when apt is unreachable it says why, and the NVRTC tests skip saying so. Under
# CI=true a missing NVRTC fails the run, naming the package, so the CUDA compile
# tests (package kernels) cannot skip unnoticed.
#
# NVRTC_LIB_DIR, when set, is the one directory searched for libnvrtc.so*
# (instead of the dynamic loader's cache and the CUDA paths): for a library
# installed elsewhere, and to exercise the missing-NVRTC path on a machine that
# has it (e.g. NVRTC_LIB_DIR=/nonexistent CI=true as a non-root user).
#
# MPI: the multi-process tests of dist/mpi run mpirun (Open MPI, whose libmpi.so.40
# dist/mpi loads with dlopen). When mpirun is missing and we are root with apt,
# this installs Debian's openmpi-bin. Outside CI a failure only says the MPI tests
# will skip; under CI=true it fails the run, naming the package.
#
# Idempotent and quiet on success.
set -uo pipefail

NVRTC_PKG=libnvrtc11.2
NONFREE_LIST=/etc/apt/sources.list.d/turnstile-non-free.sources

MPI_PKG=openmpi-bin

say() { echo "install-deps: $*" >&2; }

# have_nvrtc succeeds when the dynamic loader or a known CUDA path has libnvrtc.
have_nvrtc() {
	if [ -n "${NVRTC_LIB_DIR:-}" ]; then
		compgen -G "$NVRTC_LIB_DIR/libnvrtc.so*" >/dev/null
		return
	fi
	# The cache is read whole before matching: `ldconfig -p | grep -q` under
	# pipefail fails when grep exits at the first match and ldconfig, still
	# writing, dies of SIGPIPE (it did right after apt installed the package).
	local cache
	if command -v ldconfig >/dev/null 2>&1 && cache=$(ldconfig -p 2>/dev/null) &&
		[[ $cache == *libnvrtc.so* ]]; then
		return 0
	fi
	local d
	for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
		[ -n "$d" ] || continue
		if compgen -G "$d/lib64/libnvrtc.so*" >/dev/null ||
			compgen -G "$d/lib/libnvrtc.so*" >/dev/null; then
			return 0
		fi
	done
	return 1
}

# install_nvrtc succeeds when libnvrtc is found, installing it if it can;
# otherwise it says why and fails.
install_nvrtc() {
	if have_nvrtc; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		say "libnvrtc not found and not root: NVRTC tests will skip (install $NVRTC_PKG from Debian non-free)"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1 || [ ! -r /etc/os-release ]; then
		say "libnvrtc not found and no apt: NVRTC tests will skip"
		return 1
	fi
	# shellcheck disable=SC1091
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	if [ "$codename" != bookworm ]; then
		say "libnvrtc not found; non-free NVRTC install is only automated on Debian bookworm (this is '${codename:-unknown}'): NVRTC tests will skip"
		return 1
	fi

	# Enable non-free unless some apt source already lists it. The entry mirrors
	# the machine's own Debian source (deb822 in /etc/apt/sources.list.d).
	if ! grep -rqsE '(^|[[:space:]])non-free([[:space:]]|$)' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
		cat >"$NONFREE_LIST" <<'EOF'
# Added by turnstile scripts/install-deps.sh: NVRTC (libnvrtc11.2) for the CUDA kernel compile tests.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	fi

	local log
	log=$(mktemp)
	if ! apt-get update -qq -o Acquire::http::Timeout=20 -o Acquire::Retries=1 >"$log" 2>&1; then
		say "apt-get update failed, NVRTC tests will skip: $(tail -n 3 "$log" | tr '\n' ' ')"
		rm -f "$log"
		return 1
	fi
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"$NVRTC_PKG" >"$log" 2>&1; then
		say "apt-get install $NVRTC_PKG failed, NVRTC tests will skip: $(tail -n 3 "$log" | tr '\n' ' ')"
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
	if ! have_nvrtc; then
		say "$NVRTC_PKG installed but libnvrtc still not found by ldconfig: NVRTC tests will skip"
		return 1
	fi
	return 0
}

# install_mpi succeeds when mpirun is on PATH, installing openmpi-bin if it can;
# otherwise it says why and fails.
install_mpi() {
	if command -v mpirun >/dev/null 2>&1; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		say "mpirun not found and not root: MPI tests will skip (install $MPI_PKG)"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		say "mpirun not found and no apt: MPI tests will skip (install $MPI_PKG or another Open MPI 4.x)"
		return 1
	fi
	local log
	log=$(mktemp)
	if ! apt-get update -qq -o Acquire::http::Timeout=20 -o Acquire::Retries=1 >"$log" 2>&1; then
		say "apt-get update failed, MPI tests will skip: $(tail -n 3 "$log" | tr '\n' ' ')"
		rm -f "$log"
		return 1
	fi
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"$MPI_PKG" >"$log" 2>&1; then
		say "apt-get install $MPI_PKG failed, MPI tests will skip: $(tail -n 3 "$log" | tr '\n' ' ')"
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
	if ! command -v mpirun >/dev/null 2>&1; then
		say "$MPI_PKG installed but mpirun still not on PATH: MPI tests will skip"
		return 1
	fi
	return 0
}

status=0
if ! install_nvrtc && [ "${CI:-}" = true ]; then
	say "CI=true: NVRTC is required, so that the CUDA kernel compile tests (go package kernels) run instead of skipping: install the Debian non-free package $NVRTC_PKG (or point NVRTC_LIB_DIR at libnvrtc.so)"
	status=1
fi
if ! install_mpi && [ "${CI:-}" = true ]; then
	say "CI=true: mpirun is required, so that the multi-process MPI tests (go package dist/mpi) run instead of skipping: install the Debian package $MPI_PKG"
	status=1
fi
exit $status
