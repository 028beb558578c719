# Shared helpers for the scripts; source it, do not run it.

# ensure_redis_installed installs redis-server (Debian's package) when it is
# not on PATH. It needs root, as CI has.
ensure_redis_installed() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    return
  fi
  echo "redis-server not found: installing it with apt-get" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
}

# redis_reachable URL: true when a Redis answers PING at URL.
redis_reachable() {
  redis-cli -u "$1" ping 2>/dev/null | grep -q PONG
}

# ensure_redis_running URL DIR: when nothing answers at URL (a redis:// URL on
# this machine), start a redis-server for it with AOF on, noeviction and its
# data in DIR. Prints what it did.
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
    --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
  for _ in $(seq 50); do
    redis_reachable "$url" && { echo "started redis-server at $url (data in $dir)"; return; }
    sleep 0.1
  done
  echo "redis-server did not start; see $dir/redis.log" >&2
  return 1
}
