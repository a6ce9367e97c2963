#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests marked `slurm` (tests/test_compare_slurm.py):
#
#     bash tests/scripts/slurm_cluster.sh start    # installs slurm-wlm + munge when missing (root, apt)
#     export SLURM_CONF=/tmp/segan-slurm/slurm.conf # what `start` prints last; the tests find it themselves
#     bash tests/scripts/slurm_cluster.sh stop
#
# slurmctld and slurmd run on this host name with 2 CPUs (fewer where the machine has fewer), no
# cgroups (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none: containers without a writable
# cgroup tree run it too), SelectType=select/cons_tres, JobRequeue=1, every file in $SEGAN_SLURM_DIR
# (default /tmp/segan-slurm; /etc/slurm is not written). No accounting database: `sacct` answers
# "accounting storage is disabled", so the slurm launcher asks `squeue` what is queued and reads
# how a task ended from the record its task wrote (framework/comparison/slurm_launcher.py).
# munged is started when its socket is missing (and stopped by `stop` only if this script started it).
set -euo pipefail

DIR=${SEGAN_SLURM_DIR:-/tmp/segan-slurm}
CONF=$DIR/slurm.conf
HOST=$(hostname -s)
WAIT_S=${SEGAN_SLURM_WAIT_S:-60}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "slurm_cluster.sh: slurmctld/slurmd/munged missing and this is not root on Debian/Ubuntu (apt-get); install slurm-wlm and munge" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

write_conf() {
    local cpus memory
    cpus=$(nproc); [ "$cpus" -gt 2 ] && cpus=2
    # half the memory: slurmd drains a node that has less than RealMemory
    memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 2 ))
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    cat > "$CONF" <<EOF
ClusterName=segan-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds before it starts again (default 120): the requeue test would wait that long
AuthInfo=cred_expire=5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${SEGAN_SLURMCTLD_PORT:-6817}
SlurmdPort=${SEGAN_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
SchedulerType=sched/backfill
MinJobAge=300
KillWait=10
InactiveLimit=0
NodeName=$HOST CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n </dev/null >/dev/null 2>&1; then
        return
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    [ -f /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; chmod 400 /etc/munge/munge.key; }
    chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "munged" || munged --force
    else
        munged --force
    fi
    touch "$DIR/munged.started-here"
}

wait_idle() {
    local waited=0
    while [ "$waited" -lt "$WAIT_S" ]; do
        if SLURM_CONF=$CONF sinfo -h -o "%t" 2>/dev/null | grep -qx "idle"; then
            return
        fi
        sleep 1; waited=$((waited + 1))
    done
    echo "slurm_cluster.sh: the node is not idle after ${WAIT_S} s: $(SLURM_CONF=$CONF sinfo -h -o '%t %E' 2>&1 | head -1); see $DIR/log" >&2
    exit 1
}

stop() {
    local name
    for name in slurmd slurmctld; do
        if [ -f "$DIR/$name.pid" ] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null; then
            kill "$(cat "$DIR/$name.pid")"
        fi
    done
    if [ -f "$DIR/munged.started-here" ] && [ -f /run/munge/munged.pid ]; then
        kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
        rm -f "$DIR/munged.started-here"
    fi
}

case "${1:-}" in
    start)
        install_packages
        stop  # a cluster this script left running: restarted with the config below
        write_conf
        start_munge
        slurmctld -f "$CONF" -c
        slurmd -f "$CONF"
        wait_idle
        echo "export SLURM_CONF=$CONF"
        ;;
    stop)
        stop
        ;;
    *)
        echo "usage: $0 start|stop" >&2
        exit 2
        ;;
esac
