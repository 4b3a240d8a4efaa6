"""datapath-lab: simulated GPU nodes on one machine, made from real kernel objects.

A node is a network namespace plus a private mount and UTS namespace holding a
copy-on-write overlay of the host's root, kept alive by one holder process. Fabrics are
Linux bridges in one "switch" namespace each; nodes attach with veth pairs named like
real NICs. Each node has a loop-backed "NVMe" device. Ansible reaches a node over real
SSH through ``ProxyCommand=nsenter ... sshd -i``: nothing listens on the host and no
address or route is ever added to the host's network namespace.

Standard library only.
"""

__all__ = ["Lab", "LabError", "LabConfig"]

from .core import Lab, LabConfig, LabError  # noqa: E402
