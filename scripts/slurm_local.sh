#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the SLURM test (tests/test_slurm.py) and for trying
# the slurm profile by hand:
#
#   eval "$(bash scripts/slurm_local.sh start /tmp/slurm)"   # prints `export SLURM_CONF=...`
#   snakemake --profile workflow/profiles/slurm ...
#   bash scripts/slurm_local.sh stop /tmp/slurm
#
# Debian's slurm-wlm 22.05 (slurmctld, slurmd), slurmdbd on a private MariaDB (so that sacct, which the
# executor plugin uses for job states, has accounting to read) and munge; installed with apt-get when
# missing. Every daemon keeps its configuration, state, socket, log and pid file under DIR and listens on
# free local ports, so nothing touches /etc or a cluster this machine may belong to. One partition `cpu`
# (this machine, no GPUs). `stop` ends exactly the daemons `start` wrote pid files for.
set -euo pipefail

cmd=${1:?usage: slurm_local.sh start|stop DIR}
dir=${2:?usage: slurm_local.sh start|stop DIR}
dir=$(realpath -m "$dir")  # one spelling for start and stop: stop finds job processes by this path

pids=(slurmctld slurmd slurmdbd mariadbd munged)  # stop order: reverse of start

stop() {
  local name pid jobs
  # Jobs first (their processes outlive slurmd): cancel every job of this private cluster, wait for them.
  if [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    jobs=$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      SLURM_CONF=$dir/slurm.conf scancel --full $jobs 2>/dev/null || true
      for _ in $(seq 100); do
        [[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.2
      done
    fi
  fi
  for name in "${pids[@]}"; do
    [[ -f $dir/$name.pid ]] || continue
    pid=$(cat "$dir/$name.pid")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
  reap_jobs
}

# Job processes that outlive the daemons: a job slurmd was still starting when `stop` cancelled it can
# leave its slurmstepd, and the job under it, running after slurmd is gone. Both carry this cluster's
# SLURM_CONF in their environment (slurmd's, and the submitter's via sbatch's --export=ALL); a job step
# whose environment lost it (the executor plugin's inner srun) is found as a descendant of its slurmstepd.
# Each is sent TERM, then KILL after 5 s. A client that merely points at the cluster (a shell, snakemake)
# has no SLURM_JOB_ID and is no slurmstepd, so it is left alone.
reap_jobs() {
  python3 - "$dir/slurm.conf" <<'PY'
import os, signal, sys, time

def alive(pid):  # a zombie has exited: its parent just has not reaped it yet
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


conf = f"SLURM_CONF={sys.argv[1]}".encode()
me = {os.getpid(), os.getppid()}
parent, marked = {}, set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            parent[int(pid)] = int(f.read().rsplit(b")", 1)[1].split()[1])
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except (OSError, IndexError, ValueError):
        continue
    if conf in env and (cmd.startswith(b"slurmstepd") or any(v.startswith(b"SLURM_JOB_ID=") for v in env)):
        marked.add(int(pid))
changed = True
while changed:  # every descendant of a marked process
    grown = {p for p, pp in parent.items() if pp in marked} - marked
    changed = bool(grown)
    marked |= grown
marked -= me
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in marked:
        try:
            os.kill(pid, sig)
        except OSError:  # gone already, or not ours to signal: reported below if it stays
            pass
    for _ in range(50):
        marked = set(filter(alive, marked))
        if not marked:
            break
        time.sleep(0.1)
    if not marked:
        break
if marked:
    print(f"slurm_local.sh: job processes {sorted(marked)} did not stop", file=sys.stderr)
PY
}

# The executor plugin's job step drops SLURM_CONF from the environment of its inner srun, which then reads
# the default /etc/slurm/slurm.conf: start links that to DIR's configuration (refusing to replace a real one)
# and stop removes the link.
etc_conf=/etc/slurm/slurm.conf
unlink_conf() {
  if [[ -L $etc_conf && $(readlink "$etc_conf") == "$dir/slurm.conf" ]]; then rm -f "$etc_conf"; fi
}

if [[ $cmd == stop ]]; then
  stop
  unlink_conf
  exit 0
fi
[[ $cmd == start ]] || { echo "slurm_local.sh: unknown command '$cmd' (start|stop)" >&2; exit 2; }

need=()
command -v slurmctld >/dev/null && command -v slurmd >/dev/null || need+=(slurm-wlm)
command -v slurmdbd >/dev/null || need+=(slurmdbd)
command -v munged >/dev/null || need+=(munge)
command -v mariadbd >/dev/null || need+=(mariadb-server)
if ((${#need[@]})); then
  echo "slurm_local.sh: installing ${need[*]} (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi

# Anything left from an earlier start in DIR is stopped first; a failed start stops what it started.
stop
trap 'echo "slurm_local.sh: start failed; logs in $dir" >&2; stop; unlink_conf' ERR
mkdir -p "$dir"/{state,spool,db,log}
chmod 755 "$dir"
ports=($(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
))
ctld_port=${ports[0]} slurmd_port=${ports[1]} dbd_port=${ports[2]} db_port=${ports[3]}
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 3 / 4 ))

# munge on its default socket (the Slurm clients, sacct included, always use that one): a munged already
# serving it is used as it is; otherwise one with its own key under DIR.
if ! { [[ -S /run/munge/munge.socket.2 ]] && munge -n </dev/null | unmunge >/dev/null 2>&1; }; then
  [[ -f $dir/munge.key ]] || { head -c 1024 /dev/urandom > "$dir/munge.key"; chmod 400 "$dir/munge.key"; }
  mkdir -p /run/munge
  munged --force --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
fi

# MariaDB for slurmdbd, on a local TCP port only.
if [[ ! -d $dir/db/mysql ]]; then
  mariadb-install-db --user=root --datadir="$dir/db" --auth-root-authentication-method=socket \
    > "$dir/log/mariadb-install.log" 2>&1
fi
mariadbd --user=root --datadir="$dir/db" --socket="$dir/mysql.sock" --bind-address=127.0.0.1 \
  --port="$db_port" --pid-file="$dir/mariadbd.pid" --log-error="$dir/log/mariadbd.log" </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do [[ -S $dir/mysql.sock ]] && break; sleep 0.2; done
mariadb --socket="$dir/mysql.sock" -u root <<'EOF'
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF

cat > "$dir/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
chmod 600 "$dir/slurmdbd.conf"

cat > "$dir/slurm.conf" <<EOF
ClusterName=leanlm
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$dir/slurm.conf
if [[ -e $etc_conf && ! -L $etc_conf ]]; then
  echo "slurm_local.sh: $etc_conf exists (a real SLURM installation?); not replacing it" >&2
  false
fi
mkdir -p /etc/slurm
ln -sfn "$dir/slurm.conf" "$etc_conf"

slurmdbd
for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
sacctmgr -i add cluster leanlm >/dev/null 2>&1 || true
slurmctld
slurmd
for _ in $(seq 150); do
  [[ $(sinfo -h -o %t 2>/dev/null) == idle ]] && break
  sleep 0.2
done
[[ $(sinfo -h -o %t) == idle ]] || { echo "slurm_local.sh: node $host did not become idle" >&2; false; }
trap - ERR
echo "export SLURM_CONF=$dir/slurm.conf"
