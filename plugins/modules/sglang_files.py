#!/usr/bin/python
"""Ansible module: make several files and directories hold their content, mode and owner in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_files
short_description: Write a set of files rendered on the controller, with their modes and owners, in one module run
description:
  - Thin wrapper around C(ensure_file_set) in plugins/module_utils/sglang_sm120/files.py. Each file in O(files) ends
    holding exactly its O(files[].content) with its mode and owner (written atomically, through a temp file with its
    final owner and mode, then a rename), or is removed (O(files[].state=absent)); each directory in
    O(directories) exists with its mode and owner. Directories are handled before files.
  - Why not one C(template) task per file? A template or copy task costs two module runs on the host (a stat,
    then C(file) for the attributes) even when nothing changes; the files of one release (its unit, its
    environment, its launcher) are written by one run of this module, which is most of a no-op converge's
    time in the service role. The content is rendered on the controller (C(lookup('template', ...))).
  - Every owner and group is looked up before anything is written, so an unknown user or group fails naming
    the path and changes nothing.
  - Secrets are content like any other; the calling task sets C(no_log) (which also hides the diff).
options:
  files:
    description: The files to write or remove.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file (its missing parent directories are made 0755).
        type: path
        required: true
      content:
        description: The exact text the file must hold (required with O(files[].state=present)).
        type: str
      state:
        description: C(present) writes O(files[].content); C(absent) removes the file if it exists.
        type: str
        choices: [present, absent]
        default: present
      mode:
        description: Octal mode as a string, e.g. C('0640').
        type: str
        default: "0644"
      owner:
        description: Owner by name; left as it is when not given (a new file is root's when the module runs as root).
        type: str
      group:
        description: Group by name; left as it is when not given.
        type: str
  directories:
    description: Directories that must exist with a mode and owner.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: path
        required: true
      mode:
        description: Octal mode as a string.
        type: str
        default: "0755"
      owner:
        description: Owner by name.
        type: str
      group:
        description: Group by name.
        type: str
  links:
    description: Symbolic links that must point to a target, made after the files (whatever else is at the path, except a directory,
      is replaced; the target need not exist yet).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the link.
        type: path
        required: true
      target:
        description: What the link points to, written as given.
        type: str
        required: true
attributes:
  check_mode:
    description: Reports what would change and writes nothing.
    support: full
  diff_mode:
    description: One before/after entry per file whose content changes (or that is removed), and per link that changes.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
"""

EXAMPLES = r"""
- name: Write the release's unit and environment
  sglang_files:
    files:
      - path: /opt/sglang/releases/0002-1a2b3c4d/sglang.service
        content: "{{ lookup('ansible.builtin.template', 'sglang.service.j2') }}"
      - path: /opt/sglang/releases/0002-1a2b3c4d/sglang.env
        content: "{{ lookup('ansible.builtin.template', 'sglang.env.j2') }}"
  register: release_files

- name: Write a key file only root and the service's group read, never logged
  sglang_files:
    directories:
      - {path: /etc/sglang, mode: "0750", owner: root, group: sglang}
    files:
      - {path: /etc/sglang/api-keys.yaml, content: "{{ keys_yaml }}", mode: "0640", owner: root, group: sglang}
  no_log: true
"""

RETURN = r"""
changed_paths:
  description: The files, directories and links that changed (or would, in check mode).
  type: list
  elements: str
  returned: success
  sample: [/opt/sglang/releases/0002-1a2b3c4d/sglang.service]
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.files import (
    DirSpec,
    FileSpec,
    LinkSpec,
    ensure_file_set,
    parse_mode,
)

_OWNED = dict(path=dict(type="path", required=True), owner=dict(type="str"), group=dict(type="str"))


ARGUMENT_SPEC = dict(
    files=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(
            _OWNED,
            content=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            mode=dict(type="str", default="0644"),
        ),
    ),
    directories=dict(type="list", elements="dict", default=[], options=dict(_OWNED, mode=dict(type="str", default="0755"))),
    links=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(path=dict(type="path", required=True), target=dict(type="str", required=True)),
    ),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: write_files(module))


def write_files(module: AnsibleModule) -> dict:
    files = []
    for item in module.params["files"]:
        if item["state"] == "present" and item["content"] is None:
            raise ToolkitError(f"files: {item['path']} has state=present but no content; nothing of this file set was written")
        content = item["content"].encode("utf-8") if item["state"] == "present" else None
        files.append(FileSpec(Path(item["path"]), content, parse_mode(item["mode"], item["path"]), item["owner"], item["group"]))
    directories = [
        DirSpec(Path(item["path"]), parse_mode(item["mode"], item["path"]), item["owner"], item["group"])
        for item in module.params["directories"]
    ]
    links = [LinkSpec(Path(item["path"]), item["target"]) for item in module.params["links"]]
    outcome = ensure_file_set(files, directories, check_mode=module.check_mode, links=links)
    result: dict = dict(changed=outcome.changed, changed_paths=outcome.changed_paths)
    if module._diff and outcome.diff:
        result["diff"] = outcome.diff
    return result


if __name__ == "__main__":
    main()
