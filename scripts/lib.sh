# Shared helpers for the scripts; source it, do not run it.

# apt_get_install PACKAGE: installs Debian's PACKAGE quietly. It needs root
# (or sudo), as CI has.
apt_get_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
}

# ensure_redis_installed installs redis-server (Debian's package) when it is
# not on PATH.
ensure_redis_installed() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    return
  fi
  echo "redis-server not found: installing it with apt-get" >&2
  apt_get_install redis-server
}

# ensure_chromium_installed installs Debian's chromium when it is not on
# PATH: the console's browser tests (internal/e2e TestConsole) drive it
# headless with chromedp.
ensure_chromium_installed() {
  command -v chromium >/dev/null 2>&1 && return
  echo "chromium not found: installing it with apt-get (for the console's browser tests)" >&2
  apt_get_install chromium
}

# ensure_prometheus_installed installs Debian's prometheus (prometheus and
# promtool) when missing: the alert rules are checked by promtool and run on
# a real Prometheus (internal/deploytest TestAlertRules, internal/e2e
# TestAlerts). The package's own service is not needed (the tests start
# their own prometheus on a free loopback port).
ensure_prometheus_installed() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && return
  echo "prometheus not found: installing it with apt-get (for the alert rules' tests)" >&2
  apt_get_install prometheus
}

# ensure_perf_installed installs Debian's linux-perf when perf is missing:
# scripts/bench-dispatch -redis-perf samples Redis with it.
ensure_perf_installed() {
  command -v perf >/dev/null 2>&1 && return
  echo "perf not found: installing linux-perf with apt-get (for -redis-perf)" >&2
  apt_get_install linux-perf
}

# redis_reachable URL: true when a Redis answers PING at URL.
redis_reachable() {
  redis-cli -u "$1" ping 2>/dev/null | grep -q PONG
}

# ensure_redis_running URL DIR: when nothing answers at URL (a redis:// URL on
# this machine), start a redis-server for it with AOF on, noeviction,
# hash-max-listpack-value 2048 (compact job records: docs/operations.md,
# Sizing) and its data in DIR. Prints what it did.
ensure_redis_running() {
  local url=$1 dir=$2
  if redis_reachable "$url"; then
    echo "using the Redis at $url"
    return
  fi
  local hostport=${url#redis://}; hostport=${hostport%%/*}; hostport=${hostport##*@}
  local host=${hostport%:*} port=${hostport##*:}
  mkdir -p "$dir"
  redis-server --daemonize yes --bind "$host" --port "$port" --dir "$dir" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
    --hash-max-listpack-value 2048 --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
  for _ in $(seq 50); do
    redis_reachable "$url" && { echo "started redis-server at $url (data in $dir)"; return; }
    sleep 0.1
  done
  echo "redis-server did not start; see $dir/redis.log" >&2
  return 1
}

# http_ok URL: true when an http:// URL answers 200 within a second (curl
# when installed, else bash's /dev/tcp).
http_ok() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null
    return
  fi
  local rest=${1#http://}
  local hostport=${rest%%/*} path=/
  [ "$rest" = "$hostport" ] || path=/${rest#*/}
  (
    exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" >&3
    IFS= read -r -t 1 status <&3 || exit 1
    [[ $status == HTTP/1.?" 200"* ]]
  ) 2>/dev/null
}

# Background processes started by bg_start, stopped by bg_stop_all.
BG_PIDS=()

# bg_start LOG CMD...: runs CMD in the background with stdin from /dev/null
# and stdout and stderr in LOG (truncated); sets BG_PID to its pid and adds
# it to BG_PIDS.
bg_start() {
  local log=$1
  shift
  "$@" </dev/null >"$log" 2>&1 &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
}

# bg_stop_all [SECONDS]: sends SIGTERM to every process bg_start started,
# waits up to SECONDS (default 30) for them to exit, then SIGKILLs the rest.
bg_stop_all() {
  local secs=${1:-30} pid alive
  [ ${#BG_PIDS[@]} -gt 0 ] || return 0
  for pid in "${BG_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq $((secs * 10))); do
    alive=0
    for pid in "${BG_PIDS[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    [ "$alive" -eq 1 ] || break
    sleep 0.1
  done
  for pid in "${BG_PIDS[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  BG_PIDS=()
}

# wait_http URL PID SECONDS: waits until URL answers 200; fails when
# process PID exits first or SECONDS pass.
wait_http() {
  local url=$1 pid=$2 secs=$3
  for _ in $(seq $((secs * 10))); do
    if http_ok "$url"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# sluice_version prints the version to stamp into the binaries: git describe
# --always --dirty in a git checkout, else nothing (the binaries then read
# their build info; see internal/version).
sluice_version() {
  git describe --always --dirty 2>/dev/null || true
}

# go_build ARGS... runs go build ARGS with sluice_version stamped into
# internal/version.Stamp (User-Agent: Sluice/<version>, the startup logs).
go_build() {
  go build -ldflags "-X github.com/sluicehq/sluice/internal/version.Stamp=$(sluice_version)" "$@"
}
