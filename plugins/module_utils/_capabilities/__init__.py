# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capability modules, importable as module_utils.

Each file here is a symbolic link to plugins/modules/<name>.py: the same code, not a copy.
Importing them from module_utils is what lets AnsiballZ pack them into the payload of
aiinfra.datapath.datapath_run, which runs several of them in one Python process on the node.
"""
