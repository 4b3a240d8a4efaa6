"""The spec's measure section and the plan's measure part (docs/measure.md)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan, validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.plan_measure import in_subnets

from ._specs import base, example, model

ADDR = {"datapath_addresses": {"rail0": "10.100.0.5", "mgmt": "192.0.2.5"}}


def measure(spec: dict[str, Any], host: str = "h1", facts: dict[str, Any] | None = None,
            groups: tuple[str, ...] = ("gpu",)) -> dict[str, Any]:
    assert validate_spec(spec) == [], [e.render() for e in validate_spec(spec)]
    return node_plan(spec, host, list(groups), ADDR if facts is None else facts)["measure"]


def test_defaults_measure_every_non_management_fabric_with_subnets() -> None:
    part = measure(base())
    assert {k: part[k] for k in ("mode", "sample_peers", "seed", "streams", "duration", "tool", "port")} == {
        "mode": "ring", "sample_peers": 3, "seed": 0, "streams": 4, "duration": 5.0, "tool": "builtin", "port": 5201}
    assert part["fabrics"] == [{"name": "rail0", "subnets": ["10.100.0.0/20"], "mtu": 9000, "interface": None,
                                "address": "10.100.0.5", "address_ok": True,
                                "rails": [{"rail": 0, "name": "rail0", "interface": None, "address": "10.100.0.5",
                                           "address_ok": True}]}]
    assert part["gates"] == {"fabrics": {"rail0": {"min_gbit_s": None, "max_retransmit_share": 0.002,
                                                   "max_loss_pct": 1.0, "max_p99_ms": None}},
                             "storage": {"min_read_mib_s": None, "max_p99_us_qd1": None, "max_p99_us_qd32": None,
                                         "min_iops_qd32": None},
                             "outlier_ratio": 0.5}
    assert part["storage"] == {"mount": "/mnt/model-cache", "test_file": "/mnt/model-cache/.aiinfra-measure/probe.bin",
                               "test_file_size": 512 * 1024 * 1024, "raw_device": "/dev/md/md-cache", "model": None}


def test_settings_gates_and_an_explicit_management_fabric() -> None:
    spec = base()
    spec["measure"] = {"mode": "sample", "sample_peers": 5, "seed": 42, "streams": 8, "duration": 2, "tool": "iperf3",
                       "port": 6000, "fabrics": ["mgmt", "rail0"],
                       "storage": {"test_file": "bench/p.bin", "test_file_size": "64MiB", "raw_device": False},
                       "gates": {"fabrics": {"rail0": {"min_gbit_s": 90, "max_p99_ms": 0.5}},
                                 "default": {"max_loss_pct": 0.1}, "storage": {"min_read_mib_s": 1000},
                                 "outlier_ratio": 0.3}}
    part = measure(spec)
    assert part["mode"] == "sample" and part["duration"] == 2.0 and part["tool"] == "iperf3"
    assert [f["name"] for f in part["fabrics"]] == ["mgmt", "rail0"]
    assert part["gates"]["fabrics"]["rail0"] == {"min_gbit_s": 90.0, "max_retransmit_share": 0.002,
                                                 "max_loss_pct": 1.0, "max_p99_ms": 0.5}
    assert part["gates"]["fabrics"]["mgmt"]["max_loss_pct"] == 0.1  # the default gate
    assert part["gates"]["storage"]["min_read_mib_s"] == 1000.0 and part["gates"]["outlier_ratio"] == 0.3
    assert part["storage"]["test_file"] == "/mnt/model-cache/bench/p.bin"
    assert part["storage"]["test_file_size"] == 64 << 20 and part["storage"]["raw_device"] is None


def test_addresses_come_from_the_host_itself() -> None:
    lab = {"datapath_lab_interfaces": {"rail0": {"ifname": "ens1f0np0", "address": "10.100.0.9"}}}
    part = measure(base(), facts=lab)
    assert part["fabrics"][0]["address"] is None  # a lab-only variable is never read
    rails = measure(base(), facts={"datapath_addresses": {"rail0": ["10.100.0.9", "10.100.1.9"]}})["fabrics"][0]
    assert rails["address"] == "10.100.0.9" and [r["address"] for r in rails["rails"]] == ["10.100.0.9"]
    missing = measure(base(), facts={})["fabrics"][0]
    assert missing["address"] is None and missing["address_ok"] is False  # carried (an interface), no address
    outside = measure(base(), facts={"datapath_addresses": {"rail0": "10.200.0.1"}})["fabrics"][0]
    assert outside["address"] == "10.200.0.1" and outside["address_ok"] is False


def test_a_host_without_the_fabric_does_not_list_it() -> None:
    spec = base()
    spec["hosts"] = {"h2": {"interfaces": [{"name": "eno1", "fabric": "mgmt"}]}}
    assert measure(spec, "h2", facts={})["fabrics"] == []
    assert measure(spec, "h2")["fabrics"][0]["name"] == "rail0"  # an address alone puts it on the fabric


@pytest.mark.parametrize(("storage", "raw"), [
    ({"devices": ["/dev/nvme0n1"], "mount": {"path": "/mnt/c"}}, "/dev/nvme0n1"),
    ({"select": {"model": "X*", "count": 1}, "mount": {"path": "/mnt/c"}}, None),
    ({"devices": ["/dev/nvme0n1", "/dev/nvme1n1"], "raid": {"name": "fast"}, "mount": {"path": "/mnt/c"}},
     "/dev/md/fast"),
])
def test_the_raw_device_of_the_cache(storage: dict[str, Any], raw: str | None) -> None:
    spec = base()
    spec["profiles"][0]["storage"] = storage
    spec["profiles"][0]["k8s"].pop("local_volume_class", None)
    assert measure(spec)["storage"]["raw_device"] == raw


def test_no_storage_no_storage_probe() -> None:
    spec = base()
    del spec["profiles"][0]["storage"]
    spec["profiles"][0]["k8s"].pop("local_volume_class", None)
    assert measure(spec)["storage"] is None


def test_the_model_to_load_cold_is_found_on_hosts_that_hold_it() -> None:
    spec = base()
    spec["models"] = [model(), model(version="v2", groups=["other"])]
    spec["measure"] = {"storage": {"model": "llama@v1"}}
    assert measure(spec)["storage"]["model"] == {"name": "llama", "version": "v1",
                                                 "path": "/mnt/model-cache/models/llama/v1"}
    spec["measure"] = {"storage": {"model": "llama@v2"}}
    assert measure(spec)["storage"]["model"] is None  # h1 (group gpu) does not hold v2


@pytest.mark.parametrize(("section", "path"), [
    ({"mode": "mesh"}, "datapath.measure.mode"),
    ({"duration": "5"}, "datapath.measure.duration"),
    ({"duration": 0.1}, "datapath.measure.duration"),
    ({"port": 65535}, "datapath.measure.port"),
    ({"streams": 0}, "datapath.measure.streams"),
    ({"gates": {"outlier_ratio": 1.0}}, "datapath.measure.gates.outlier_ratio"),
    ({"gates": {"default": {"max_retransmit_share": 2}}}, "datapath.measure.gates.default.max_retransmit_share"),
    ({"gates": {"default": {"max_p99_ms": 0.001}}}, "datapath.measure.gates.default.max_p99_ms"),
    ({"storage": {"test_file": "/etc/passwd"}}, "datapath.measure.storage.test_file"),
    ({"storage": {"test_file": "../x"}}, "datapath.measure.storage.test_file"),
    ({"storage": {"test_file_size": "1K"}}, "datapath.measure.storage.test_file_size"),
    ({"storage": {"model": "llama"}}, "datapath.measure.storage.model"),
    ({"sampel_peers": 3}, "datapath.measure.sampel_peers"),
])
def test_bad_measure_values_are_errors_with_their_path(section: dict[str, Any], path: str) -> None:
    spec = base()
    spec["measure"] = section
    errors = validate_spec(spec)
    assert [e.path for e in errors] == [path], [e.render() for e in errors]
    assert errors[0].hint


def test_the_example_inventory_measures_its_rails() -> None:
    spec = example()
    assert validate_spec(spec) == []
    part = node_plan(spec, "gpu-node-01", ["gpu_nodes"], {})["measure"]
    assert [f["name"] for f in part["fabrics"]] == spec["measure"]["fabrics"]


def test_in_subnets() -> None:
    assert in_subnets("10.0.0.5/24", ["10.0.0.0/24"]) and in_subnets("fd00::1", ["fd00::/64"])
    assert not in_subnets("10.0.1.5", ["10.0.0.0/24"]) and not in_subnets(None, ["10.0.0.0/8"])
    assert not in_subnets("bogus", ["10.0.0.0/8"]) and not in_subnets("10.0.0.1", ["bad"])
