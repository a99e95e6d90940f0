# Shared by the HTTP scripts (source it): nginx with the http-server preset's configuration for
# a small body, and the CPU ticks of a server's processes.

# nginx_conf DIR CONNS WORKERS PORT: writes DIR/nginx.conf, an 88-byte body on 127.0.0.1:PORT
# with WORKERS workers, connection limits well above CONNS, no access log, unlimited
# keep-alive requests, reuseport and a backlog of 4096.
nginx_conf() {
    local dir=$1 conns=$2 workers=$3 port=$4 body
    body=$(python3 -c "print('x' * 88, end='')")
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<CONF
user root;
worker_processes $workers;
worker_rlimit_nofile $((2 * (conns + 1024) * workers));
pid $dir/nginx.pid;
error_log $dir/error.log warn;
daemon off;
events { worker_connections $((conns + 1024)); }
http {
    access_log off; keepalive_requests 1000000000; keepalive_timeout 65; tcp_nodelay on;
    client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
    uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
    server { listen 127.0.0.1:$port reuseport backlog=4096; location / { return 200 "$body"; } }
}
CONF
}

# wait_listening PORT: true once 127.0.0.1:PORT accepts, false after 5 s.
wait_listening() {
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# ticks PID: CPU ticks (user + system) of PID and its children (nginx's workers).
ticks() {
    local t=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo $t
}

# host_idle: the host's idle ticks and all its ticks so far ("IDLE ALL", from /proc/stat).
host_idle() {
    awk '/^cpu /{all = 0; for (i = 2; i <= NF; i++) all += $i; print $5, all; exit}' /proc/stat
}

# start_server DIR CONNS PORT SET: starts a server on 127.0.0.1:PORT, logging to DIR/server.log,
# and sets server_pid. SET `nginx` runs nginx with nginx_conf (workers = CPUs), `nginx --workers
# N` with N workers, anything else `$sp serve SET` ($sp: the sendpath binary). Fails unless it
# listens within 5 s.
start_server() {
    local dir=$1 conns=$2 port=$3 set=$4
    if [[ $set == nginx* ]]; then
        local workers=${set#nginx --workers }
        [ "$set" = nginx ] && workers=$(nproc)
        nginx_conf "$dir" "$conns" "$workers" "$port"
        nginx -c "$dir/nginx.conf" -p "$dir" >"$dir/server.log" 2>&1 & server_pid=$!
    else
        # shellcheck disable=SC2086,SC2154
        "$sp" serve $set --listen "127.0.0.1:$port" -t 120s >"$dir/server.log" 2>&1 & server_pid=$!
    fi
    wait_listening "$port" && kill -0 "$server_pid" 2>/dev/null
}

# stop_server SET: stops what start_server started (nginx gracefully, serve with SIGINT, so it
# prints its report) and waits for it.
stop_server() {
    if [[ $1 == nginx* ]]; then kill -QUIT "$server_pid" || true; else kill -INT "$server_pid" || true; fi
    wait "$server_pid" 2>/dev/null || true
}
