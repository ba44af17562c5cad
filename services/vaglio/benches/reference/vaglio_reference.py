#!/usr/bin/env python3
"""A faithful Python port of the seed's guard and rule-based judge (vaglio.md ch. 3-4),
timed on benches/reference/cases.json, for the side-by-side comparison in
scripts/bench-vaglio.sh. Prints nanoseconds per guard check and per full verdict."""

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

_FORBIDDEN_PATH_PATTERNS = [
    re.compile(r"(^|/)\.ssh(/|$)"),
    re.compile(r"^/etc/(passwd|shadow|sudoers)"),
    re.compile(r"^/etc/ssh(/|$)"),
    re.compile(r"^/root(/|$)"),
    re.compile(r"^/boot(/|$)"),
    re.compile(r"^/sys(/|$)"),
    re.compile(r"^/proc(/[0-9]|$)"),
    re.compile(r"^/dev/(sd|nvme|mmcblk|loop)"),
    re.compile(r"\.aws/credentials"),
    re.compile(r"\.config/[^/]+/credentials\.env"),
    re.compile(r"\.gnupg(/|$)"),
]

_DANGEROUS_SHELL_PATTERNS = [
    re.compile(r"\brm\s+-rf?\s+/(\s|$)"),
    re.compile(r"\brm\s+-rf?\s+~(\s|$|/)"),
    re.compile(r"\bmkfs\b"),
    re.compile(r"\bdd\s+.*\bof=/dev/"),
    re.compile(r":\s*\(\s*\)\s*\{\s*:\|:&\s*\}"),
    re.compile(r"\bchmod\s+-?R?\s*0?77[0-9]\s+/"),
]

JUDGE_THRESHOLD = 0.30
HOME = "/home/roberto"


@dataclass
class Verdict:
    approved: bool
    reason: str
    ts: float = field(default_factory=time.time)
    judge_kind: str = "rule-based-v1"
    score: float = 1.0
    blocked_by: str | None = None


def _flatten_str_values(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _flatten_str_values(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _flatten_str_values(v)


def _expand_user(s):
    return HOME + s[1:] if s.startswith("~") else s


def guard(executor_name, args, context):
    for value in _flatten_str_values(args):
        expanded = _expand_user(value)
        for pattern in _FORBIDDEN_PATH_PATTERNS:
            if pattern.search(expanded):
                return f"guard: forbidden path violated: pattern {pattern.pattern!r} in args"
    if executor_name == "shell_exec" or context.get("capability") == "code:exec":
        command = args.get("command", args.get("cmd"))
        if isinstance(command, list):
            command = " ".join(command)
        if isinstance(command, str):
            for pattern in _DANGEROUS_SHELL_PATTERNS:
                if pattern.search(command):
                    return f"guard: quasi-irrecoverable shell command: {pattern.pattern!r}"
    return None


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def judge_score(intent, executor_name, args, context):
    score = 0.7
    notes = []
    tokens = [t for t in re.split(r"[_\-.:]", executor_name) if len(t) >= 3]
    words = set(re.findall(r"\w+", intent.lower()))
    if any(t.lower() in words for t in tokens):
        score += 0.10
        notes.append("intent matches executor")
    for value in _flatten_str_values(args):
        if ".." in value and "/" in value:
            score -= 0.20
            notes.append("possible path traversal ('..' in path)")
            break
    if any(not _IDENT.match(k) for k in args):
        score -= 0.10
        notes.append("unusual argument key")
    if context.get("critical") is False:
        score += 0.05
    return max(0.0, min(1.0, score)), "; ".join(notes)


def judge(intent, executor_name, args, context=None):
    context = context or {}
    blocked = guard(executor_name, args, context)
    if blocked:
        return Verdict(False, blocked, score=0.0, blocked_by="guard")
    score, rationale = judge_score(intent, executor_name, args, context)
    if score < JUDGE_THRESHOLD:
        return Verdict(False, f"judge: score {score:.2f} < threshold {JUDGE_THRESHOLD:.2f} ({rationale})", score=score, blocked_by="judge")
    return Verdict(True, f"approved: score {score:.2f} ({rationale})", score=score)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cases.json")) as f:
        cases = json.load(f)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    for label, fn in [
        ("guard", lambda c: guard(c["executor"], c["args"], {})),
        ("verdict", lambda c: judge(c["intent"], c["executor"], c["args"])),
    ]:
        for c in cases[:50]:
            fn(c)
        start = time.perf_counter_ns()
        for i in range(rounds):
            fn(cases[i % len(cases)])
        elapsed = time.perf_counter_ns() - start
        print(f"python {label} {elapsed / rounds:.0f} ns")


if __name__ == "__main__":
    main()
