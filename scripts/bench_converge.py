#!/usr/bin/env python3
"""Converge speed on the lab host (make bench): a first converge of a fresh host, the no-op
converge (changed=0) through OpenSSH and through paramiko_ssh, and the time per role.

Runs playbooks/site.yml against inventory/lab as `make deploy` does. The lab container is
recreated first (scripts/lab.sh down/up), so the first converge starts from an empty host; the
controller's caches (wheelhouse, SGLang wheels, facts aside) are kept, as they are for an operator.
Each no-op converge runs twice per connection, alternating, and the mean is reported, with the time
per role (ansible.posix.profile_roles) of the first converge and of the no-op over OpenSSH. Then the
README's path: plain `ansible-playbook -i inventory/lab playbooks/site.yml` from the checkout, without
make's environment (no SGLANG_TOOLKIT_CACHE, no ANSIBLE_CONFIG), must report changed=0 after the
`make`-driven converges (keys hash content, never controller paths). Writes the figures to
$SGLANG_TOOLKIT_CACHE/bench/converge.json too. Exits 1 when the no-op over OpenSSH takes more than
NOOP_GOAL of the first converge (after printing every figure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
PLAYBOOK = ROOT / "playbooks/site.yml"
INVENTORY = ROOT / "inventory/lab"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
# A converge that changes nothing should cost at most this share of a first converge; above it the bench fails.
NOOP_GOAL = 0.10
ROLE_LINE = re.compile(r"^(\S[^\n]*?)\s-{2,}\s+([0-9.]+)s$", re.M)


def converge(label: str, connection: str | None = None, plain: bool = False) -> dict:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CALLBACKS_ENABLED": "sm120.sglang.module_cache,ansible.posix.profile_roles",
    }
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY), str(PLAYBOOK)]
    if plain:
        # As the README says after `make deploy`: relative paths from the checkout, none of make's variables.
        env = {k: v for k, v in env.items() if k not in ("SGLANG_TOOLKIT_CACHE", "ANSIBLE_CONFIG")}
        argv = ["ansible-playbook", "-i", "inventory/lab", "playbooks/site.yml"]
    if connection == "paramiko_ssh":
        # paramiko reads ~/.ssh/known_hosts only: a HOME whose known_hosts holds the lab's key.
        home = CACHE / "bench" / "paramiko-home"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        shutil.copy(CACHE / "lab-ssh" / "known_hosts", home / ".ssh" / "known_hosts")
        env["HOME"] = str(home)
    if connection:
        argv += ["-e", f"sglang_lab_connection={connection}"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    recap = {
        m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)), "failed": int(m.group(5))}
        for m in RECAP.finditer(proc.stdout)
    }
    if proc.returncode != 0 or not recap:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
        raise SystemExit(f"bench: the {label} converge failed (exit {proc.returncode})")
    if "ROLES RECAP" not in proc.stdout:
        raise SystemExit(f"bench: the {label} converge printed no ROLES RECAP: is the ansible.posix collection (profile_roles) installed?")
    roles_part = proc.stdout.split("ROLES RECAP", 1)[-1]
    # tasks outside any role are grouped by their action (ansible.builtin.include_role, ansible.builtin.debug)
    roles = {name.strip(): float(sec) for name, sec in ROLE_LINE.findall(roles_part) if name.strip() != "total"}
    changed = sum(host["changed"] for host in recap.values())
    print(f"  {label}: {wall:.1f} s, changed={changed}", flush=True)
    return {"label": label, "wall_s": round(wall, 2), "changed": changed, "recap": recap, "roles": roles}


def main() -> int:
    print("bench: recreating the lab host (scripts/lab.sh down/up)", flush=True)
    subprocess.run([str(ROOT / "scripts/lab.sh"), "down"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(ROOT / "scripts/lab.sh"), "up"], check=True)
    first = converge("first converge, OpenSSH")
    # Short names, as the inventories set them: an FQCN makes every task re-read the plugin's documentation.
    runs: dict[str, list[dict]] = {"ssh": [], "paramiko_ssh": []}
    for _ in range(2):
        for connection in runs:
            runs[connection].append(converge(f"no-op converge, {connection}", connection))
    for connection, results in runs.items():
        dirty = [r for r in results if r["changed"]]
        if dirty:
            raise SystemExit(f"bench: a no-op converge through {connection} reported changed={dirty[0]['changed']}: not idempotent")
    plain = converge("plain ansible-playbook after make, OpenSSH", plain=True)
    if plain["changed"]:
        raise SystemExit(
            f"bench: plain ansible-playbook after the make-driven converges reported changed={plain['changed']}: "
            "a key depends on the controller's environment"
        )
    ssh = sum(r["wall_s"] for r in runs["ssh"]) / 2
    paramiko = sum(r["wall_s"] for r in runs["paramiko_ssh"]) / 2
    roles: dict[str, float] = {}
    for r in runs["ssh"]:
        for name, sec in r["roles"].items():
            roles[name] = roles.get(name, 0.0) + sec / 2
    ratio = ssh / first["wall_s"]
    figures = {
        "first_converge_s": first["wall_s"],
        "first_converge_changed": first["changed"],
        "noop_ssh_s": round(ssh, 2),
        "noop_paramiko_s": round(paramiko, 2),
        "noop_over_first": round(ratio, 3),
        "noop_goal": NOOP_GOAL,
        "paramiko_over_ssh": round(paramiko / ssh, 3),
        "plain_ansible_playbook_changed": plain["changed"],
        "noop_roles_ssh_s": {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
        "first_roles_s": {k: round(v, 2) for k, v in sorted(first["roles"].items(), key=lambda kv: -kv[1])},
        "runs": [first, *runs["ssh"], *runs["paramiko_ssh"], plain],
    }
    out = CACHE / "bench" / "converge.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print()
    print("converge of playbooks/site.yml on the lab host (deploy@127.0.0.1 with sudo)")
    print(f"  first converge (fresh host), OpenSSH      {first['wall_s']:7.1f} s   changed={first['changed']}")
    print(f"  no-op converge, OpenSSH (mean of 2)       {ssh:7.1f} s   changed=0")
    print(f"  no-op converge, paramiko_ssh (mean of 2)  {paramiko:7.1f} s   changed=0")
    print(f"  ratio no-op / first                       {ratio:7.3f}   goal <= {NOOP_GOAL}: {'met' if ratio <= NOOP_GOAL else 'NOT met'}")
    print(f"  ratio paramiko_ssh / OpenSSH (no-op)      {paramiko / ssh:7.2f}")
    print(f"  plain ansible-playbook after make         {plain['wall_s']:7.1f} s   changed={plain['changed']}")
    print("  time per role over OpenSSH (ansible.posix.profile_roles; tasks outside a role under their action):")
    print(f"    {'role':<40} {'first converge':>14} {'no-op (mean of 2)':>18}")
    for name in sorted(set(roles) | set(first["roles"]), key=lambda n: (-roles.get(n, 0.0), -first["roles"].get(n, 0.0))):
        began = f"{first['roles'][name]:.2f} s" if name in first["roles"] else "-"
        noop = f"{roles[name]:.2f} s" if name in roles else "-"
        print(f"    {name:<40} {began:>14} {noop:>18}")
    print(f"(figures in {out})")
    if ratio > NOOP_GOAL:
        print(f"bench: the no-op converge took {ratio:.3f} of the first converge, above the goal of {NOOP_GOAL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
