"""`snn-codegen inspect`: the conv layers of a spec as a table or JSON."""
from __future__ import annotations

from .spec import Network


def conv_rows(net: Network) -> list[dict]:
    total = net.macs
    rows = []
    for c in net.convs:
        s = c.shape
        rows.append({
            "index": c.index, "name": c.name, "C": s.C, "N": s.N, "H": s.H, "W": s.W, "R": s.R, "S": s.S,
            "stride": list(s.stride), "padding": list(s.padding), "P": s.P, "Q": s.Q,
            "groups": c.groups, "macs": c.macs, "mac_share": c.macs / total, "input_op": c.input_op,
            "sparse": c.sparse,
        })
    return rows


def summary(net: Network) -> dict:
    return {"network": net.name, "spec": net.path, "input": list(net.input_shape),
            "convs": len(net.convs), "sparse_convs": len(net.sparse_convs),
            "distinct_conv_shapes": len(net.conv_shapes()),
            "macs": net.macs, "params": net.params, "layers": conv_rows(net)}


def format_table(rows: list[dict]) -> str:
    head = ("#", "name", "C→N", "H×W", "R×S", "stride", "pad", "groups", "MMACs", "share", "sparse")
    body = [(str(r["index"]), r["name"], f"{r['C']}→{r['N']}", f"{r['H']}×{r['W']}", f"{r['R']}×{r['S']}",
             _pair(r["stride"]), _pair(r["padding"]), str(r["groups"]), f"{r['macs'] / 1e6:.1f}",
             f"{100 * r['mac_share']:.2f}%", "yes" if r["sparse"] else "dense")
            for r in rows]
    return render(head, body, right=(0, 5, 6, 7, 8, 9))


def _pair(p) -> str:
    return str(p[0]) if p[0] == p[1] else f"{p[0]}×{p[1]}"


def render(head, body, right=()) -> str:
    """A plain-text table; columns in `right` are right-aligned."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])
