"""The three network modules on a real veth inside a private network namespace.

Optional: skipped unless running as root with iproute2. The namespace (``dp-unit-<pid>``)
is always deleted afterwards; nothing touches the host's own network namespace, because
``ip netns exec`` runs the module inside the namespace with its own /sys.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "dp-unit-%d" % os.getpid()

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2")]


@pytest.fixture
def netns():
    try:
        subprocess.run(["ip", "netns", "add", NS], check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        pytest.skip("cannot create a network namespace: %s" % exc.stderr.decode().strip())
    try:
        subprocess.run(["ip", "-n", NS, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], check=True)
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)


def run_in_ns(tmp_path, module, module_args):
    argfile = tmp_path / ("%s.json" % module)
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    env.pop("SSH_CONNECTION", None)
    done = subprocess.run(["ip", "netns", "exec", NS, sys.executable,
                           os.path.join(REPO, "plugins", "modules", module + ".py"), str(argfile)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def test_link_mtu_real_veth(netns, tmp_path):
    args = {"interfaces": [{"name": "v0", "mtu": 9000}], "persist": "none"}
    check = run_in_ns(tmp_path, "link_mtu", dict(args, _ansible_check_mode=True))
    assert check["changed"] is True
    live = subprocess.run(["ip", "-n", NS, "-j", "link", "show", "dev", "v0"], capture_output=True, text=True,
                          check=True)
    assert json.loads(live.stdout)[0]["mtu"] == 1500  # check mode touched nothing
    first = run_in_ns(tmp_path, "link_mtu", args)
    assert first["changed"] is True and [a["text"] for a in first["actions"]] == ["ip link set dev v0 mtu 9000"]
    live = subprocess.run(["ip", "-n", NS, "-j", "link", "show", "dev", "v0"], capture_output=True, text=True,
                          check=True)
    assert json.loads(live.stdout)[0]["mtu"] == 9000
    assert run_in_ns(tmp_path, "link_mtu", args)["changed"] is False
    too_big = run_in_ns(tmp_path, "link_mtu", {"interfaces": [{"name": "nope0", "mtu": 9000}], "persist": "none"})
    assert too_big.get("failed") and "no interface matches name=nope0" in too_big["msg"]


def test_roce_qos_unsupported_on_real_veth(netns, tmp_path):
    result = run_in_ns(tmp_path, "roce_qos", {"interfaces": [{"interface": "v0", "pfc_priorities": [3]}],
                                              "persist": False})
    row = result["interfaces"][0]
    assert row["supported"] is False and "virtual interface" in row["reason"]
    assert result["changed"] is False


def test_nic_firmware_on_real_veth(netns, tmp_path):
    result = run_in_ns(tmp_path, "nic_firmware", {"interfaces": ["v0"]})
    row = result["compliance"][0]
    assert row["status"] == "unknown" and row["driver"] == "veth"
    assert result["changed"] is False
