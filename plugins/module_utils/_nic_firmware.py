# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NIC firmware facts and compliance (stdlib only; never flashes anything).

Sources, in order of preference, all merged when present:

* ``ethtool -i IF``: ``firmware-version: 28.39.3560 (MT_0000000838)`` carries the PSID in
  parentheses; ``version:`` is the driver version; ``bus-info:`` the PCI address.
* ``devlink -j dev info``: ``info["pci/BDF"].versions.fixed["fw.psid"]`` (the board id),
  ``running``/``stored`` ``fw.version``. Stored ``255.255.65535`` means the query failed.
* sysfs of the RDMA device: ``/sys/class/net/IF/device/infiniband/HCA/{fw_ver,board_id}``.

Policies match on PSID (board id) and/or driver, never on a product name.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import sysfs_device
from ansible_collections.aiinfra.datapath.plugins.module_utils._version import compare_versions

_FW = re.compile(r"^(?P<version>[^\s(]+)(?:\s*\((?P<psid>[^)]+)\))?")
STORED_QUERY_FAILED = "255.255.65535"


def parse_ethtool_info(text):
    """``ethtool -i`` output -> dict (empty values become None); splits version and PSID."""
    info = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        key, value = line.split(":", 1)
        info[key.strip()] = value.strip() or None
    fw = info.get("firmware-version")
    info["fw_version"], info["psid"] = None, None
    if fw:
        m = _FW.match(fw)
        if m:
            info["fw_version"] = m.group("version").rstrip(",")
            info["psid"] = m.group("psid")
    return info


class DevlinkOutputError(ValueError):
    """``devlink -j dev info`` printed something that is not its JSON document."""


def parse_devlink_info(text):
    """``devlink -j dev info`` -> ``{bus: {driver, serial, psid, fw_running, fw_stored}}``.

    Raises DevlinkOutputError, with what was wrong, for output that is not devlink's JSON, so
    that a caller can say devlink was unreadable rather than that it reported nothing.
    """
    try:
        data = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:
        raise DevlinkOutputError("not JSON (%s): %r" % (exc, (text or "")[:80]))
    if not isinstance(data, dict) or not isinstance(data.get("info", {}), dict):
        raise DevlinkOutputError("JSON without an \"info\" object: %r" % (text or "")[:80])
    out = {}
    for handle, entry in (data.get("info") or {}).items():
        if not isinstance(entry, dict):
            raise DevlinkOutputError("entry %s is not an object" % handle)
        bus = handle.split("/", 1)[1] if "/" in handle else handle
        versions = _object(entry.get("versions"), handle, "versions")
        fixed, running, stored = (_object(versions.get(k), handle, "versions." + k)
                                  for k in ("fixed", "running", "stored"))
        stored_fw = _text(stored, "fw.version", handle) or _text(stored, "fw", handle)
        out[bus] = {
            "driver": _text(entry, "driver", handle),
            "serial": _text(entry, "serial_number", handle),
            "psid": _text(fixed, "fw.psid", handle) or _text(fixed, "board.id", handle),
            "fw_running": _text(running, "fw.version", handle) or _text(running, "fw", handle),
            "fw_stored": None if stored_fw == STORED_QUERY_FAILED else stored_fw,
        }
    return out


def _object(value, handle, what):
    if not value:
        return {}
    if not isinstance(value, dict):
        raise DevlinkOutputError("entry %s: %s is not an object" % (handle, what))
    return value


def _text(obj, key, handle):
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value or None
    raise DevlinkOutputError("entry %s: %s is not a string: %r" % (handle, key, value))


def collect(host, runner, ifname, ethtool=None, devlink_info=None):
    """Facts of one NIC; ``devlink_info`` is the parsed ``devlink -j dev info`` of the node."""
    net = "/sys/class/net/%s" % ifname
    nic = {"interface": ifname, "bus_info": None, "driver": None, "driver_version": None,
           "driver_inbox": None, "firmware_version": None, "firmware_stored": None, "psid": None,
           "sources": [], "physical": host.exists(net + "/device"), "notes": [], "source_notes": {}}
    looked = nic["source_notes"]  # what each source said, for the reason of an unknown version
    if ethtool:
        rc, out, err = runner.run([ethtool, "-i", ifname], check=False)
        if rc == 0:
            info = parse_ethtool_info(out)
            nic["sources"].append("ethtool")
            nic.update(driver=info.get("driver"), driver_version=info.get("version"),
                       bus_info=info.get("bus-info"), firmware_version=info["fw_version"], psid=info["psid"])
            looked["ethtool"] = "ethtool -i gave %s" % (
                "firmware %s" % info["fw_version"] if info["fw_version"] else "no firmware-version")
            # ethtool's "version:" is the driver's own version, or for a driver built into the
            # kernel (inbox), the kernel release: say which
            release = host.read("/proc/sys/kernel/osrelease")
            if nic["driver_version"] and release and nic["driver_version"] == release:
                nic["driver_inbox"] = True
                nic["notes"].append("driver_version %s is the kernel release: the inbox %s driver "
                                    "(ethtool -i reports no version of its own)" % (release, nic["driver"]))
            elif nic["driver_version"]:
                nic["driver_inbox"] = False
        else:
            nic["notes"].append("ethtool -i failed: %s" % (err or out).strip())
            looked["ethtool"] = "ethtool -i failed"
    else:
        looked["ethtool"] = "ethtool is not installed"
    if nic["physical"] and (not nic["bus_info"] or not nic["driver"]):
        bus, driver = sysfs_device(host, ifname)
        nic["bus_info"] = nic["bus_info"] or bus
        nic["driver"] = nic["driver"] or driver
    dl = (devlink_info or {}).get(nic["bus_info"] or "") if nic["bus_info"] else None
    if devlink_info is None:
        looked["devlink"] = "devlink was not read (not installed, failed or unreadable: see notes)"
    elif not dl:
        looked["devlink"] = "devlink has no entry for %s" % (nic["bus_info"] or "a device without a PCI address")
    if dl:
        nic["sources"].append("devlink")
        nic["driver"] = nic["driver"] or dl["driver"]
        nic["psid"] = nic["psid"] or dl["psid"]
        nic["firmware_version"] = nic["firmware_version"] or dl["fw_running"]
        nic["firmware_stored"] = dl["fw_stored"]
        if dl["fw_running"] and nic["firmware_version"] and dl["fw_running"] != nic["firmware_version"]:
            nic["notes"].append("ethtool reports %s, devlink running %s"
                                % (nic["firmware_version"], dl["fw_running"]))
    hcas = host.listdir(net + "/device/infiniband")
    looked["sysfs"] = "sysfs has no RDMA device for it"
    if hcas and (not nic["firmware_version"] or not nic["psid"]):
        base = "%s/device/infiniband/%s" % (net, hcas[0])
        fw, board = host.read(base + "/fw_ver"), host.read(base + "/board_id")
        looked["sysfs"] = "sysfs RDMA device %s has %s" % (hcas[0], "fw_ver %s" % fw if fw else "no fw_ver")
        if fw or board:
            nic["sources"].append("sysfs")
            nic["firmware_version"] = nic["firmware_version"] or fw or None
            nic["psid"] = nic["psid"] or board or None
    if nic["firmware_stored"] and nic["firmware_version"] and \
            compare_versions(nic["firmware_stored"], nic["firmware_version"]) != 0:
        nic["notes"].append("stored firmware %s differs from running %s: activation pending (reset or reboot)"
                            % (nic["firmware_stored"], nic["firmware_version"]))
    return nic


def _same_psid(a, b):
    return (a or "").strip().lower() == (b or "").strip().lower()


def select_policy(nic, policies):
    """The most specific policy for a NIC (PSID+driver > PSID > driver); (policy, why-not)."""
    best, best_score, blocked = None, -1, []
    for policy in policies:
        if policy.get("driver") and policy["driver"] != nic.get("driver"):
            continue
        if policy.get("psid"):
            if not nic.get("psid"):
                blocked.append(policy["psid"])
                continue
            if not _same_psid(policy["psid"], nic["psid"]):
                continue
        score = (2 if policy.get("psid") else 0) + (1 if policy.get("driver") else 0)
        if score > best_score:
            best, best_score = policy, score
    why = None
    if best is None:
        if blocked:
            why = "PSID not reported; policies for PSID %s need it" % ", ".join(blocked)
        else:
            why = "no policy for driver %s, PSID %s" % (nic.get("driver") or "?", nic.get("psid") or "?")
    return best, why


def evaluate(nic, policies):
    """Compliance row: status compliant | noncompliant | unknown, with the reason."""
    row = {"interface": nic["interface"], "bus_info": nic.get("bus_info"), "driver": nic.get("driver"),
           "psid": nic.get("psid"), "firmware_version": nic.get("firmware_version"), "policy": None,
           "needs": None, "status": "unknown", "reason": None}
    if not nic.get("firmware_version"):
        where = ""
        if not nic.get("physical"):
            where = " (virtual interface: no /sys/class/net/%s/device)" % nic["interface"]
        said = "; ".join(nic["source_notes"][k] for k in ("ethtool", "devlink", "sysfs")
                         if nic.get("source_notes", {}).get(k))
        row["reason"] = "firmware version not reported%s: %s" % (where, said or "no source was read")
        return row
    policy, why = select_policy(nic, policies)
    if policy is None:
        row["reason"] = why
        return row
    row["policy"] = dict((k, policy.get(k)) for k in ("driver", "psid", "min_version", "allowed"))
    version = nic["firmware_version"]
    needs, problems = [], []
    allowed = policy.get("allowed") or []
    if allowed:
        needs.append("one of %s" % ", ".join(allowed))
        if not any(compare_versions(version, a) == 0 for a in allowed):
            problems.append("%s is not in the allowed list %s" % (version, ", ".join(allowed)))
    if policy.get("min_version"):
        needs.append(">= %s" % policy["min_version"])
        if compare_versions(version, policy["min_version"]) < 0:
            problems.append("%s is older than the minimum %s" % (version, policy["min_version"]))
    row["needs"] = " and ".join(needs) or None
    if not needs:
        row["reason"] = "policy sets neither min_version nor allowed"
        return row
    row["status"] = "noncompliant" if problems else "compliant"
    row["reason"] = "; ".join(problems) or "%s meets %s" % (version, row["needs"])
    return row


class NicFirmware(Capability):
    """Firmware facts of the node's NICs and their compliance table (read-only)."""

    name = "nic_firmware"
    read_only = True  # never waits for a run that changes the node

    @classmethod
    def options(cls):
        return dict(
            interfaces=dict(type="list", elements="str"),
            policies=dict(type="list", elements="dict", default=[], options=dict(
                driver=dict(type="str"), psid=dict(type="str"), min_version=dict(type="str"),
                allowed=dict(type="list", elements="str", default=[]),
            )),
            fail_on_noncompliant=dict(type="bool", default=False),
        )

    def validate(self):
        for index, policy in enumerate(self.params["policies"]):
            if not policy.get("driver") and not policy.get("psid"):
                raise CapabilityError("policies[%d]: give driver and/or psid to say which NICs it applies to"
                                      % index)

    def read(self):
        present = self.root.listdir("/sys/class/net")
        if self.params["interfaces"] is None:
            names = [n for n in present if self.root.exists("/sys/class/net/%s/device" % n)]
        else:
            missing = [n for n in self.params["interfaces"] if n not in present]
            if missing:
                raise CapabilityError("interfaces not found on the node: %s (present: %s)"
                                      % (", ".join(missing), ", ".join(present) or "none"))
            names = list(self.params["interfaces"])
        ethtool, devlink = self.runner.which("ethtool"), self.runner.which("devlink")
        devlink_info, notes = None, []
        if devlink:
            rc, out, err = self.runner.run([devlink, "-j", "dev", "info"], check=False)
            if rc == 0:
                try:
                    devlink_info = parse_devlink_info(out)
                except DevlinkOutputError as exc:
                    devlink_info = None
                    notes.append("devlink -j dev info printed output this module cannot read, so devlink "
                                 "was not used: %s" % exc)
            else:
                devlink_info = None
                notes.append("devlink -j dev info failed: %s" % (err or out).strip())
        if not ethtool and not devlink:
            notes.append("neither ethtool nor devlink is installed; only sysfs was read")
        nics = [collect(self.root, self.runner, name, ethtool, devlink_info) for name in names]
        return dict(nics=nics, notes=notes)

    def result(self, state, actions):
        table = [evaluate(nic, self.params["policies"]) for nic in state["nics"]]
        summary = dict((s, sum(1 for r in table if r["status"] == s))
                       for s in ("compliant", "noncompliant", "unknown"))
        result = dict(nics=state["nics"], compliance=table, summary=summary, notes=state["notes"])
        bad = [r for r in table if r["status"] == "noncompliant"]
        if bad and self.params["fail_on_noncompliant"]:
            raise CapabilityError("noncompliant NIC firmware: %s" % "; ".join(
                "%s (%s, PSID %s): %s" % (r["interface"], r["bus_info"], r["psid"], r["reason"]) for r in bad),
                **result)
        return result
