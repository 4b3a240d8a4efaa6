"""The model_cache role's summary (roles/model_cache/templates/report.txt.j2), rendered by ansible's
own Templar through the expression of the role's debug task (the template lookup, trim, split)."""

from __future__ import annotations

from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader import AnsibleCollectionConfig

TEMPLATE = Path(__file__).resolve().parents[2] / "roles" / "model_cache" / "templates" / "report.txt.j2"
GiB = 1 << 30


def render(models: list[dict]) -> list[str]:
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()  # as ansible-playbook does at start: the lookup and the filters are found
    result = {"models": models, "evicted": [], "free_bytes": 100 * GiB, "reserve_bytes": 10 * GiB}
    templar = Templar(DataLoader(), variables={"model_cache_result": result, "inventory_hostname": "node1"})
    # split on a newline character, which is what YAML's double quotes make of the task's "\n"
    expression = "{{ lookup('ansible.builtin.template', '%s') | trim | split('\n') }}" % TEMPLATE
    return [line for line in templar.template(trust_as_template(expression)) if line.strip()]


def model(**over) -> dict:
    stages = {"source": 0.0, "copy": 0.0, "hash": 0.0, "disk": 0.0, "limit": 0.0, "other": 0.0}
    base = {"name": "llama", "version": "v1", "status": "present", "bytes_moved": 0, "resumed_bytes": 0,
            "seconds": 0.0, "throughput_bytes_per_s": 0, "stage_seconds": stages, "bottleneck": None}
    return {**base, **over}


def test_a_fetched_version_names_its_bottleneck_with_its_seconds():
    stages = {"source": 3.906, "copy": 0.0, "hash": 1.122, "disk": 4.301, "limit": 0.0, "other": 0.083}
    lines = render([model(status="published", bytes_moved=16 * GiB, seconds=9.412,
                          throughput_bytes_per_s=16 * GiB // 9.412, stage_seconds=stages, bottleneck="disk"),
                    model(name="mistral")])
    assert lines[0].startswith("node1: 2 version(s), 16.00 GB moved in 9.4 s (1.70 GB/s), 100.00 GB free")
    assert lines[1] == "  llama@v1: published, 16.00 GB in 9.4 s (1.70 GB/s); bottleneck: disk (4.3 s)"
    assert lines[2] == "  mistral@v1: present"  # nothing moved: no figures, no bottleneck


def test_a_result_without_the_split_still_renders():
    """A result registered by an older collection has no stage_seconds or bottleneck."""
    old = model(status="published", bytes_moved=GiB, seconds=1.0, throughput_bytes_per_s=GiB)
    del old["stage_seconds"], old["bottleneck"]
    assert render([old])[1] == "  llama@v1: published, 1.00 GB in 1.0 s (1.00 GB/s)"
