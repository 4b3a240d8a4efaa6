"""TuneD profiles the TuneD backend renders (``_tuned_profile.render``), read and applied by Debian's
real TuneD (bookworm: tuned 2.20.0-1, installed by scripts/bootstrap.sh and never started there).

- TuneD's own profile loader and merger (its Python package, run with TuneD's interpreter) load the
  rendered profile over ``throughput-performance`` from a temporary profile directory plus the
  package's /usr/lib/tuned: our [sysctl] values override the base profile's key by key, our [vm]
  options and our ``cmdline_aiinfra_datapath`` reach the merged profile, and the vm and bootloader
  plugins take those option names; ``cmdline_*`` options of an included profile come first.
- Broken profiles (an include of a missing profile, a line without ``=``) are errors to TuneD, and to
  our own reader (``_tuned.load``) too.
- Our reader agrees with TuneD on what a profile sets, except that it keeps units TuneD skips on
  this machine (``uname_regex``/``cpuinfo_regex``: Debian's throughput-performance has ThunderX-only
  [sysctl.thunderx] and [vm.thunderx]): that test is an expected failure until _tuned.py skips them.
- Live, in one-shot mode (``daemon = 0``), inside private network, mount and PID namespaces where
  /etc/tuned, /run, /boot, /etc/default, /etc/sysctl.d, /etc/sysctl.conf, the THP sysfs directory,
  /proc/cmdline, ``service`` and ``systemctl`` are temporary stand-ins: ``tuned-adm profile`` only
  records the profile and asks ``service tuned restart`` (it applies nothing itself); ``tuned``
  (what tuned.service runs) applies it and exits: the net.* sysctls read back the merged values,
  ``>``/``<`` modifiers compare with the live value, ``reapply_sysctl`` lets /etc/sysctl.d win, the
  THP files get our values, and the bootloader plugin writes /etc/tuned/bootcmdline, patches
  grub.cfg and /etc/default/grub (grub-mkconfig is never run). The host's own values are unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned_profile import render

from .sys_common import run, tool

pytestmark = pytest.mark.interop

SYSTEM_PROFILES = "/usr/lib/tuned"
MAIN_CONF = "/etc/tuned/tuned-main.conf"
GRUB_TEMPLATE = "/etc/grub.d/00_tuned"
THP = "/sys/kernel/mm/transparent_hugepage"
NAME = "aiinfra-datapath"
KERNEL_ARGS = ["iommu=pt", "hugepagesz=1G"]

# Run with TuneD's own interpreter: loads profiles as tuned/tuned-adm do (tuned.profiles.Loader with
# Locator/Factory/Merger), then reports the merged units, whether TuneD's unit manager would create
# each one here (enabled, cpuinfo_regex, uname_regex), the vm plugin's option names and the
# bootloader plugin's effective options (its merge of all cmdline* options).
LOADER = r"""
import json, sys
args = json.loads(sys.argv[1])
from tuned import profiles
from tuned.plugins.plugin_bootloader import BootloaderPlugin
from tuned.plugins.plugin_vm import VMPlugin
from tuned.profiles.exceptions import InvalidProfileException
from tuned.profiles.variables import Variables
from tuned.units.manager import Manager
from tuned.utils.commands import commands
from tuned.utils.global_config import GlobalConfig

config = GlobalConfig(config_file=args["main_conf"])
loader = profiles.Loader(profiles.Locator(args["dirs"]), profiles.Factory(), profiles.Merger(), config, Variables())
try:
    profile = loader.load(args["names"])
except InvalidProfileException as exc:
    print(json.dumps({"error": str(exc.args[0])}))
    sys.exit(0)
manager = object.__new__(Manager)
manager._config, manager._cmd = config, commands()
units = {}
for name, unit in profile.units.items():
    applies = unit.enabled and manager._unit_matches_cpuinfo(unit) and manager._unit_matches_uname(unit)
    units[name] = {"type": unit.type, "applies": bool(applies),
                   "options": {k: commands().unquote(v) for k, v in unit.options.items()}}
bootloader = None
if "bootloader" in units:
    bootloader = object.__new__(BootloaderPlugin)._get_effective_options(units["bootloader"]["options"])
print(json.dumps({"name": profile.name, "options": profile.options, "units": units, "bootloader": bootloader,
                  "vm_options": sorted(VMPlugin._get_config_options())}))
"""


def _tuned_python() -> str:
    """The interpreter of TuneD's own scripts (its ``#!``), which imports TuneD's package."""
    tuned_adm = tool("tuned-adm")
    with open(tuned_adm) as handle:
        shebang = handle.readline()
    assert shebang.startswith("#!"), shebang
    return shebang[2:].split()[0]


def _write_profile(directory: Path, name: str, text: str) -> None:
    (directory / name).mkdir(parents=True, exist_ok=True)
    (directory / name / "tuned.conf").write_text(text)


def _tuned_load(profile_dir: Path, names: list[str]) -> dict:
    python = _tuned_python()
    args = {"dirs": [SYSTEM_PROFILES, str(profile_dir)], "names": names, "main_conf": MAIN_CONF}
    done = run([python, "-Es", "-c", LOADER, json.dumps(args)])
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tuned_merges_our_profile_over_throughput_performance(tmp_path: Path) -> None:
    base = _tuned_load(tmp_path, ["throughput-performance"])["units"]["sysctl"]["options"]
    assert base["vm.dirty_ratio"] == "40" and base["vm.swappiness"] == "10"  # what we override
    text = render("throughput-performance", {"vm.dirty_ratio": "5", "vm.swappiness": "1", "net.core.somaxconn": "8192"},
                  {"enabled": "never", "defrag": "defer+madvise"}, KERNEL_ARGS)
    _write_profile(tmp_path, NAME, text)

    merged = _tuned_load(tmp_path, [NAME])
    assert "error" not in merged, merged
    units = merged["units"]
    assert merged["name"] == NAME and merged["options"]["summary"].startswith("aiinfra.datapath")
    assert "include" not in merged["options"]  # consumed by the loader
    # our values override the base profile's key by key; its other keys stay
    assert units["sysctl"]["options"] == {"vm.dirty_ratio": "5", "vm.dirty_background_ratio": "10",
                                          "vm.swappiness": "1", "net.core.somaxconn": "8192"}
    assert units["cpu"]["options"]["governor"] == "performance" and units["cpu"]["applies"]
    # [vm]: both option names are the vm plugin's own
    assert units["vm"] == {"type": "vm", "applies": True, "options": {
        "transparent_hugepages": "never", "transparent_hugepage.defrag": "defer+madvise"}}
    assert {"transparent_hugepages", "transparent_hugepage.defrag"} <= set(merged["vm_options"])
    # [bootloader]: the cmdline_<suffix> option is merged into the plugin's cmdline
    assert units["bootloader"]["options"] == {"cmdline_aiinfra_datapath": " ".join(KERNEL_ARGS)}
    assert merged["bootloader"]["cmdline"] == " ".join(KERNEL_ARGS)


def test_cmdline_of_the_included_profile_comes_first(tmp_path: Path) -> None:
    """network-latency sets cmdline_network_latency=skew_tick=1 and [vm] transparent_hugepages=never."""
    _write_profile(tmp_path, NAME, render("network-latency", {}, {"enabled": "madvise"}, KERNEL_ARGS))
    merged = _tuned_load(tmp_path, [NAME])
    assert list(merged["units"]["bootloader"]["options"]) == ["cmdline_network_latency", "cmdline_aiinfra_datapath"]
    assert merged["bootloader"]["cmdline"] == "skew_tick=1 " + " ".join(KERNEL_ARGS)
    assert merged["units"]["vm"]["options"] == {"transparent_hugepages": "madvise"}


def test_broken_profiles_are_errors_to_tuned_and_to_our_reader(tmp_path: Path) -> None:
    root = tmp_path / "root"
    profiles = root / "etc" / "tuned"
    profiles.mkdir(parents=True)
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "tuned").symlink_to(SYSTEM_PROFILES)
    shutil.copy(MAIN_CONF, profiles / "tuned-main.conf")

    _write_profile(profiles, NAME, render("aiinfra-missing-base", {"vm.swappiness": "1"}, {}, []))
    error = _tuned_load(profiles, [NAME]).get("error", "")
    assert error.startswith("Cannot find profile 'aiinfra-missing-base'"), error
    ours = _tuned.load(HostRoot(str(root)), [NAME])
    assert ours["missing"] == ["aiinfra-missing-base"]

    _write_profile(profiles, NAME, "[main]\nsummary=x\n\n[sysctl]\nvm.swappiness\n")
    error = _tuned_load(profiles, [NAME]).get("error", "")
    assert error == "Cannot parse '%s/%s/tuned.conf'." % (profiles, NAME), error
    ours = _tuned.load(HostRoot(str(root)), [NAME])
    assert ours["errors"] and "/etc/tuned/%s/tuned.conf" % NAME in ours["errors"][0]


def test_our_reader_sees_what_tuned_applies(tmp_path: Path) -> None:
    root = tmp_path / "root"
    profiles = root / "etc" / "tuned"
    profiles.mkdir(parents=True)
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "tuned").symlink_to(SYSTEM_PROFILES)
    shutil.copy(MAIN_CONF, profiles / "tuned-main.conf")
    _write_profile(profiles, NAME, render("throughput-performance", {"vm.dirty_ratio": "5"}, {}, KERNEL_ARGS))

    merged = _tuned_load(profiles, [NAME])
    tuned = {"sysctl": {}, "vm": {}}
    for unit in merged["units"].values():
        if unit["applies"] and unit["type"] in tuned:
            tuned[unit["type"]].update(unit["options"])
    ours = _tuned.load(HostRoot(str(root)), [NAME])
    assert {kind: {k: v["value"] for k, v in ours[kind].items()} for kind in ("sysctl", "vm")} == tuned


# --- live: tuned-adm and tuned in one-shot mode, in private namespaces -------------------------------

SYSCTLS = ("net.core.somaxconn", "net.ipv4.tcp_mtu_probing", "net.ipv4.tcp_fastopen", "net.ipv4.tcp_fin_timeout",
           "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes")
# the site's base profile: net.* keys only (per network namespace), one we override, one it alone
# sets, and the value modifiers (">N": raise to N, "<N": lower to N, compared with the live value)
SITE_BASE = """[main]
summary=the site's base profile (test)

[sysctl]
net.core.somaxconn=1024
net.ipv4.tcp_fastopen=3
net.ipv4.tcp_fin_timeout=>90
net.ipv4.tcp_keepalive_intvl=>30
net.ipv4.tcp_keepalive_probes=<5

[bootloader]
cmdline_site=skew_tick=1
"""
LIVE_ARGS = ["iommu=pt", "aiinfra.test=1"]
GRUB_CFG = """### BEGIN /etc/grub.d/00_header ###
set default="0"
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/10_linux ###
menuentry 'Debian GNU/Linux' {
\tlinux\t/vmlinuz-6.1.0-18-amd64 root=UUID=0f0e ro  quiet
\tinitrd\t/initrd.img-6.1.0-18-amd64
}
### END /etc/grub.d/10_linux ###
"""
# stand-ins that record their calls: `service` cannot start anything here; `systemctl` says no job runs
STUB = '#!/bin/sh\necho "$(basename "$0") $*" >> "%s"\nexit %d\n'

# Everything TuneD writes (or reads as the host's) is a temporary stand-in inside the namespaces; the
# script stops (set -e) before any TuneD command if one of these mounts fails.
LIVE = r"""
T=$1 TUNED_ADM=$2 TUNED=$3
mount --bind "$T/etc_tuned" /etc/tuned
mount -t tmpfs tmpfs /run
mkdir /run/tuned
mount --bind "$T/boot" /boot
mount --bind "$T/etc_default" /etc/default
if [ -d /etc/sysctl.d ]; then mount --bind "$T/sysctl.d" /etc/sysctl.d; fi
if [ -e /etc/sysctl.conf ]; then mount --bind "$T/sysctl.conf" /etc/sysctl.conf; fi
if [ -d "$T/thp" ]; then
  mount --bind "$T/thp" /sys/kernel/mm/transparent_hugepage
  test -e /sys/kernel/mm/transparent_hugepage/.stand-in
fi
mount --bind "$T/cmdline" /proc/cmdline
for cmd in service systemctl; do
  real=$(command -v "$cmd" || true)
  if [ -n "$real" ]; then mount --bind "$T/bin/$cmd" "$real"; fi
done
export PATH="$T/bin:$PATH"
out=$T/out
step() { name=$1; shift; "$@" > "$out/$name" 2>&1 && echo 0 > "$out/$name.rc" || echo $? > "$out/$name.rc"; }
sysctls() { for key in %s; do echo "$key=$(cat /proc/sys/$(echo "$key" | tr . /))"; done; }
sysctls > "$out/sysctl.before"
step active.none "$TUNED_ADM" active
step profile.missing "$TUNED_ADM" profile aiinfra-no-such-profile
step profile "$TUNED_ADM" profile %s
step active.preset "$TUNED_ADM" active
step tuned timeout 120 "$TUNED" --debug
sysctls > "$out/sysctl.reapply1"
sed -i 's/^reapply_sysctl = 1$/reapply_sysctl = 0/' /etc/tuned/tuned-main.conf
step tuned.reapply0 timeout 120 "$TUNED"
sysctls > "$out/sysctl.reapply0"
step active.after "$TUNED_ADM" active
step grub.d "%s"
sh -c '. /etc/default/grub; printf %%s "$GRUB_CMDLINE_LINUX_DEFAULT"' > "$out/default.cmdline"
ls -A /run/tuned > "$out/run.tuned"
""" % (" ".join(SYSCTLS), NAME, GRUB_TEMPLATE)


def _sysctl_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _host_state() -> dict:
    """What the live test must leave as it was: the host's values and TuneD's files on the host."""
    state: dict = {"sysctl": {}, "files": {}, "tuned_processes": []}
    for key in SYSCTLS:
        state["sysctl"][key] = Path("/proc/sys", *key.split(".")).read_text()
    for name in ("enabled", "defrag"):
        path = Path(THP, name)
        state["files"][str(path)] = path.read_text() if path.exists() else None
    for top in ("/etc/tuned", "/run/tuned", "/boot", "/etc/default/grub", "/etc/sysctl.d"):
        paths = [Path(top)] if not os.path.isdir(top) else sorted(Path(top).rglob("*"))
        for path in paths:
            if path.is_file():
                state["files"][str(path)] = (path.stat().st_mtime_ns, path.read_bytes())
            else:
                state["files"][str(path)] = path.exists()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"sbin/tuned") for arg in argv[:3]):
            state["tuned_processes"].append(proc.name)
    return state


def _active_thp(name: str) -> str | None:
    path = Path(THP, name)
    if not path.exists():
        return None
    found = re.search(r"\[([^\]]+)\]", path.read_text())
    return found.group(1) if found else None


def test_tuned_applies_our_profile_in_one_shot_mode_in_private_namespaces(tmp_path: Path) -> None:
    tuned_adm, tuned, unshare = tool("tuned-adm"), tool("tuned"), tool("unshare")
    assert os.path.isfile(GRUB_TEMPLATE), "tuned installs %s (the bootloader plugin needs it)" % GRUB_TEMPLATE
    if os.geteuid() != 0:
        pytest.skip("private namespaces need root")
    thp = {"enabled": _active_thp("enabled"), "defrag": _active_thp("defrag")}
    thp = {k: v for k, v in thp.items() if v}  # the host's current values: the profile sets the same

    t = tmp_path
    etc = t / "etc_tuned"
    etc.mkdir()
    shutil.copy("/etc/tuned/bootcmdline", etc / "bootcmdline")
    for name in ("active_profile", "profile_mode", "post_loaded_profile"):
        (etc / name).write_text("")
    (etc / "tuned-main.conf").write_text("daemon = 0\nenable_dbus = 0\nenable_unix_socket = 0\ndynamic_tuning = 0\n"
                                         "reapply_sysctl = 1\n")
    _write_profile(etc, "site-base", SITE_BASE)
    profile = render("site-base", {"net.core.somaxconn": "3072", "net.ipv4.tcp_mtu_probing": "1"}, thp, LIVE_ARGS)
    _write_profile(etc, NAME, profile)
    (t / "boot" / "grub").mkdir(parents=True)
    (t / "boot" / "grub" / "grub.cfg").write_text(GRUB_CFG)
    (t / "etc_default").mkdir()
    (t / "etc_default" / "grub").write_text('GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
                                            'GRUB_CMDLINE_LINUX=""\n')
    (t / "sysctl.d").mkdir()
    (t / "sysctl.d" / "90-site.conf").write_text("net.ipv4.tcp_mtu_probing = 2\n")
    (t / "sysctl.conf").write_text("")
    if thp:
        (t / "thp").mkdir()
        for name in thp:
            shutil.copy(Path(THP, name), t / "thp" / name)  # sysfs format: "always [madvise] never"
        (t / "thp" / ".stand-in").write_text("")
    (t / "cmdline").write_text("BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=UUID=0f0e ro quiet\n")
    (t / "bin").mkdir()
    for cmd, status in (("service", 1), ("systemctl", 0)):
        (t / "bin" / cmd).write_text(STUB % (t / "calls", status))
        (t / "bin" / cmd).chmod(0o755)
    (t / "out").mkdir()

    before = _host_state()
    done = run([unshare, "--net", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
                "sh", "-ec", LIVE, "sh", str(t), tuned_adm, tuned], timeout=400)
    after = _host_state()
    assert done.returncode == 0, done.stdout + done.stderr
    out = {p.name: p.read_text() for p in (t / "out").iterdir()}

    # the host: its values, TuneD's files and grub files are as they were; no TuneD process is left
    assert after == before
    assert not before["tuned_processes"]

    # tuned-adm without a daemon: reads /etc/tuned/active_profile; exits 1 while it is empty
    assert (out["active.none.rc"], out["active.none"]) == ("1\n", "No current active profile.\n")
    assert (out["profile.missing.rc"], out["profile.missing"]) == \
        ("1\n", "Requested profile 'aiinfra-no-such-profile' doesn't exist.\n")
    # `tuned-adm profile` (daemon = 0) applies nothing: it writes active_profile and profile_mode and
    # runs `service tuned restart`; it exits 0 even though the restart failed
    assert out["profile.rc"] == "0\n", out["profile"]
    assert out["profile"] == ("Trying to (re)start tuned...\nTuneD (re)start failed, you need to (re)start TuneD "
                              "by hand for changes to apply.\n")
    assert (etc / "active_profile").read_text() == NAME + "\n"
    assert (etc / "profile_mode").read_text() == "manual\n"
    preset = "It seems that tuned daemon is not running, preset profile is not activated.\nPreset profile: %s\n" % NAME
    assert (out["active.preset.rc"], out["active.preset"]) == ("0\n", preset)
    assert (out["active.after.rc"], out["active.after"]) == ("0\n", preset)
    calls = (t / "calls").read_text().splitlines()
    assert calls[0] == "service tuned restart"
    assert set(calls[1:]) <= {"systemctl is-system-running", "systemctl list-jobs"}, calls  # read-only queries

    # `tuned` (tuned.service's command) in one-shot mode: applies the active profile and exits
    log = out["tuned"]
    assert out["tuned.rc"] == "0\n", log
    assert "static tuning from profile '%s' applied" % NAME in log and "terminating TuneD in one-shot mode" in log
    assert " ERROR " not in log and "Unknown option" not in log, log
    assert out["tuned.reapply0.rc"] == "0\n", out["tuned.reapply0"]
    assert out["run.tuned"] == ""  # its PID file and saved state are gone

    fresh = _sysctl_values(out["sysctl.before"])  # a new network namespace's defaults
    want = {"net.core.somaxconn": "3072",  # ours over the site's 1024
            "net.ipv4.tcp_fastopen": "3",  # the site's alone
            "net.ipv4.tcp_fin_timeout": str(max(90, int(fresh["net.ipv4.tcp_fin_timeout"]))),
            "net.ipv4.tcp_keepalive_intvl": str(max(30, int(fresh["net.ipv4.tcp_keepalive_intvl"]))),
            "net.ipv4.tcp_keepalive_probes": str(min(5, int(fresh["net.ipv4.tcp_keepalive_probes"]))),
            "net.ipv4.tcp_mtu_probing": "2"}  # reapply_sysctl = 1: /etc/sysctl.d wins over our 1
    assert fresh["net.core.somaxconn"] != "3072" and fresh["net.ipv4.tcp_mtu_probing"] != "1"
    assert _sysctl_values(out["sysctl.reapply1"]) == want
    assert "Overriding sysctl parameter 'net.ipv4.tcp_mtu_probing' from '1' to '2'" in log
    assert _sysctl_values(out["sysctl.reapply0"]) == dict(want, **{"net.ipv4.tcp_mtu_probing": "1"})

    # [vm]: TuneD wrote our values (the host's own) into the THP files
    for name, value in thp.items():
        assert (t / "thp" / name).read_text() == value

    # [bootloader]: the site's cmdline, then ours, into /etc/tuned/bootcmdline (what /etc/grub.d/00_tuned
    # reads), grub.cfg and /etc/default/grub patched; no BLS here, so no grub-editenv
    cmdline = "skew_tick=1 " + " ".join(LIVE_ARGS)
    assert 'TUNED_BOOT_CMDLINE="%s"\n' % cmdline in (etc / "bootcmdline").read_text()
    assert (out["grub.d.rc"], out["grub.d"]) == ("0\n", 'set tuned_params="%s"\nset tuned_initrd=""\n' % cmdline)
    grub_cfg = (t / "boot" / "grub" / "grub.cfg").read_text()
    assert ('### BEGIN /etc/grub.d/00_tuned ###\nset tuned_params="%s"\nset tuned_initrd=""\n'
            '### END /etc/grub.d/00_tuned ###\n' % cmdline) in grub_cfg
    assert "\tlinux\t/vmlinuz-6.1.0-18-amd64 root=UUID=0f0e ro  quiet $tuned_params\n" in grub_cfg
    assert out["default.cmdline"] == "quiet $tuned_params"
    assert not (t / "boot" / "loader").exists()
