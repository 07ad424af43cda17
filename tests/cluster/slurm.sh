#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for tests/test_slurm_cluster.py (docs/cluster-path.md).
#
#   tests/cluster/slurm.sh up        # install if missing, start everything, wait for idle nodes
#   tests/cluster/slurm.sh status    # the daemons, the nodes and the accounting association
#   tests/cluster/slurm.sh down      # stop everything by PID file (--purge: delete the state too)
#
# munge, mariadb, slurmdbd (accounting, so `sacct` works as on a real cluster), slurmctld and two
# slurmd nodes (`slurmd -N n1`, `-N n2`), each declared with 8 emulated GPUs (empty files) and
# enough CPUs and memory for every per-rule request of profiles/slurm/config.yaml as typed.
# Nothing is enforced (task/none, no cgroups): the requests are scheduled and accounted, the jobs
# share this machine's cores. Every file lives in $RPB_SLURM_DIR except two symlinks the SLURM
# commands need, /etc/slurm/slurm.conf (the executor plugin strips SLURM_CONF) and
# /etc/slurm/gres.conf, and one /etc/hosts line naming n1 and n2 (torchrun's rendezvous resolves
# node names); `down` removes all three. Needs root (apt-get, daemons as SlurmUser=root).
set -euo pipefail

DIR="${RPB_SLURM_DIR:-/tmp/rpb-slurm}"
CLUSTER="${RPB_SLURM_CLUSTER:-rpb}"
ACCOUNT="${RPB_SLURM_ACCOUNT:-rpb_ci}"
PARTITION="${RPB_SLURM_PARTITION:-h200}"
DB_PORT="${RPB_SLURM_DB_PORT:-6821}"
NODES=(n1 n2)
NODE_PORTS=(6818 6819)  # slurmdbd on 6820 (its default 6819 would clash with n2)
GPUS_PER_NODE=8
# Larger than any request in profiles/slurm/config.yaml: generate and train_megatron ask 64 CPUs,
# megatron_import 249 GB.
NODE_CPUS=128
NODE_MEMORY_MB=2000000
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
HOSTS_MARK="# rpb-slurm test cluster"
ETC="$DIR/etc"
RUN="$DIR/run"
LOG="$DIR/log"

say() { echo "slurm.sh: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_for SECONDS WHAT LOGFILE COMMAND...: poll until COMMAND succeeds, else show the log and fail.
wait_for() {
    local seconds=$1 what=$2 log=$3
    shift 3
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
            [[ -f "$log" ]] && tail -n 30 "$log" >&2
            die "$what did not come up within ${seconds}s (log: $log)"
        fi
        sleep 0.2
    done
}

install_packages() {
    local missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    ((${#missing[@]} == 0)) && return
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

write_configs() {
    mkdir -p "$ETC" "$RUN" "$LOG" "$DIR/spool/ctld" "$DIR/munge"
    local host
    host="$(hostname -s)"
    {
        cat <<EOF
# Written by tests/cluster/slurm.sh: a one-machine test cluster, state in $DIR.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
# No systemd, no cgroups: processes tracked through /proc, nothing bound or limited.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job that names no memory gets 1 GB a CPU, not the whole declared node.
DefMemPerCPU=1000
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# The nodes are taken as declared: this machine has neither their cores, memory nor GPUs.
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6820
# The munge socket for talking to slurmdbd (AuthInfo covers slurmctld and slurmd only).
AccountingStoragePass=$DIR/munge/munge.socket
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations
# The executor plugin names jobs by run and puts the rule in the comment.
AccountingStoreFlags=job_comment
EOF
        local i
        for i in "${!NODES[@]}"; do
            echo "NodeName=${NODES[i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${NODE_PORTS[i]}" \
                "CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=2 CoresPerSocket=$((NODE_CPUS / 2)) ThreadsPerCore=1" \
                "RealMemory=$NODE_MEMORY_MB Gres=gpu:$GPUS_PER_NODE State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
    } >"$ETC/slurm.conf"

    {
        echo "AutoDetect=off"
        local node
        for node in "${NODES[@]}"; do
            mkdir -p "$DIR/gpu/$node"
            for ((g = 0; g < GPUS_PER_NODE; g++)); do : >"$DIR/gpu/$node/gpu$g"; done
            echo "NodeName=$node Name=gpu File=$DIR/gpu/$node/gpu[0-$((GPUS_PER_NODE - 1))]"
        done
    } >"$ETC/gres.conf"

    # slurmdbd refuses a config readable by others.
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6820
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$ETC/slurmdbd.conf"
}

link_configs() {
    mkdir -p /etc/slurm
    local name
    for name in slurm.conf gres.conf; do
        local link="/etc/slurm/$name"
        if [[ -e "$link" && ! -L "$link" ]]; then
            die "$link is a real file, not this cluster's link: move it away first"
        fi
        ln -sfn "$ETC/$name" "$link"
    done
    if ! grep -q "$HOSTS_MARK" /etc/hosts; then
        echo "127.0.0.1 ${NODES[*]} $HOSTS_MARK" >>/etc/hosts
    fi
}

start_munge() {
    alive "$RUN/munged.pid" && return
    local home="$DIR/munge"
    [[ -f "$home/munge.key" ]] || dd if=/dev/urandom of="$home/munge.key" bs=1024 count=1 status=none
    chmod 755 "$home"  # clients of every user reach the socket; the key stays 0400
    chmod 400 "$home/munge.key"
    chown -R munge:munge "$home"
    rm -f "$home/munge.socket"
    runuser -u munge -- /usr/sbin/munged --force --socket="$home/munge.socket" --key-file="$home/munge.key" \
        --pid-file="$home/munged.pid" --log-file="$home/munged.log" --seed-file="$home/munged.seed"
    wait_for 10 munged "$home/munged.log" test -S "$home/munge.socket" -a -s "$home/munged.pid"
    # The PID file lives where the munge user may write; keep a root-owned copy beside the others.
    cp "$home/munged.pid" "$RUN/munged.pid"
}

mariadb_client() { mariadb --no-defaults --socket="$RUN/mariadb.sock" -u root "$@"; }

start_mariadb() {
    alive "$RUN/mariadb.pid" && return
    if [[ ! -d "$DIR/mysql/mysql" ]]; then
        mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root \
            --auth-root-authentication-method=normal --skip-test-db >"$LOG/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed (log: $LOG/mariadb-install.log)"
    fi
    nohup mariadbd --no-defaults --datadir="$DIR/mysql" --user=root --bind-address=127.0.0.1 \
        --port="$DB_PORT" --socket="$RUN/mariadb.sock" --pid-file="$RUN/mariadb.pid" \
        --log-error="$LOG/mariadb.log" --skip-name-resolve --innodb-buffer-pool-size=64M \
        </dev/null >/dev/null 2>&1 &
    wait_for 60 mariadb "$LOG/mariadb.log" mariadb_client -e "SELECT 1"
    mariadb_client --batch <<EOF
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

start_slurmdbd() {
    alive "$RUN/slurmdbd.pid" && return
    SLURM_CONF="$ETC/slurm.conf" slurmdbd
    wait_for 60 slurmdbd "$LOG/slurmdbd.log" sacctmgr -n show cluster
}

# The cluster, its account and this user's association: what `sacct` and the plugin's account check read.
register_accounting() {
    local user
    user="$(id -un)"
    [[ -n "$(sacctmgr -n -P show cluster "$CLUSTER" format=cluster)" ]] ||
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    [[ -n "$(sacctmgr -n -P show account "$ACCOUNT" format=account)" ]] ||
        sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="rpb-repro CI" Organization=rpb >/dev/null
    [[ -n "$(sacctmgr -n -P show assoc user="$user" account="$ACCOUNT" format=user)" ]] ||
        sacctmgr -i add user "$user" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
}

start_slurmctld() {
    alive "$RUN/slurmctld.pid" && return
    SLURM_CONF="$ETC/slurm.conf" slurmctld
    wait_for 60 slurmctld "$LOG/slurmctld.log" scontrol ping
}

start_slurmd() {
    local node=$1
    alive "$RUN/slurmd-$node.pid" && return
    mkdir -p "$DIR/spool/$node"
    SLURM_CONF="$ETC/slurm.conf" slurmd -N "$node"
}

nodes_idle() {
    local states
    states="$(sinfo -h -N -o '%N %T' | sort -u)"
    [[ "$(grep -c ' idle$' <<<"$states")" == "${#NODES[@]}" ]]
}

up() {
    local start=$SECONDS
    install_packages
    write_configs
    link_configs
    start_munge
    start_mariadb
    start_slurmdbd
    register_accounting
    start_slurmctld
    local node
    for node in "${NODES[@]}"; do start_slurmd "$node"; done
    wait_for 60 "idle nodes ${NODES[*]}" "$LOG/slurmctld.log" nodes_idle
    say "up in $((SECONDS - start)) s: cluster $CLUSTER, partition $PARTITION, account $ACCOUNT, state in $DIR"
}

stop_pid() {
    local name=$1 pidfile=$2
    alive "$pidfile" || {
        rm -f "$pidfile"
        return 0
    }
    local pid
    pid="$(cat "$pidfile")"
    kill "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS > deadline)); then
            say "$name ($pid) ignored SIGTERM for 30 s: killing it"
            kill -9 "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    rm -f "$pidfile"
}

down() {
    local node
    for node in "${NODES[@]}"; do stop_pid "slurmd $node" "$RUN/slurmd-$node.pid"; done
    stop_pid slurmctld "$RUN/slurmctld.pid"
    stop_pid slurmdbd "$RUN/slurmdbd.pid"
    stop_pid mariadb "$RUN/mariadb.pid"
    stop_pid munged "$RUN/munged.pid"
    local name
    for name in slurm.conf gres.conf; do
        [[ "$(readlink "/etc/slurm/$name" 2>/dev/null)" == "$ETC/$name" ]] && rm -f "/etc/slurm/$name"
    done
    if grep -q "$HOSTS_MARK" /etc/hosts; then
        # /etc/hosts may be a bind mount: rewrite it in place rather than replacing the file.
        local kept
        kept="$(grep -v "$HOSTS_MARK" /etc/hosts)"
        printf '%s\n' "$kept" >/etc/hosts
    fi
    if [[ "${1:-}" == "--purge" ]]; then
        rm -rf "$DIR"
        say "down; state removed"
    else
        say "down; state kept in $DIR"
    fi
}

status() {
    local name
    for name in munged mariadb slurmdbd slurmctld "${NODES[@]/#/slurmd-}"; do
        if alive "$RUN/$name.pid"; then echo "$name: running ($(cat "$RUN/$name.pid"))"; else echo "$name: stopped"; fi
    done
    if alive "$RUN/slurmctld.pid"; then
        sinfo -N -o '%N %P %T %c %m %G'
        sacctmgr -n -P show assoc format=cluster,account,user
    fi
}

case "${1:-}" in
up) up ;;
down) down "${2:-}" ;;
status) status ;;
*)
    echo "usage: $0 up | status | down [--purge]   (state in \$RPB_SLURM_DIR, now $DIR)" >&2
    exit 2
    ;;
esac
