#!/bin/bash
# Runs test/bench/idle-sockets.bench.ts inside a virtual machine with a kernel of its own, for
# hosts whose hard limit on open files (`ulimit -Hn`) is under the sockets asked for and may not
# be raised (a container without CAP_SYS_RESOURCE). As root:
#
#   test/bench/idle-sockets/guest.sh [sockets=100000] [memory=12G]
#
# The guest sees the host's whole file system over 9p (this checkout, its node_modules, the
# PostgreSQL and Redis binaries), with /tmp, /run and /dev/shm of its own in memory, starts a
# private PostgreSQL and Redis on its loopback, lifts its own limits (open files, ephemeral ports,
# accept backlog) and runs the benchmark; its output is printed here. It boots Debian's kernel
# (downloaded once with apt-get into $GUEST_DIR) from an initramfs of busybox and the 9p modules.
# KVM is used where the host offers it; otherwise QEMU emulates the CPU, and every time it prints
# is many times a native run's: compare the guest's Parley with the guest's bare Bun server, and
# memory (which emulation does not change) with the host's.
set -euo pipefail

if [[ "${1:-}" == "--inside" ]]; then
  # PID 1 of the guest, on the host's root.
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  mount -t proc proc /proc
  mount -t sysfs sys /sys
  mkdir -p /dev/pts /dev/shm
  mount -t devpts devpts /dev/pts
  mount -t tmpfs shm /dev/shm
  mount -t tmpfs tmp /tmp
  mount -t tmpfs run /run
  sockets=$2 checkout=$3 log=$4 accel=$5
  # The steps stop at the first that fails (a subshell on the left of || would ignore set -e),
  # and PID 1 goes on to power off whatever happened.
  set +e
  (
    set -e
    ip link set lo up
    ulimit -Hn 1048576
    ulimit -n 1048576
    sysctl -q -w net.ipv4.ip_local_port_range="1024 65535" net.core.somaxconn=65535 \
      net.ipv4.tcp_max_syn_backlog=65535
    echo "guest: $(nproc) cores, $(free -m | awk '/Mem/{print $2}') MiB, open files $(ulimit -n)," \
      "kernel $(uname -r), accelerator $accel"
    pgbins=(/usr/lib/postgresql/*/bin)
    pgbin=${pgbins[-1]}
    mkdir -p /tmp/pg /tmp/redis
    chown postgres /tmp/pg
    runuser -u postgres -- "$pgbin/initdb" -D /tmp/pg -A trust >/dev/null
    runuser -u postgres -- "$pgbin/pg_ctl" -D /tmp/pg -l /tmp/pg.log -w \
      -o "-k /tmp -c listen_addresses=127.0.0.1" start >/dev/null
    createdb -h 127.0.0.1 -U postgres bench
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /tmp/redis \
      --logfile /tmp/redis/log
    cd "$checkout"
    TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench node_modules/.bin/bun \
      test/bench/idle-sockets.bench.ts "$sockets"
  ) >"$log" 2>&1
  status=$?
  [[ $status -eq 0 ]] || echo "the benchmark failed: $status" >>"$log"
  sync
  echo o >/proc/sysrq-trigger
  sleep 60
  exit 1
fi

sockets=${1:-100000}
memory=${2:-12G}
here=$(cd "$(dirname "$0")" && pwd)
checkout=$(cd "$here/../../.." && pwd)
dir=${GUEST_DIR:-/var/tmp/parley-guest}
if [[ $EUID -ne 0 ]]; then echo "guest.sh: run it as root (it installs packages and shares / with the guest)" >&2; exit 1; fi
if [[ ! -x "$checkout/node_modules/.bin/bun" ]]; then
  echo "guest.sh: $checkout has no node_modules/.bin/bun: run npm test or npm start there once first" >&2
  exit 1
fi
mkdir -p "$dir"
cd "$dir"

if ! command -v qemu-system-x86_64 >/dev/null || ! command -v cpio >/dev/null || [[ ! -x /bin/busybox ]]; then
  apt-get install -y -q qemu-system-x86 busybox-static cpio >/dev/null
fi
if [[ ! -d kernel ]]; then
  image=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
  apt-get download "$image" >/dev/null 2>&1
  dpkg -x "$image"_*.deb kernel.partial && mv kernel.partial kernel
fi
vmlinuz=(kernel/boot/vmlinuz-*)
modules=(kernel/lib/modules/*/kernel)

# /dev/kvm may be there where the CPU offers no virtualisation to use it with (a nested guest).
accel=tcg
if grep -q -w -E 'vmx|svm' /proc/cpuinfo && [[ -w /dev/kvm ]]; then accel=kvm; fi

# The initramfs: load virtio's and 9p's modules, mount the host's root, and hand over to it.
order="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"
rm -rf initramfs && mkdir -p initramfs/{bin,modules,dev,root}
cp /bin/busybox initramfs/bin/
for module in $order; do cp "$(find "${modules[-1]}" -name "$module.ko")" initramfs/modules/; done
cat >initramfs/init <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t devtmpfs dev /dev
for module in $order; do insmod /modules/\$module.ko; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose host /root
mount --move /dev /root/dev
exec switch_root /root /bin/bash $here/guest.sh --inside $sockets $checkout $dir/output $accel
EOF
chmod +x initramfs/init
(cd initramfs && find . | cpio -o -H newc 2>/dev/null | gzip >../initramfs.gz)

rm -f output
cpu=max
[[ $accel == kvm ]] && cpu=host
qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp "$(nproc)" -m "$memory" -display none -no-reboot -monitor none \
  -kernel "${vmlinuz[-1]}" -initrd initramfs.gz -append "console=ttyS0 panic=-1 edd=off quiet" \
  -virtfs local,path=/,mount_tag=host,security_model=passthrough,multidevs=remap \
  -serial file:console.log
cat output
