"""Realistic node files and tool outputs that have no recorded fixture under tests/fixtures.

The reliability parser fuzz (test_reliability_parsers.py) mutates these next to the recorded
ones. Each is the shape the real kernel or tool prints (kernel 6.x procfs, util-linux 2.38,
iputils 20221126, systemd 252, GRUB 2.06), shortened.
"""

from __future__ import annotations

MEMINFO = """MemTotal:       65536000 kB
MemFree:        40000000 kB
MemAvailable:   52000000 kB
Buffers:          120000 kB
Cached:          9000000 kB
HugePages_Total:       8
HugePages_Free:        8
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:         8404992 kB
DirectMap4k:      400000 kB
DirectMap2M:     9000000 kB
DirectMap1G:    58720256 kB
"""

PROC_MOUNTS = """sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/dev/nvme0n1p2 / ext4 rw,relatime,errors=remount-ro 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
hugetlbfs /dev/hugepages-1G hugetlbfs rw,relatime,pagesize=1024M 0 0
/dev/md127 /mnt/model-cache xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=2048,noquota 0 0
/dev/sdb1 /mnt/with\\040space ext4 rw,relatime 0 0
"""

MOUNTINFO = """22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
41 28 0:45 / /dev/hugepages rw,relatime shared:19 - hugetlbfs hugetlbfs rw,pagesize=2M
97 28 9:127 / /mnt/model-cache rw,noatime shared:52 - xfs /dev/md127 rw,attr2,inode64,logbufs=8,sunit=1024,swidth=2048
98 28 8:17 / /mnt/with\\040space rw,relatime shared:53 - ext4 /dev/sdb1 rw
120 97 0:60 / /etc/kubernetes/node-feature-discovery/features.d rw master:1 - overlay overlay rw,lowerdir=/a:/b
"""

FSTAB = """# /etc/fstab: static file system information.
# <file system> <mount point>   <type>  <options>       <dump>  <pass>
UUID=2b3c4d5e-0000-4000-8000-000000000001 /               ext4    errors=remount-ro 0       1
UUID=2b3c4d5e-0000-4000-8000-000000000002 /boot/efi       vfat    umask=0077      0       1
/swapfile                                 none            swap    sw              0       0
hugetlbfs /dev/hugepages-1G hugetlbfs pagesize=1G,mode=1770,gid=kvm 0 0
UUID=7f1e0a2b-1111-4222-8333-944455556666 /mnt/model-cache xfs noatime,nofail,x-systemd.device-timeout=30s 0 2
/dev/sdb1 /mnt/with\\040space ext4 defaults 0 2
"""

CMDLINE = ("BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=2b3c4d5e-0000-4000-8000-000000000001 ro "
           "quiet splash iommu=pt intel_iommu=on default_hugepagesz=1G hugepagesz=1G hugepages=8 "
           "isolcpus=2-15 nohz_full=2-15 \"dyndbg=file drivers/x.c +p\" vt.handoff=7\n")

GRUB_DEFAULT = """# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
GRUB_DEFAULT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"
GRUB_CMDLINE_LINUX="iommu=pt intel_iommu=on $GRUB_CMDLINE_LINUX_EXTRA"
export GRUB_CMDLINE_LINUX_DEFAULT='quiet splash default_hugepagesz=1G'
#GRUB_TERMINAL=console
"""

SYSCTL_CONF = """# /etc/sysctl.d/90-aiinfra-datapath.conf -- managed by aiinfra.datapath (sysctl_profile)
net.core.rmem_max = 268435456
net.core.wmem_max = 268435456
net.ipv4.tcp_rmem = 4096\t87380\t268435456
-net.ipv4.conf.all.rp_filter = 2
; a comment in the old style
vm/zone_reclaim_mode=1
kernel.numa_balancing =
net.ipv4.conf.eth0/1.rp_filter = 0
"""

FEATURES_D = """# managed by aiinfra.datapath (nfd_labels)
aiinfra.io/nvme-cache=true
aiinfra.io/gpu-nic-affinity=PIX
feature.node.kubernetes.io/rdma.capable
-aiinfra.io/removed
# +expiry-time=2030-01-01T00:00:00Z
aiinfra.io/mtu=9000
"""

NETWORKD_LINK = """# /etc/systemd/network/10-rail0.link
[Match]
MACAddress=02:dd:00:00:00:01
OriginalName=ens1f0np0 \\
  ens1f1np1

[Link]
Name=rail0
MTUBytes=9000
; old comment
# comment
"""

NETPLAN = """# This file is generated from information provided by the datasource.
network:
  version: 2
  renderer: networkd
  ethernets:
    eno1:
      dhcp4: true
      mtu: 1500
    ens1f0np0:
      match:
        macaddress: "02:dd:00:00:00:01"
      set-name: rail0
      mtu: 9000
      addresses: [198.18.1.11/24, "fd00::11/64"]
      routes:
        - to: 198.18.0.0/16
          via: 198.18.1.1
          metric: 100
      nameservers: {addresses: [8.8.8.8], search: [lab.example]}
  vlans:
    vlan10:
      id: 10
      link: eno1
      mtu: '1500'
"""

PING_PASSED = """PING 198.18.1.12 (198.18.1.12) from 198.18.1.11 ens1f0np0: 8972(9000) bytes of data.
8980 bytes from 198.18.1.12: icmp_seq=1 ttl=64 time=0.081 ms

--- 198.18.1.12 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 405ms
rtt min/avg/max/mdev = 0.081/0.114/0.169/0.039 ms
"""

PING_LOCAL_ERROR = """PING 198.18.1.12 (198.18.1.12) 8972(9000) bytes of data.
ping: local error: message too long, mtu=1500
ping: local error: message too long, mtu=1500

--- 198.18.1.12 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2040ms
"""

MANIFEST = """# sha256sum of the model files
9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  config.json
60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752 *model-00001-of-00002.safetensors
fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13  ./tokenizer/tokenizer.json
"""

MDADM_BRIEF = ("ARRAY /dev/md/md-cache metadata=1.2 name=node1:md-cache "
               "UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\n")

CPULISTS = ["0-3,8,10-11", "0-63", "0,2,4,6", "", "96-191"]
BDFS = ["0000:01:00.0", "01:00.0", "00000000:e6:00.1", "ffff:ff:1f.7"]
SPEEDS = ["16GT/s", "16.0 GT/s PCIe", "2.5GT/s (downgraded)", "8 GT/s", "Unknown"]
WIDTHS = ["x16", "16", "16x", "x8 (downgraded)"]
VERSIONS = ["28.39.1002", "22.31.1014", "16.35.2000 (MT_0000000834)", "1.2.3-rc1"]
SIZES = ["512G", "3.84TB", "1TiB", "1000", "10GiB", "0"]
