"""Sparsity profiles (`bench e2e --sparsity-profile`): a target zero fraction for the input of every conv
that reads ReLU output, reached by shifting the bias that feeds each ReLU by a quantile of its input on
the images. The sparsity is then SET, not that of trained weights, and every output says so.

A profile is a number (every conv), a comma list (one value per stage: the ReLUs that feed convs split
evenly into consecutive groups), or a YAML file of ordered rules matched on the conv's name, structural
role and stage, first match wins (docs/bench.md, shipped files in network_specs/profiles/)."""
from __future__ import annotations

import fnmatch
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import yaml
from snn.codegen.spec import SPECS_DIR, Network

from ..errors import RunError
from .inputs import forward, quantile, relu_sources

PROFILES_DIR = SPECS_DIR / "profiles"
ROLES = ("block_input", "3x3", "spatial", "bottleneck", "expand", "shortcut", "transition")
ORIGINS = ("measured", "assumed", "published")
MATCH_KEYS = ("layers", "role", "stage")
RULE_KEYS = (*MATCH_KEYS, "sparsity", "origin", "note")
FILE_KEYS = ("name", "description", "networks", "measured_on", "source", "rules")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Profile:
    name: str                       # label for file names and tables: "0.7", "0.5-0.6-0.7-0.8", the file's name
    description: str
    path: str | None                # the profile file, None for numbers
    targets: dict[str, float]       # conv -> target zero fraction of its input
    origin: dict[str, str]          # conv -> measured | assumed | published | "assumed (measured on X)" |
                                    # uniform | per-stage
    rule: dict[str, int]            # conv -> 1-based rule that set it (0 for numbers)
    relu_targets: dict[str, float]  # ReLU node -> target of the convs that read it
    source: str = ""                # where a file's numbers come from


# ---------------------------------------------------------------------------------------------
# Structure: roles and stages, from the graph alone so that user specs get them too

def conv_roles(net: Network) -> dict[str, set[str]]:
    """conv name -> its structural roles (ROLES); a conv may have several, or none."""
    nodes = {n.name: n for n in net.nodes}
    users: dict[str, list] = defaultdict(list)
    for n in net.nodes:
        for i in n.inputs:
            users[i].append(n)

    def reaches(name, through, hit):
        todo, seen = [name], set()
        while todo:
            for u in users[todo.pop()]:
                if hit(u):
                    return True
                if u.op in through and u.name not in seen:
                    seen.add(u.name)
                    todo.append(u.name)
        return False

    def is_spatial(n):
        return n.op == "conv" and tuple(n["kernel"]) != (1, 1)

    def reads_block_input(n):
        src = nodes.get(n.inputs[0])
        if src is not None and src.op == "relu":  # the output of a residual block
            return getattr(nodes.get(src.inputs[0]), "op", None) == "add"
        while src is not None and src.op == "maxpool":  # a max-pooled ReLU output (stem, VGG stage entry)
            src = nodes.get(src.inputs[0])
            if src is not None and src.op == "relu":
                return True
        return False

    out = {}
    for c in net.convs:
        n = nodes[c.name]
        k = tuple(n["kernel"])
        one = k == (1, 1)
        block = reads_block_input(n)
        to_add = reaches(c.name, ("batchnorm",), lambda u: u.op == "add")
        roles = {r for r, yes in (
            ("block_input", block), ("3x3", k == (3, 3)), ("spatial", not one),
            ("bottleneck", one and reaches(c.name, ("batchnorm", "relu"), is_spatial)),
            ("expand", one and not block and to_add), ("shortcut", block and to_add),
            ("transition", one and (c.input_op == "avgpool" or reaches(c.name, ("batchnorm", "relu"),
                                                                      lambda u: u.op in ("avgpool", "maxpool")))),
        ) if yes}
        out[c.name] = roles
    return out


def conv_stages(net: Network) -> dict[str, int]:
    """conv (with ReLU-derived input) -> stage, 1-based: the rank of its input height among the distinct
    input heights of those convs, largest first."""
    src = relu_sources(net)
    sizes = sorted({c.shape.H for c in net.convs if c.name in src}, reverse=True)
    return {c.name: sizes.index(c.shape.H) + 1 for c in net.convs if c.name in src}


# ---------------------------------------------------------------------------------------------
# Resolving the --sparsity-profile argument

def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def resolve_profile(arg: str, net: Network) -> Profile:
    """A number (uniform), a comma list (per stage), `trained` (the shipped profile listing this network),
    an existing file, or the name of a shipped profile."""
    text = str(arg).strip()
    tokens = [t.strip() for t in text.split(",")]
    if "," in text or _is_float(text) or not text:
        if not all(_is_float(t) for t in tokens) or any(not 0.0 <= float(t) < 1.0 for t in tokens):
            raise RunError(f"--sparsity-profile {arg!r}: expected one sparsity in [0, 1) or a comma list of them "
                           f"(one per stage), e.g. 0.7 or 0.5,0.6,0.7,0.8; or 'trained', a shipped profile "
                           f"({', '.join(shipped_profiles())}) or a profile file")
        return _numbers([float(t) for t in tokens], net)
    if text == "trained":
        fitting = [p for p in shipped_profiles() if net.name in _read(PROFILES_DIR / f"{p}.yaml").get("networks", [])]
        if not fitting:
            raise RunError(f"--sparsity-profile trained: no shipped profile is for network '{net.name}' "
                           f"(shipped: {_shipped_list()}); give a profile file or a number")
        return _from_file(PROFILES_DIR / f"{fitting[0]}.yaml", net)
    path = Path(text)
    if path.is_file():  # an existing file first, as for specs (codegen.spec.resolve_spec)
        return _from_file(path, net)
    stem = path.stem if path.suffix in (".yaml", ".yml") else path.name
    if path.parent == Path(".") and (PROFILES_DIR / f"{stem}.yaml").is_file():
        return _from_file(PROFILES_DIR / f"{stem}.yaml", net)
    raise RunError(f"--sparsity-profile {arg!r}: not a number, a comma list, 'trained', a shipped profile "
                   f"({', '.join(shipped_profiles())}) or an existing file")


def _is_float(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False


def _shipped_list() -> str:
    return "; ".join(f"{p} for {', '.join(_read(PROFILES_DIR / f'{p}.yaml').get('networks', [])) or 'no network'}"
                     for p in shipped_profiles())


def _numbers(vals: list[float], net: Network) -> Profile:
    src = relu_sources(net)
    pos = {n.name: i for i, n in enumerate(net.nodes)}
    feeding = sorted(set().union(*src.values()), key=pos.__getitem__)
    base, extra = divmod(len(feeding), len(vals))  # earlier groups take the extra ReLU
    relu_t: dict[str, float] = {}
    for i, t in enumerate(vals):
        for r in feeding[len(relu_t):len(relu_t) + base + (i < extra)]:
            relu_t[r] = t
    targets = {}
    for c in net.convs:
        if c.name in src:
            ts = {r: relu_t[r] for r in src[c.name]}
            if len(set(ts.values())) == 1:
                targets[c.name] = next(iter(ts.values()))
            else:  # a concat of ReLUs in different groups: the channel-weighted mean is what the conv reads
                ch = {r: net.node(r).shape[0] for r in ts}
                targets[c.name] = sum(ts[r] * ch[r] for r in ts) / sum(ch.values())
    uniform = len(vals) == 1
    name = "-".join(f"{v:g}" for v in vals)
    desc = (f"every conv input set to {name} zeros" if uniform else f"ReLUs feeding convs split into {len(vals)} "
            f"consecutive groups set to {', '.join(f'{v:g}' for v in vals)} zeros")
    kind = "uniform" if uniform else "per-stage"
    return Profile(name, desc, None, targets, dict.fromkeys(targets, kind), dict.fromkeys(targets, 0), relu_t)


# ---------------------------------------------------------------------------------------------
# Profile files

def _label(path: Path) -> str:
    """How messages name the file: shipped ones by their place in the package, others as given."""
    return f"network_specs/profiles/{path.name}" if path.resolve().parent == PROFILES_DIR.resolve() else str(path)


def _read(path: Path) -> dict:
    """The file's top level, checked: a mapping of FILE_KEYS with a non-empty list of rules."""
    label = _label(path)
    try:
        doc = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RunError(f"{label}: YAML syntax error{at}: {e.problem or e}") from None
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise RunError(f"{label}: cannot read: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise RunError(f"{label}: expected a mapping with 'rules' (and name, description, networks, ...)")
    unknown = sorted(map(str, set(doc) - set(FILE_KEYS)))
    if unknown:
        raise RunError(f"{label}: unknown key(s) {', '.join(unknown)} (known: {', '.join(FILE_KEYS)})")
    for k in ("name", "description", "source"):
        if k in doc and not isinstance(doc[k], str):
            raise RunError(f"{label}: '{k}' must be a string")
    for k in ("networks", "measured_on"):
        if not isinstance(doc.setdefault(k, []), list) or not all(isinstance(v, str) for v in doc[k]):
            raise RunError(f"{label}: '{k}' must be a list of network names")
    if not isinstance(doc.get("rules"), list) or not doc["rules"]:
        raise RunError(f"{label}: needs 'rules': a non-empty list of {{layers/role/stage, sparsity, origin}} mappings")
    for i, rule in enumerate(doc["rules"], 1):
        _check_rule(label, i, rule)
    return doc


def _where(i: int, rule) -> str:
    """'rule 3 {layers: layer1.*, role: [3x3, expand]}': the rule's number and match keys, for messages."""
    if not isinstance(rule, dict):
        return f"rule {i}"
    keys = (f"{k}: [{', '.join(map(str, rule[k]))}]" if isinstance(rule[k], list) else f"{k}: {rule[k]}"
            for k in MATCH_KEYS if k in rule)
    return f"rule {i} {{{', '.join(keys)}}}"


def _as_list(v) -> list:
    return v if isinstance(v, list) else [v]


def _check_rule(label: str, i: int, rule) -> None:
    def bad(msg):
        raise RunError(f"{label} {_where(i, rule)}: {msg}")
    if not isinstance(rule, dict):
        bad(f"must be a mapping like {{layers: 'layer1.*', role: 3x3, sparsity: 0.6, origin: measured}}, "
            f"got {type(rule).__name__}")
    unknown = sorted(map(str, set(rule) - set(RULE_KEYS)))
    if unknown:
        bad(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(RULE_KEYS)})")
    s = rule.get("sparsity")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= s < 1.0:
        bad(f"'sparsity' must be a number in [0, 1), got {s!r}" if "sparsity" in rule else "needs 'sparsity' in [0, 1)")
    if rule.get("origin") not in ORIGINS:
        bad(f"'origin' must be one of {', '.join(ORIGINS)}, got {rule.get('origin')!r}")
    if "note" in rule and not isinstance(rule["note"], str):
        bad("'note' must be a string")
    if "layers" in rule and not all(isinstance(g, str) and g for g in _as_list(rule["layers"])):
        bad("'layers' must be a glob or a list of globs on conv names")
    for r in _as_list(rule.get("role", [])):
        if r not in ROLES:
            bad(f"unknown role {r!r} (roles: {', '.join(ROLES)})")
    for s in _as_list(rule.get("stage", [])):
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            bad(f"'stage' must be a stage number (1, 2, ...) or a list of them, got {s!r}")


def _matches(rule: dict, conv: str, roles: set[str], stage: int) -> bool:
    return (("layers" not in rule or any(fnmatch.fnmatchcase(conv, g) for g in _as_list(rule["layers"])))
            and ("role" not in rule or bool(roles & set(_as_list(rule["role"]))))
            and ("stage" not in rule or stage in _as_list(rule["stage"])))


def _from_file(path: Path, net: Network) -> Profile:
    label, doc = _label(path), _read(path)
    rules = doc["rules"]
    src, roles, stages = relu_sources(net), conv_roles(net), conv_stages(net)
    convs = [c.name for c in net.convs if c.name in src]
    matching = {c: [i for i, r in enumerate(rules, 1) if _matches(r, c, roles[c], stages[c])] for c in convs}
    rule_of = {c: rs[0] for c, rs in matching.items() if rs}  # first match wins
    used = set(rule_of.values())
    for i, rule in enumerate(rules, 1):
        if i in used:
            continue
        where = f"{label} {_where(i, rule)}"
        hit = [c for c in convs if i in matching[c]]
        if not hit:
            nets = doc["networks"]
            hint = f"; the file is for {', '.join(nets)}" if nets and net.name not in nets else ""
            raise RunError(f"{where}: matches no conv of {net.name} (of its {len(convs)} with ReLU input){hint}")
        by = defaultdict(list)
        for c in hit:
            by[rule_of[c]].append(c)
        taken = "; ".join(f"{_where(j, rules[j - 1])}: {len(cs)}, e.g. {cs[0]}" for j, cs in sorted(by.items()))
        raise RunError(f"{where}: takes no conv of {net.name}: every conv it matches is taken by an earlier "
                       f"rule ({taken})")
    for c in convs:
        if c not in rule_of:
            raise RunError(f"{label}: no rule covers conv '{c}' of {net.name} (roles: "
                           f"{', '.join(sorted(roles[c])) or 'none'}; stage {stages[c]}); add a default rule at "
                           f"the end, e.g. {{sparsity: 0.5, origin: assumed}}")
    targets = {c: float(rules[rule_of[c] - 1]["sparsity"]) for c in convs}
    reader: dict[str, str] = {}  # ReLU -> the first conv that reads it
    for c in convs:
        for r in sorted(src[c]):
            a = reader.setdefault(r, c)
            if targets[a] != targets[c]:
                raise RunError(f"{label}: convs '{a}' ({_where(rule_of[a], rules[rule_of[a] - 1])}: {targets[a]:g}) "
                               f"and '{c}' ({_where(rule_of[c], rules[rule_of[c] - 1])}: {targets[c]:g}) read the "
                               f"same ReLU '{r}' but get different targets; give them one")
    # 'measured' on another network is an assumption here
    measured_on = doc["measured_on"]
    moved = f"assumed (measured on {', '.join(measured_on)})" if measured_on and net.name not in measured_on else None
    origin = {c: moved if moved and rules[rule_of[c] - 1]["origin"] == "measured" else rules[rule_of[c] - 1]["origin"]
              for c in convs}
    return Profile(doc.get("name") or path.stem, " ".join(doc.get("description", "").split()), str(path), targets,
                   origin, rule_of, {r: targets[c] for r, c in reader.items()}, doc.get("source", ""))


# ---------------------------------------------------------------------------------------------
# Applying a profile to the weights

def shift_target(net: Network, relu_name: str) -> str | None:
    """The parameter whose shift moves this ReLU's input by the same amount: the bias of the BN (or
    biased conv/linear) that feeds it, or of a BN that feeds the add that feeds it."""
    nodes = {n.name: n for n in net.nodes}
    src = nodes.get(nodes[relu_name].inputs[0])
    if src is None:
        return None
    if src.op == "add":
        for i in src.inputs:
            m = nodes.get(i)
            if m is not None and (m.op == "batchnorm" or (m.op == "conv" and m["bias"])):
                src = m
                break
        else:
            return None
    if src.op == "batchnorm" or (src.op in ("conv", "linear") and src["bias"]):
        return f"{src.param}.bias"
    return None


def _pools(net: Network) -> dict[str, tuple]:
    """ReLU -> the max-pools between it and the first conv that reads it, ReLU side first."""
    nodes = {n.name: n for n in net.nodes}
    out: dict[str, tuple] = {}

    def walk(v, chain):
        n = nodes.get(v)
        if n is None:
            return
        if n.op == "relu":
            out.setdefault(v, tuple(reversed(chain)))
        elif n.op == "maxpool":
            walk(n.inputs[0], chain + [n])
        elif n.op == "concat":
            for i in n.inputs:
                walk(i, chain)
    for c in net.convs:
        walk(c.input, [])
    return out


def apply_profile(net: Network, sd: dict, x, profile: Profile) -> tuple[dict, list[dict]]:
    """Shift the bias feeding each ReLU of the profile so that what its convs read on the images x has the
    target sparsity (one pass in network order: each shift sees the earlier ones), and measure, in the
    same pass, the zero fraction each targeted conv really reads. Returns the new tensors and one row per
    targeted conv in network order."""
    torch = __import__("torch")
    F = torch.nn.functional
    pools = _pools(net)
    sd = dict(sd)
    params: dict[str, str | None] = {}
    realized: dict[str, float] = {}

    def on_relu(n, z):
        t = profile.relu_targets.get(n.name)
        if t is None:
            return z
        params[n.name] = param = shift_target(net, n.name)
        if param is None:
            return z
        # the conv reads maxpool(ReLU(z)) = ReLU(maxpool(z)): the quantile must be that of the pooled z,
        # or the pooled input ends far less sparse than the target
        zz = z
        for p in pools.get(n.name, ()):
            zz = F.max_pool2d(zz, p["kernel"], p["stride"], p["padding"], ceil_mode=p["ceil_mode"])
        q = quantile(zz, t)
        del zz
        sd[param] = sd[param] - q
        return z - q

    def on_conv(n, v):
        if n.name in profile.targets:
            realized[n.name] = 1.0 - int(torch.count_nonzero(v)) / v.numel()

    with torch.inference_mode():
        forward(net, sd, x, on_relu=on_relu, on_conv=on_conv)
    src, roles, stages = relu_sources(net), conv_roles(net), conv_stages(net)
    pos = {n.name: i for i, n in enumerate(net.nodes)}
    report = []
    for c in net.convs:
        if c.name not in profile.targets:
            continue
        relus = sorted(src[c.name], key=pos.__getitem__)
        shifted = list(dict.fromkeys(params[r] for r in relus if params.get(r)))
        row = {"conv": c.name, "target": profile.targets[c.name], "realized": round(realized[c.name], 4),
               "origin": profile.origin[c.name], "rule": profile.rule[c.name], "roles": sorted(roles[c.name]),
               "stage": stages[c.name], "relus": relus, "param": ", ".join(shifted) or None}
        unshifted = [r for r in relus if not params.get(r)]
        if unshifted:
            row["note"] = f"no bias to shift before {', '.join(unshifted)}: that input keeps the weights' sparsity"
        elif c.input_op == "avgpool":   # spec.pools_first: a trained network's zeros are the ReLU's
            row["pooled"] = True
            row["note"] = "reads an average pool of the ReLU the target sets: a window of zeros alone stays zero"
        report.append(row)
    return sd, report
