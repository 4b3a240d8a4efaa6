# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measurement on the controller (standard library only): the schedule of node pairs, the
aggregation of the probes' results, the findings that name the bottleneck, and the reports.

docs/measure.md documents the method; docs/schema/measure.schema.json is measure.json's schema.
"""
