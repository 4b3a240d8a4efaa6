"""kernel_cmdline against a fake /proc, /boot, /etc and /run tree; tools are faked."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible_collections.aiinfra.datapath.plugins.module_utils import _cmdline
from ansible_collections.aiinfra.datapath.plugins.modules import kernel_cmdline
from capability_results import diff_entry, kinds, texts

DROP_IN = "/etc/default/grub.d/90-aiinfra-datapath.cfg"
STATE = "/etc/aiinfra-datapath/kernel_cmdline.json"
HP = ["hugepagesz=2M", "hugepages=512", "hugepagesz=1G", "hugepages=8"]


class Tools:
    """Fake PATH and run_command; grubby keeps its args in memory."""

    def __init__(self, monkeypatch, present, grubby_args=""):
        self.present = set(present)
        self.calls = []
        self.grubby_args = grubby_args.split()
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                            lambda mod, name, required=False, opt_dirs=None:
                            "/usr/sbin/" + name if name in self.present else None)
        monkeypatch.setattr(basic.AnsibleModule, "run_command",
                            lambda mod, argv, **kwargs: self.run_command(mod, argv, **kwargs))  # pylint: disable=unnecessary-lambda

    def run_command(self, module, argv, **kwargs):
        argv = list(argv)
        if argv[0].endswith("grubby"):
            if argv[1] == "--info=DEFAULT":
                return 0, 'index=0\nkernel="/boot/vmlinuz"\nargs="%s"\nroot="/dev/x"\n' % " ".join(
                    self.grubby_args), ""
            self.calls.append(argv)
            if argv[2].startswith("--remove-args="):
                gone = argv[2].split("=", 1)[1].split()
                self.grubby_args = [a for a in self.grubby_args if a not in gone]
            if argv[2].startswith("--args="):
                self.grubby_args += argv[2].split("=", 1)[1].split()
            return 0, "", ""
        self.calls.append(argv)
        return 0, "", ""


@pytest.fixture
def debian(node, monkeypatch):
    node.put("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=UUID=1 ro quiet splash\n")
    node.put("/boot/grub/grub.cfg", "")
    node.put("/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n')
    node.path("/run").mkdir()
    return Tools(monkeypatch, {"update-grub", "grub-mkconfig"})


@pytest.fixture
def rhel(node, monkeypatch):
    node.put("/proc/cmdline", "BOOT_IMAGE=(hd0)/vmlinuz root=/dev/x ro crashkernel=auto rhgb\n")
    node.path("/boot/loader/entries").mkdir(parents=True)
    return Tools(monkeypatch, {"grubby"}, grubby_args="root=/dev/x ro crashkernel=auto rhgb")


def args(node, **extra):
    base = {"root": str(node.root)}
    base.update(extra)
    return base


def test_debian_drop_in_with_repeated_names(run_module, node, debian):
    result = run_module(kernel_cmdline.main, args(node, args=HP + ["iommu=pt"]), diff=True)
    assert result["bootloader"] == "grub_d"
    assert node.get(DROP_IN) == (
        _cmdline.DROP_IN_HEADER
        + 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX hugepagesz=2M hugepages=512 hugepagesz=1G '
          'hugepages=8 iommu=pt"\n')
    assert debian.calls == [["/usr/sbin/update-grub"]]
    assert result["reboot_required"] is True
    assert result["missing"] == HP + ["iommu=pt"]
    assert node.exists("/run/reboot-required")
    assert texts(result) == ["write %s" % DROP_IN, "run update-grub", "touch /run/reboot-required"]
    assert kinds(result) == ["file", "command", "flag"]
    assert [a["reboot"] for a in result["actions"]] == [True, True, False]
    assert [d["before_header"] for d in result["diff"]] == [DROP_IN]
    assert diff_entry(result, DROP_IN)["before"] == "" and "iommu=pt" in diff_entry(result, DROP_IN)["after"]
    assert node.get("/etc/default/grub").startswith("GRUB_CMDLINE_LINUX_DEFAULT")


def test_debian_second_run_unchanged_and_in_effect_after_reboot(run_module, node, debian):
    run_module(kernel_cmdline.main, args(node, args=HP))
    before = node.snapshot()
    again = run_module(kernel_cmdline.main, args(node, args=HP))
    assert again["changed"] is False and again["actions"] == []
    assert again["reboot_required"] is True          # still pending, flag already there
    assert node.snapshot() == before
    node.put("/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro quiet " + " ".join(HP) + "\n")
    node.path("/run/reboot-required").unlink()
    booted = run_module(kernel_cmdline.main, args(node, args=HP))
    assert booted["reboot_required"] is False and booted["changed"] is False
    assert booted["missing"] == []


def test_order_of_repeated_names_matters(run_module, node, debian):
    node.put("/proc/cmdline", "ro hugepagesz=1G hugepages=512 hugepagesz=2M hugepages=8\n")
    result = run_module(kernel_cmdline.main, args(node, args=HP), check_mode=True)
    assert result["reboot_required"] is True


def test_check_mode_touches_nothing(run_module, node, debian):
    before = node.snapshot()
    predicted = run_module(kernel_cmdline.main, args(node, args=HP), check_mode=True, diff=True)
    assert node.snapshot() == before and debian.calls == []
    real = run_module(kernel_cmdline.main, args(node, args=HP), diff=True)
    assert predicted["actions"] == real["actions"] and predicted["diff"] == real["diff"]


def test_debian_remove_own_and_foreign(run_module, node, debian):
    run_module(kernel_cmdline.main, args(node, args=HP + ["iommu=pt"]))
    debian.calls.clear()
    result = run_module(kernel_cmdline.main, args(node, args=HP, remove=["iommu", "splash"]))
    assert "iommu=pt" not in node.get(DROP_IN)
    assert result["not_removable"] == ["splash (in /etc/default/grub)"]
    assert any("cannot remove splash" in w for w in result["warnings"])
    assert result["still_present"] == ["splash"]
    assert debian.calls == [["/usr/sbin/update-grub"]]


def test_debian_empty_args_removes_drop_in(run_module, node, debian):
    run_module(kernel_cmdline.main, args(node, args=HP))
    result = run_module(kernel_cmdline.main, args(node, args=[]))
    assert not node.exists(DROP_IN)
    assert texts(result)[0] == "remove %s" % DROP_IN
    assert result["actions"][0]["kind"] == "file" and result["actions"][0]["after"] is None


def test_debian_no_update_bootloader(run_module, node, debian):
    result = run_module(kernel_cmdline.main, args(node, args=HP, backend="grub_d",
                                                  update_bootloader=False))
    assert debian.calls == []
    assert "run update-grub" not in texts(result)
    assert any("update-grub" in w for w in result["warnings"])


def test_grub_mkconfig_when_no_update_grub(run_module, node, debian):
    debian.present = {"grub-mkconfig"}
    run_module(kernel_cmdline.main, args(node, args=["iommu=pt"]))
    assert debian.calls == [["/usr/sbin/grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]


def test_no_bootloader_reports_and_writes_nothing(run_module, node, monkeypatch):
    node.put("/proc/cmdline", "console=ttyS0\n")
    Tools(monkeypatch, set())
    before = node.snapshot()
    result = run_module(kernel_cmdline.main, args(node, args=HP))
    assert result["bootloader"] == "none"
    assert result["changed"] is False and result["reboot_required"] is False
    assert result["missing"] == HP
    assert any("bootloader: none" in w for w in result["warnings"])
    assert node.snapshot() == before


def test_no_bootloader_write_drop_in(run_module, node, monkeypatch):
    node.put("/proc/cmdline", "console=ttyS0\n")
    tools = Tools(monkeypatch, set())
    result = run_module(kernel_cmdline.main, args(node, args=HP, when_no_bootloader="write_drop_in"))
    assert result["bootloader"] == "none"
    assert texts(result) == ["write %s" % DROP_IN]
    assert result["actions"][0]["reboot"] is False      # no boot loader here: not this node's boot
    assert "hugepages=8" in node.get(DROP_IN)
    assert tools.calls == [] and not node.exists("/run/reboot-required")


def test_explicit_backend_without_tool_fails(run_module, node, monkeypatch):
    node.put("/proc/cmdline", "ro\n")
    Tools(monkeypatch, set())
    result = run_module(kernel_cmdline.main, args(node, args=HP, backend="grubby"), expect_failure=True)
    assert "backend grubby needs grubby" in result["msg"]


def test_grubby_adds_and_remembers(run_module, node, rhel):
    result = run_module(kernel_cmdline.main, args(node, args=["default_hugepagesz=1G", "iommu=pt"]),
                        diff=True)
    assert result["bootloader"] == "grubby"
    assert rhel.calls == [["/usr/sbin/grubby", "--update-kernel=ALL",
                           "--args=default_hugepagesz=1G iommu=pt"]]
    assert json.loads(node.get(STATE)) == {"args": ["default_hugepagesz=1G", "iommu=pt"],
                                           "added": ["default_hugepagesz=1G", "iommu=pt"]}
    assert diff_entry(result, "grubby default kernel args")["after"].endswith("rhgb default_hugepagesz=1G iommu=pt\n")
    assert texts(result) == ["run grubby --update-kernel=ALL --args=default_hugepagesz=1G iommu=pt",
                             "write %s" % STATE]
    assert [(a["kind"], a["reboot"]) for a in result["actions"]] == [("command", True), ("file", False)]
    assert result["reboot_required"] is True
    assert not node.exists("/run/reboot-required")   # RHEL has no such flag
    rhel.calls.clear()
    again = run_module(kernel_cmdline.main, args(node, args=["default_hugepagesz=1G", "iommu=pt"]))
    assert again["changed"] is False and rhel.calls == []


def test_grubby_removes_only_what_it_added(run_module, node, rhel):
    run_module(kernel_cmdline.main, args(node, args=["iommu=pt", "crashkernel=auto"]))
    rhel.calls.clear()
    # crashkernel=auto was there before this module: wanted, but never added by it
    assert json.loads(node.get(STATE))["added"] == ["iommu=pt"]
    result = run_module(kernel_cmdline.main, args(node, args=[]))
    assert rhel.calls == [["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=iommu=pt"]]
    assert "crashkernel=auto" in rhel.grubby_args
    assert json.loads(node.get(STATE)) == {"args": [], "added": []}
    assert result["changed"] is True


def test_grubby_explicit_remove(run_module, node, rhel):
    run_module(kernel_cmdline.main, args(node, remove=["rhgb"]))
    assert rhel.calls == [["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=rhgb"]]


def test_grubby_refuses_repeated_names(run_module, node, rhel):
    result = run_module(kernel_cmdline.main, args(node, args=HP), expect_failure=True)
    assert "would collapse repeated hugepages, hugepagesz" in result["msg"]
    assert rhel.calls == []


def test_grubby_bad_state_file(run_module, node, rhel):
    node.put(STATE, "{not json")
    result = run_module(kernel_cmdline.main, args(node, args=["iommu=pt"]), expect_failure=True)
    assert "is not valid JSON" in result["msg"]


@pytest.mark.parametrize("params, fragment", [
    ({"args": ['a="b c"']}, "args[0]"),
    ({"args": ["x=$(reboot)"]}, "args[0]"),
    ({"args": ["ok", "`id`"]}, "args[1]"),
    ({"remove": ["a b"]}, "remove[0]"),
    ({"args": ["iommu=pt"], "remove": ["iommu"]}, "remove 'iommu' also matches wanted argument(s) iommu=pt"),
    ({"backend": "lilo"}, "backend"),
])
def test_bad_input_named(run_module, node, debian, params, fragment):
    result = run_module(kernel_cmdline.main, args(node, **params), expect_failure=True)
    assert fragment in result["msg"]
    assert debian.calls == []
