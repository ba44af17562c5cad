#!/usr/bin/env python3
"""What the deployments promise about isolation, checked on what the real tools render.

Run by scripts/deploy-check.sh on `docker compose config --format json` (every profile; and
again with deploy/compose.host-network.yml) and on `kubectl kustomize` of each overlay:

- every service container mounts its own certificates, and only its own, read-only at
  /etc/metnos/pki (compose: volume pki-<service>; Kubernetes: Secret metnos-pki-<service>,
  mode 0440); the `cli` container mounts only the owner's; only the `pki` one-shot mounts
  the CA (volume `pki`); the owner's Secret is mounted nowhere in the cluster;
- health checks and probes are `metnos-<service> --health-check` (over mutual TLS);
- compose publishes only Jaeger's UI, and policy, vaglio and approval are on the internal
  network alone;
- the NetworkPolicies allow exactly the service-to-service calls of DESIGN.md §1, checked
  on both ends: what each pod may send (egress) and what each pod may receive (ingress);
  and only the planner, the vaglio (the LLM) and the gateway (Telegram) may reach addresses
  outside the cluster (each of them must);
- only the planner has a seccomp profile of its own (deploy/seccomp/metnos-planner.json:
  unshare allowed for shell_exec's box, mounts, ptrace, BPF, keyrings, modules … refused);
  every other container keeps the engine's default.

`--self-test` renders mutated copies of the deployment files (a planner mounting the
gateway's certificates, a gateway → policy ingress rule, …) and fails unless the checker
catches each one, with the unmutated copy passing: a checker that cannot fail checks nothing.
"""

import argparse
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

SERVICES = {
    "policy": 50051,
    "vaglio": 50052,
    "approval": 50053,
    "planner": 50054,
    "gateway": 50055,
}
IDENTITIES = [*SERVICES, "owner"]
PKI_DIR = "/etc/metnos/pki"

# DESIGN.md §1 (and the README's authorization table): who calls whom.
CALLS = {
    ("gateway", "planner"),
    ("gateway", "approval"),
    ("gateway", "vaglio"),
    ("planner", "policy"),
    ("planner", "vaglio"),
    ("planner", "approval"),
    ("planner", "gateway"),
    ("vaglio", "policy"),
    ("approval", "policy"),
    ("approval", "gateway"),
}

# Services on the internal compose network alone. Policy and approval reach nothing outside
# the stack; the vaglio reaches policy and the `middle` LLM tier (its telos engine always, the
# llm-v1 judge too), which in compose is Ollama on that same network: an online middle tier
# needs `outside` added by hand (docker-compose.yml says so). In Kubernetes the vaglio does
# reach out (WORLD below): the LLM's address is the cluster's to know, not this file's.
INTERNAL_ONLY = ["policy", "vaglio", "approval"]

# Kubernetes: the pods whose egress may reach addresses outside the cluster (ipBlock peers),
# and what for. Every other service reaches only Metnos pods, DNS and the trace collector (and
# PostgreSQL in the scaled overlay).
WORLD = {
    "planner": "the LLM, web_fetch",
    "vaglio": "the `middle` LLM tier: the telos engine's fit estimate, the llm-v1 judge",
    "gateway": "the Telegram Bot API",
}

# The planner's seccomp profile (shell_exec's box needs unshare); every other container keeps
# the engine's default.
SECCOMP_PROFILE = "deploy/seccomp/metnos-planner.json"
K8S_SECCOMP = "metnos/planner.json"
# What the profile must still refuse, and what it must not (the box's namespaces).
MUST_DENY = {
    "mount", "umount2", "pivot_root", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "setns", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "userfaultfd",
    "open_by_handle_at", "io_uring_setup",
}
MUST_ALLOW = {"unshare", "clone", "clone3", "landlock_create_ruleset", "landlock_add_rule",
              "landlock_restrict_self", "prctl", "setrlimit", "prlimit64", "setsid"}


def health_check(service):
    return ["metnos-" + service, "--health-check"]


# ---- docker compose ---------------------------------------------------------------------


def pki_mounts(container):
    """The container's mounts of a certificate volume (`pki` or `pki-<identity>`)."""
    return [
        m
        for m in container.get("volumes") or []
        if m.get("type") == "volume"
        and (m.get("source") == "pki" or str(m.get("source", "")).startswith("pki-"))
    ]


# The settings files each container may read (docker-compose.yml's env_file): its secret
# goes to no other container. `.env` is compose's own and reaches none.
ENV_FILES = {
    "policy": ["env/shared.env", "env/policy.env"],
    "vaglio": ["env/shared.env", "env/vaglio.env", "env/llm-keys.env"],
    "approval": ["env/shared.env", "env/approval.env"],
    "planner": ["env/shared.env", "env/planner.env", "env/llm-keys.env"],
    "gateway": ["env/shared.env", "env/gateway.env"],
    "cli": ["env/shared.env"],
}


# The variable [`render`] puts in each settings file, to tell from a rendered container's
# environment which files it read (the rendered config keeps their contents, not their
# names).
ENV_MARKERS = {
    ".env": "METNOS_MARK_DOTENV",
    "env/shared.env": "METNOS_MARK_SHARED",
    "env/policy.env": "METNOS_MARK_POLICY",
    "env/vaglio.env": "METNOS_MARK_VAGLIO",
    "env/approval.env": "METNOS_MARK_APPROVAL",
    "env/planner.env": "METNOS_MARK_PLANNER",
    "env/gateway.env": "METNOS_MARK_GATEWAY",
    "env/llm-keys.env": "METNOS_MARK_LLM_KEYS",
}


def check_env_files(services, problem):
    """Each Metnos container reads exactly its own settings files: the Telegram token's
    file only the gateway, the LLM keys' only the planner and the vaglio."""
    for name, container in sorted(services.items()):
        env = container.get("environment") or {}
        read = sorted(f for f, marker in ENV_MARKERS.items() if marker in env)
        wanted = sorted(ENV_FILES.get(name, []))
        if read != wanted:
            problem(f"{name} reads settings from {read}, expected {wanted}")


def check_compose(project, host_network, problems):
    """`project`: `docker compose config --format json` with every profile."""
    where = "compose" + (" (host network)" if host_network else "")
    services = project.get("services", {})

    def problem(message):
        problems.append(f"{where}: {message}")

    for name in [*SERVICES, "cli", "pki"]:
        if name not in services:
            problem(f"no service {name}")
    # Certificates: each container its own volume, read-only; only pki sees the CA.
    for name, container in sorted(services.items()):
        mounts = pki_mounts(container)
        if name == "pki":
            sources = sorted(m["source"] for m in mounts)
            expected = sorted(["pki", *("pki-" + i for i in IDENTITIES)])
            if sources != expected:
                problem(f"pki mounts {sources}, expected {expected}")
            if container.get("network_mode") != "none":
                problem("pki has a network (network_mode must be none)")
            if not container.get("read_only"):
                problem("pki's root filesystem is writable")
            if container.get("cap_drop") != ["ALL"]:
                problem("pki does not drop every capability")
            extra = set(container.get("cap_add") or []) - {"CHOWN", "SETUID", "SETGID"}
            if extra:
                problem(f"pki adds capabilities {sorted(extra)}")
            if "no-new-privileges:true" not in (container.get("security_opt") or []):
                problem("pki lacks no-new-privileges")
            continue
        identity = name if name in SERVICES else "owner" if name == "cli" else None
        if identity is None:
            if mounts:
                problem(f"{name} mounts {[m['source'] for m in mounts]}")
            continue
        wanted = "pki-" + identity
        if [(m["source"], m.get("target")) for m in mounts] != [(wanted, PKI_DIR)]:
            problem(
                f"{name} mounts {[(m['source'], m.get('target')) for m in mounts]}, "
                f"expected only {wanted} at {PKI_DIR}"
            )
        for m in mounts:
            if not m.get("read_only"):
                problem(f"{name} mounts {m['source']} writable")
        env = container.get("environment") or {}
        if env.get("METNOS_TLS__DIR") != PKI_DIR:
            problem(f"{name}: METNOS_TLS__DIR is {env.get('METNOS_TLS__DIR')!r}, not {PKI_DIR}")
        seccomp = [o for o in container.get("security_opt") or [] if o.startswith("seccomp")]
        wanted_seccomp = [f"seccomp={SECCOMP_PROFILE}"] if name == "planner" else []
        if seccomp != wanted_seccomp:
            problem(f"{name}'s seccomp options are {seccomp}, not {wanted_seccomp}")
        if name in SERVICES:
            test = (container.get("healthcheck") or {}).get("test")
            if test != ["CMD", *health_check(name)]:
                problem(f"{name}'s healthcheck is {test}, not {['CMD', *health_check(name)]}")
            pki = (container.get("depends_on") or {}).get("pki") or {}
            if pki.get("condition") != "service_completed_successfully":
                problem(f"{name} does not wait for pki to complete")
    check_env_files(services, problem)
    # What a person reaches: Jaeger's UI, nothing else.
    for name, container in sorted(services.items()):
        for port in container.get("ports") or []:
            if (name, port.get("target")) != ("jaeger", 16686):
                problem(f"{name} publishes port {port.get('target')} (only Jaeger's UI may be)")
    if host_network:
        for name, container in sorted(services.items()):
            mode = container.get("network_mode")
            if mode != ("none" if name == "pki" else "host"):
                problem(f"{name}'s network_mode is {mode!r}")
        return
    networks = project.get("networks", {})
    internal = {key for key, net in networks.items() if net.get("internal")}
    if "metnos" not in internal:
        problem("network metnos is not internal")
    for name in INTERNAL_ONLY + ["cli"]:
        attached = set((services.get(name, {}).get("networks") or {}).keys())
        if attached != {"metnos"}:
            problem(f"{name} is on {sorted(attached)}, not on the internal network alone")


# ---- Kubernetes -------------------------------------------------------------------------


def selects(selector, labels):
    """Whether a LabelSelector matches a pod's labels (an empty selector matches all)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def port_matches(ports, number, name):
    """Whether a rule's ports admit TCP `number` (named `name` on the container)."""
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        port = p.get("port")
        if port is None or port == name:
            return True
        if isinstance(port, int) and port <= number <= p.get("endPort", port):
            return True
    return False


def peer_matches(peer, labels):
    """Whether a from/to peer admits a pod of this namespace. A namespaceSelector is taken to
    include this namespace (the safe reading); an ipBlock is taken as addresses outside the
    cluster (see networkpolicy.yaml)."""
    if "ipBlock" in peer:
        return False
    return selects(peer.get("podSelector"), labels)


def policy_types(policy):
    spec = policy["spec"]
    return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))


def allowed(policies, direction, subject, other, port, port_name):
    """Whether `direction` (Ingress/Egress) policies let `subject`'s pod talk to/from
    `other`'s pod on `port`. A pod no policy of that type selects is not isolated."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    applying = [
        p
        for p in policies
        if direction in policy_types(p) and selects(p["spec"].get("podSelector"), subject)
    ]
    if not applying:
        return True
    for policy in applying:
        for rule in policy["spec"].get(key) or []:
            if not port_matches(rule.get("ports"), port, port_name):
                continue
            peers = rule.get(peers_key)
            if not peers or any(peer_matches(peer, other) for peer in peers):
                return True
    return False


def reaches_world(policies, labels):
    """Whether egress policies let a pod with these labels reach addresses outside the
    cluster: a rule with an ipBlock peer, or one with neither peers nor ports. A rule with
    ports and no peers (DNS, traces, PostgreSQL) is the shared plumbing, not counted."""
    applying = [
        p
        for p in policies
        if "Egress" in policy_types(p) and selects(p["spec"].get("podSelector"), labels)
    ]
    if not applying:
        return True
    for policy in applying:
        for rule in policy["spec"].get("egress") or []:
            peers = rule.get("to")
            if not peers and not rule.get("ports"):
                return True
            if any("ipBlock" in peer for peer in peers or []):
                return True
    return False


def check_k8s(name, docs, problems):
    def problem(message):
        problems.append(f"k8s {name}: {message}")

    kinds = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    deployments = {d["metadata"]["name"]: d for d in kinds.get("Deployment", [])}
    pods = {}
    for service, port in SERVICES.items():
        deployment = deployments.get("metnos-" + service)
        if deployment is None:
            problem(f"no Deployment metnos-{service}")
            continue
        template = deployment["spec"]["template"]
        pods[service] = template["metadata"].get("labels") or {}
        check_pod(service, port, template["spec"], problem)
    for deployment in deployments.values():
        if deployment["metadata"]["name"].removeprefix("metnos-") not in SERVICES:
            check_no_secrets(deployment, problem)
    # The config the pods read.
    for config_map in kinds.get("ConfigMap", []):
        if "metnos.toml" in (config_map.get("data") or {}):
            tls = tomllib.loads(config_map["data"]["metnos.toml"]).get("tls", {})
            if tls.get("dir") != PKI_DIR:
                problem(f"metnos.toml: tls.dir is {tls.get('dir')!r}, not {PKI_DIR}")
    check_network_policies(kinds.get("NetworkPolicy", []), pods, problem)


def secret_names(pod_spec):
    """Every Secret a pod spec mounts or reads, with where."""
    found = []
    for volume in pod_spec.get("volumes") or []:
        if "secret" in volume:
            found.append((volume["secret"].get("secretName"), volume["name"]))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                found.append((source["secret"].get("name"), volume["name"]))
    for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
        for env_from in container.get("envFrom") or []:
            if "secretRef" in env_from:
                found.append((env_from["secretRef"].get("name"), "envFrom"))
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                found.append((ref.get("name"), "env " + env["name"]))
    return found


def check_no_secrets(deployment, problem):
    for secret, where in secret_names(deployment["spec"]["template"]["spec"]):
        if str(secret).startswith("metnos-pki-"):
            problem(f"{deployment['metadata']['name']} uses Secret {secret} ({where})")


def check_seccomp_profile(root, problems):
    """The planner's profile: valid, refusing what it promises, allowing the box's calls."""
    try:
        with open(os.path.join(root, SECCOMP_PROFILE)) as f:
            profile = json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"{SECCOMP_PROFILE}: {e}")
        return
    denied = set()
    for rule in profile.get("syscalls") or []:
        if rule.get("action") != "SCMP_ACT_ALLOW":
            denied |= set(rule.get("names") or [])
    if profile.get("defaultAction") != "SCMP_ACT_ALLOW" and not denied:
        problems.append(f"{SECCOMP_PROFILE}: refuses nothing")
    missing = sorted(MUST_DENY - denied)
    if missing:
        problems.append(f"{SECCOMP_PROFILE}: does not refuse {missing}")
    blocked = sorted(MUST_ALLOW & denied)
    if blocked:
        problems.append(f"{SECCOMP_PROFILE}: refuses {blocked}, which shell_exec's box needs")


def check_pod(service, port, spec, problem):
    who = "metnos-" + service
    seccomp = (spec.get("securityContext") or {}).get("seccompProfile") or {}
    wanted = (
        {"type": "Localhost", "localhostProfile": K8S_SECCOMP}
        if service == "planner"
        else {"type": "RuntimeDefault"}
    )
    if seccomp != wanted:
        problem(f"{who}'s seccompProfile is {seccomp}, not {wanted}")
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        override = (container.get("securityContext") or {}).get("seccompProfile")
        if override is not None:
            problem(f"{who}: container {container['name']} sets its own seccompProfile {override}")
    wanted = "metnos-pki-" + service
    pki = [(s, v) for s, v in secret_names(spec) if str(s).startswith("metnos-pki-")]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    if len(pki) != 1 or pki[0][0] != wanted or pki[0][1] not in volumes:
        problem(f"{who} uses {pki}, expected only Secret {wanted} as a volume")
        return
    volume = pki[0][1]
    mode = volumes[volume]["secret"].get("defaultMode")
    if mode != 0o440:
        problem(f"{who}: Secret {wanted} has mode {oct(mode) if mode else None}, not 0o440")
    for item in volumes[volume]["secret"].get("items") or []:
        if item.get("mode") not in (None, 0o440):
            problem(f"{who}: Secret {wanted}'s {item.get('key')} has mode {oct(item['mode'])}")
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    for container in containers:
        mounts = [m for m in container.get("volumeMounts") or [] if m["name"] == volume]
        is_service = container.get("command") == [who]
        if not is_service:
            if mounts:
                problem(f"{who}: container {container['name']} mounts {wanted}")
            continue
        if [(m.get("mountPath"), bool(m.get("readOnly"))) for m in mounts] != [(PKI_DIR, True)]:
            problem(f"{who} mounts {wanted} as {mounts}, expected read-only at {PKI_DIR}")
        for probe in ("readinessProbe", "livenessProbe"):
            command = ((container.get(probe) or {}).get("exec") or {}).get("command")
            if command != health_check(service):
                problem(f"{who}'s {probe} runs {command}, not {health_check(service)}")
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        url = f"http://127.0.0.1:{port}"
        if env.get(f"METNOS_{service.upper()}__URL") != url:
            problem(f"{who}: METNOS_{service.upper()}__URL is not {url} (its probes ask it)")
    if not any(c.get("command") == [who] for c in containers):
        problem(f"{who} has no container running {who}")


def check_network_policies(policies, pods, problem):
    default_deny = [
        p
        for p in policies
        if p["spec"].get("podSelector") in ({}, None)
        and set(policy_types(p)) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    if not default_deny:
        problem("no default-deny NetworkPolicy (every pod, Ingress and Egress, no rule)")
    for policy in policies:
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                if "ipBlock" in peer:
                    problem(f"NetworkPolicy {policy['metadata']['name']} admits {peer['ipBlock']}")
        for rule in policy["spec"].get("egress") or []:
            for peer in rule.get("to") or []:
                block = peer.get("ipBlock")
                if block and not link_local_excluded(block):
                    problem(
                        f"NetworkPolicy {policy['metadata']['name']} lets pods reach "
                        f"link-local addresses ({block})"
                    )
    for direction in ("Ingress", "Egress"):
        flows = set()
        for caller, caller_labels in pods.items():
            for callee, callee_labels in pods.items():
                if caller == callee:
                    continue
                subject, other = (
                    (callee_labels, caller_labels)
                    if direction == "Ingress"
                    else (caller_labels, callee_labels)
                )
                if allowed(policies, direction, subject, other, SERVICES[callee], "grpc"):
                    flows.add((caller, callee))
        for caller, callee in sorted(flows - CALLS):
            problem(
                f"{direction.lower()} {caller} → {callee}:{SERVICES[callee]} allowed, "
                "not a call of DESIGN.md §1"
            )
        for caller, callee in sorted(CALLS - flows):
            problem(f"{direction.lower()} {caller} → {callee}:{SERVICES[callee]} not allowed")
    for service, labels in sorted(pods.items()):
        world = reaches_world(policies, labels)
        if world and service not in WORLD:
            problem(
                f"egress metnos-{service} may reach addresses outside the cluster "
                f"(only {', '.join(sorted(WORLD))} may)"
            )
        elif not world and service in WORLD:
            problem(f"egress metnos-{service} cannot reach outside the cluster ({WORLD[service]})")


def link_local_excluded(block):
    """Whether an egress ipBlock leaves out link-local addresses (a cloud's metadata service)."""
    cidr = ipaddress.ip_network(block["cidr"])
    link_local = ipaddress.ip_network("169.254.0.0/16" if cidr.version == 4 else "fe80::/10")
    if not cidr.overlaps(link_local):
        return True
    return any(
        link_local.subnet_of(ipaddress.ip_network(e))
        for e in block.get("except") or []
        if ipaddress.ip_network(e).version == cidr.version
    )


# ---- running it -------------------------------------------------------------------------


def check_all(compose_json, compose_host_json, k8s_files, root):
    problems = []
    check_seccomp_profile(root, problems)
    check_compose(compose_json, False, problems)
    check_compose(compose_host_json, True, problems)
    for name, text in k8s_files.items():
        check_k8s(name, [d for d in yaml.safe_load_all(text) if d], problems)
    return problems


def render(root, compose_bin):
    """Renders the deployment files under `root` with the real tools (compose in a copy
    whose settings files each hold a marker, [`ENV_MARKERS`])."""
    env = dict(os.environ, METNOS_USER_HOME="/home/metnos")
    profiles = ["--profile", "cli", "--profile", "ollama", "--profile", "postgres"]
    project = tempfile.mkdtemp(prefix="metnos-compose-")
    shutil.copy(os.path.join(root, "docker-compose.yml"), project)
    shutil.copytree(os.path.join(root, "deploy"), os.path.join(project, "deploy"))
    os.makedirs(os.path.join(project, "env"))
    for file, marker in ENV_MARKERS.items():
        with open(os.path.join(project, file), "w") as f:
            f.write(f"{marker}=1\n")

    def compose(*files):
        args = [compose_bin, "--project-directory", project]
        for f in files:
            args += ["-f", os.path.join(project, f)]
        out = subprocess.run(
            [*args, *profiles, "config", "--format", "json"],
            env=env, check=True, capture_output=True, text=True,
        )
        return json.loads(out.stdout)

    k8s = {}
    for overlay in ("home", "scaled"):
        k8s[overlay] = subprocess.run(
            ["kubectl", "kustomize", os.path.join(root, "k8s/overlays", overlay)],
            check=True, capture_output=True, text=True,
        ).stdout
    try:
        return (
            compose("docker-compose.yml"),
            compose("docker-compose.yml", "deploy/compose.host-network.yml"),
            k8s,
        )
    finally:
        shutil.rmtree(project, ignore_errors=True)


# (what, file, text replaced, replacement, a problem that must be reported)
MUTATIONS = [
    (
        "the planner reads the Telegram token's file",
        "docker-compose.yml",
        "      - path: env/planner.env\n",
        "      - path: env/gateway.env\n",
        "planner reads settings from",
    ),
    (
        "every service reads .env again",
        "docker-compose.yml",
        "      - path: env/shared.env\n        required: false\n      - path: env/policy.env\n",
        "      - path: .env\n        required: false\n      - path: env/policy.env\n",
        "policy reads settings from ['.env', 'env/policy.env']",
    ),
    (
        "the planner runs without seccomp",
        "docker-compose.yml",
        "      - seccomp=deploy/seccomp/metnos-planner.json\n",
        "      - seccomp=unconfined\n",
        "planner's seccomp options are ['seccomp=unconfined']",
    ),
    (
        "a Kubernetes pod without the default seccomp profile",
        "k8s/base/vaglio.yaml",
        "type: RuntimeDefault",
        "type: Unconfined",
        "metnos-vaglio's seccompProfile is {'type': 'Unconfined'}",
    ),
    (
        "the planner's profile lets ptrace through",
        "deploy/seccomp/metnos-planner.json",
        '      "ptrace",\n',
        "",
        "does not refuse ['ptrace']",
    ),
    (
        "the planner mounts the gateway's certificates",
        "docker-compose.yml",
        "      - pki-planner:/etc/metnos/pki:ro\n",
        "      - pki-gateway:/etc/metnos/pki:ro\n",
        "planner mounts [('pki-gateway'",
    ),
    (
        "a service mounts its certificates writable",
        "docker-compose.yml",
        "      - pki-vaglio:/etc/metnos/pki:ro\n",
        "      - pki-vaglio:/etc/metnos/pki\n",
        "vaglio mounts pki-vaglio writable",
    ),
    (
        "the cli mounts the CA's volume",
        "docker-compose.yml",
        "      - cli-data:/var/lib/metnos\n",
        "      - cli-data:/var/lib/metnos\n      - pki:/etc/metnos/ca\n",
        "cli mounts [('pki', '/etc/metnos/ca')",
    ),
    (
        "the gateway's port published again",
        "docker-compose.yml",
        "      - pki-gateway:/etc/metnos/pki:ro\n",
        "      - pki-gateway:/etc/metnos/pki:ro\n    ports:\n      - 127.0.0.1:50055:50055\n",
        "gateway publishes port 50055",
    ),
    (
        "policy on the outside network",
        "docker-compose.yml",
        "      - pki-policy:/etc/metnos/pki:ro\n    networks: [metnos]\n",
        "      - pki-policy:/etc/metnos/pki:ro\n    networks: [metnos, outside]\n",
        "policy is on ['metnos', 'outside']",
    ),
    (
        "a gateway → policy ingress rule",
        "k8s/base/networkpolicy.yaml",
        "              app.kubernetes.io/name: metnos-approval\n      ports:\n"
        "        - protocol: TCP\n          port: 50051\n",
        "              app.kubernetes.io/name: metnos-approval\n"
        "        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-gateway\n      ports:\n"
        "        - protocol: TCP\n          port: 50051\n",
        "ingress gateway → policy:50051 allowed",
    ),
    (
        "a planner → approval ingress rule dropped",
        "k8s/base/networkpolicy.yaml",
        "    - from:\n        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-planner\n"
        "        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-gateway\n"
        "      ports:\n        - protocol: TCP\n          port: 50053\n",
        "    - from:\n        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-gateway\n"
        "      ports:\n        - protocol: TCP\n          port: 50053\n",
        "ingress planner → approval:50053 not allowed",
    ),
    (
        "policy refuses the vaglio's Check",
        "k8s/base/networkpolicy.yaml",
        "              app.kubernetes.io/name: metnos-planner\n"
        "        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-vaglio\n"
        "        - podSelector:\n",
        "              app.kubernetes.io/name: metnos-planner\n"
        "        - podSelector:\n",
        "ingress vaglio → policy:50051 not allowed",
    ),
    (
        "the gateway cannot reach the vaglio",
        "k8s/base/networkpolicy.yaml",
        "          port: 50053\n    - to:\n        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-vaglio\n",
        "          port: 50053\n    - to:\n        - podSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/name: metnos-planner\n",
        "egress gateway → vaglio:50052 not allowed",
    ),
    (
        "the vaglio cannot reach its LLM",
        "k8s/base/networkpolicy.yaml",
        "          port: 50051\n    - to:\n        - ipBlock:\n            cidr: 0.0.0.0/0\n"
        "            except: [169.254.0.0/16]\n        - ipBlock:\n"
        '            cidr: "::/0"\n            except: ["fe80::/10"]\n',
        "          port: 50051\n",
        "egress metnos-vaglio cannot reach outside the cluster",
    ),
    (
        "approval reaches the world",
        "k8s/base/networkpolicy.yaml",
        "          port: 50055\n---\n# planner:",
        "          port: 50055\n    - to:\n        - ipBlock:\n            cidr: 0.0.0.0/0\n"
        "            except: [169.254.0.0/16]\n---\n# planner:",
        "egress metnos-approval may reach addresses outside the cluster",
    ),
    (
        "the planner mounts the gateway's Secret",
        "k8s/base/planner.yaml",
        "            secretName: metnos-pki-planner\n",
        "            secretName: metnos-pki-gateway\n",
        "metnos-planner uses [('metnos-pki-gateway'",
    ),
    (
        "a Secret mounted world-readable",
        "k8s/base/policy.yaml",
        "            defaultMode: 0440\n",
        "            defaultMode: 0444\n",
        "has mode 0o444",
    ),
    (
        "a native grpc probe (plaintext)",
        "k8s/base/vaglio.yaml",
        '          readinessProbe:\n            exec:\n'
        '              command: ["metnos-vaglio", "--health-check"]\n',
        "          readinessProbe:\n            grpc:\n              port: 50052\n",
        "metnos-vaglio's readinessProbe runs None",
    ),
    (
        "no default deny",
        "k8s/base/networkpolicy.yaml",
        "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n",
        "  podSelector: {}\n  policyTypes: [Ingress]\n",
        "no default-deny NetworkPolicy",
    ),
]


def self_test(compose_bin):
    """Each mutation must be caught; the unmutated files must pass."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # The unmutated copy first.
        cases = [(None, None, None, None, None), *MUTATIONS]
        for i, (what, path, old, new, expected) in enumerate(cases):
            root = os.path.join(tmp, str(i))
            os.makedirs(root)
            shutil.copy(os.path.join(repo, "docker-compose.yml"), root)
            shutil.copytree(os.path.join(repo, "deploy"), os.path.join(root, "deploy"))
            shutil.copytree(os.path.join(repo, "k8s"), os.path.join(root, "k8s"))
            if what is not None:
                target = os.path.join(root, path)
                with open(target) as f:
                    text = f.read()
                if text.count(old) != 1:
                    failures.append(f"{what}: the text to mutate is not once in {path}")
                    continue
                with open(target, "w") as f:
                    f.write(text.replace(old, new))
            problems = check_all(*render(root, compose_bin), root)
            if what is None:
                failures += [f"unmutated files: {p}" for p in problems]
            elif not any(expected in p for p in problems):
                failures.append(f"{what}: not caught (expected {expected!r}; got {problems})")
    for failure in failures:
        print(f"[check-deploy-isolation] self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"[check-deploy-isolation] self-test: {len(MUTATIONS)} mutations caught", file=sys.stderr)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose-bin", required=True, help="the Compose v2 binary")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.compose_bin)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check_all(*render(repo, args.compose_bin), repo)
    for p in problems:
        print(f"[check-deploy-isolation] {p}", file=sys.stderr)
    if problems:
        return 1
    print(
        "[check-deploy-isolation] certificates, probes, ports, networks: as promised",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
