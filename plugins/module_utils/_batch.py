# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run several capability modules, one after the other, in this Python process (stdlib only).

Each module's own ``main()`` runs unchanged with its own arguments: the module reads them
through ``AnsibleModule`` exactly as when Ansible starts it alone (the same way Ansible's
unit-test helpers feed a module its arguments), prints its result and exits; this helper
captures that result and goes on with the next module. What is saved is the start of a new
Python process per module on the node - importing and compiling AnsiballZ's
``ansible.module_utils.basic`` costs more CPU than most of these modules' work.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import json
import sys
import time
import traceback
from contextlib import redirect_stdout

from ansible.module_utils import basic


def internal_args():
    """The ``_ansible_*`` arguments (check mode, diff, verbosity, tmpdir...) of this run."""
    parsed = getattr(basic, "_PARSED_MODULE_ARGS", None) or {}
    return dict((k, v) for k, v in parsed.items() if str(k).startswith("_ansible_"))


def run_module(main, args, internal, name=None):
    """Run one module's ``main()`` with ``args``; return (result dict, seconds)."""
    saved = basic._ANSIBLE_ARGS
    payload = dict(args)
    payload.update(internal)
    if name:
        payload["_ansible_module_name"] = name
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode("utf-8")
    captured = io.StringIO()
    started = time.monotonic()
    try:
        with redirect_stdout(captured):
            try:
                main()
            except SystemExit:
                pass
    except Exception as exc:  # a module bug: report it as this module's failure, run nothing more
        return ({"failed": True, "msg": "%s: %s" % (type(exc).__name__, exc),
                 "exception": traceback.format_exc()}, time.monotonic() - started)
    finally:
        basic._ANSIBLE_ARGS = saved
    seconds = time.monotonic() - started
    return parse_output(captured.getvalue()), seconds


def parse_output(text):
    """The JSON result a module printed (the last JSON document of its output)."""
    text = text.strip()
    if not text:
        return {"failed": True, "msg": "the module printed no result"}
    try:
        return json.loads(text)
    except ValueError:
        start = text.rfind("\n{")
        try:
            return json.loads(text[start + 1:] if start >= 0 else text[text.find("{"):])
        except ValueError:
            return {"failed": True, "msg": "the module printed no JSON result", "module_stdout": text[-2000:]}


def run_calls(mains, calls, stop_on_failure=True):
    """Run ``calls`` ([{module, args}]) through ``mains`` ({name: main}); return the results."""
    internal = internal_args()
    results = []
    for call in calls:
        result, seconds = run_module(mains[call["module"]], call.get("args") or {}, internal, call["module"])
        result.pop("invocation", None)
        results.append({"module": call["module"], "seconds": round(seconds, 3), "result": result})
        if stop_on_failure and result.get("failed"):
            break
    sys.stdout.flush()
    return results
