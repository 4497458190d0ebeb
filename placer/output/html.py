"""A placement as one self-contained HTML page: inline SVG and CSS, nothing fetched.

Zones are columns, racks are blocks inside them, nodes are drawn inside their rack. A small
cluster gets one card per node naming its members (``M cache/0`` filled in the cluster's colour
for a master, outlined for a replica). Above ``DETAIL_LIMIT`` nodes a panel switches to one
small cell per node, so a rack reads as a bar of cells and 1,000 nodes fit a screen: the top
of a cell is the colour of the Redis cluster whose master it runs, the stripes below are its
replicas; hovering a cell (its ``<title>``) names the node and its members. Hard violations
outline nodes in red, nodes lost in a drill are greyed out, and the domain whose failure hurts
most is framed.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from placer.output.topology import Mark, NodeView, Scene

DETAIL_LIMIT = 60
"""Panels with more nodes than this are drawn as cells, without names."""
PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
    "#edc948", "#9c755f", "#ff9da7", "#17becf", "#8c6d31",
)  # fmt: skip
"""Colours of the Redis clusters, in name order (no red: red marks hard violations)."""
VIOLATION = "#d62728"
WORST = "#222222"
DOWN_FILL = "#d9d9d9"
EMPTY_FILL = "#eef0f3"
ARRIVES = {"place": " +", "move": " ↦"}
"""Suffix of a chip whose pod the plan places (new) or moves there."""
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"

CSS = """
body{margin:16px;color:#1d232a;background:#fff;font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif}
h1{font-size:20px;margin:0 0 4px}
.sub{margin:0 0 10px;color:#444}
.sub div{margin:1px 0}
.legend{display:flex;flex-wrap:wrap;gap:6px 14px;margin:8px 0 12px;font-size:12px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.sw{display:inline-block;width:14px;height:14px;border-radius:2px}
.sw.rep{height:5px;width:14px}
.panels{display:flex;gap:16px;align-items:flex-start}
figure{margin:0}
figcaption{font-weight:600;margin:0 0 4px}
figcaption small{display:block;font-weight:400;color:#444}
svg text{pointer-events:none}
svg .node:hover{stroke:#000;stroke-width:2}
table{border-collapse:collapse;margin:14px 0;font-size:12px}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f6f8}
.bad{color:#b00020;font-weight:600}
"""


def colours(clusters: Iterable[str]) -> dict[str, str]:
    """A fixed colour per Redis cluster: the palette in name order, then spaced hues."""
    out = {}
    for i, cluster in enumerate(sorted(set(clusters))):
        out[cluster] = PALETTE[i] if i < len(PALETTE) else f"hsl({(i * 137.5) % 360:.0f},55%,45%)"
    return out


@dataclass
class _Svg:
    parts: list[str]

    def add(self, text: str) -> None:
        self.parts.append(text)


def _tip(node: NodeView) -> str:
    lines = [f"{node.name}  (zone {node.zone}, rack {node.rack})"]
    if node.down:
        lines.append("DOWN in this drill")
    for problem in node.problems:
        lines.append(f"hard violation: {problem}")
    lines += [
        f"{'master ' if m.role == 'master' else 'replica'} {m.cluster}/{m.shard}  {m.pod}"
        + (f" ({m.action})" if m.action != "keep" else "")
        for m in node.members
    ]
    if not node.members:
        lines.append("no Redis pod")
    return escape("\n".join(lines))


def _cell(
    svg: _Svg, node: NodeView, x: float, y: float, size: float, palette: dict[str, str]
) -> None:
    """One node as a small cell: master colour on top, replica stripes below."""
    fill = DOWN_FILL if node.down else EMPTY_FILL
    stroke = VIOLATION if node.problems else "#c5cad3"
    width = 2 if node.problems else 0.6
    svg.add(f'<g opacity="{0.35 if node.down else 1}">')
    svg.add(
        f'<rect class="node" data-node="{escape(node.name)}" x="{x:.1f}" y="{y:.1f}" '
        f'width="{size:.1f}" height="{size:.1f}" fill="{fill}" stroke="{stroke}" '
        f'stroke-width="{width}"><title>{_tip(node)}</title></rect>'
    )
    top = size * 0.58
    masters = node.masters
    for i, m in enumerate(masters):
        w = (size - 2) / len(masters)
        svg.add(
            f'<rect x="{x + 1 + i * w:.1f}" y="{y + 1:.1f}" width="{w:.1f}" height="{top - 1:.1f}" '
            f'fill="{palette[m.cluster]}"/>'
        )
    replicas = node.replicas[:4]
    if replicas:
        h = (size - top - 1) / len(replicas)
        for i, r in enumerate(replicas):
            svg.add(
                f'<rect x="{x + 1:.1f}" y="{y + top + i * h:.1f}" width="{size - 2:.1f}" '
                f'height="{max(1.0, h - 0.6):.1f}" fill="{palette[r.cluster]}" opacity="0.75"/>'
            )
    svg.add("</g>")


CARD_W, LINE_H = 128, 15


def _card_height(node: NodeView) -> float:
    return 20 + LINE_H * max(1, len(node.members))


def _card(svg: _Svg, node: NodeView, x: float, y: float, palette: dict[str, str]) -> None:
    """One node as a card with its name and one chip per member."""
    h = _card_height(node)
    stroke = VIOLATION if node.problems else "#b9bfc9"
    width = 2.5 if node.problems else 1
    svg.add(f'<g opacity="{0.35 if node.down else 1}">')
    svg.add(
        f'<rect class="node" data-node="{escape(node.name)}" x="{x:.1f}" y="{y:.1f}" '
        f'width="{CARD_W}" height="{h:.1f}" rx="4" '
        f'fill="{DOWN_FILL if node.down else "#fafbfc"}" stroke="{stroke}" stroke-width="{width}">'
        f"<title>{_tip(node)}</title></rect>"
    )
    label = escape(node.name) + (" · DOWN" if node.down else "")
    svg.add(
        f'<text x="{x + 6:.1f}" y="{y + 13:.1f}" font-size="11" font-weight="600" '
        f'style="{FONT}">{label}</text>'
    )
    if not node.members:
        svg.add(
            f'<text x="{x + 6:.1f}" y="{y + 29:.1f}" font-size="10" fill="#8a8f98" '
            f'style="{FONT}">no Redis pod</text>'
        )
    for i, m in enumerate(node.members):
        cy = y + 18 + i * LINE_H
        colour = palette[m.cluster]
        master = m.role == "master"
        svg.add(
            f'<rect x="{x + 5:.1f}" y="{cy:.1f}" width="{CARD_W - 10}" height="{LINE_H - 3}" rx="2" '
            f'fill="{colour if master else "#fff"}" stroke="{colour}" stroke-width="1.2"/>'
        )
        name = m.cluster.split("/")[-1]
        text = f"{'M' if master else 'r'} {name}/{m.shard}"
        if len(text) > 18:
            text = text[:17] + "…"
        text += ARRIVES.get(m.action, "")
        svg.add(
            f'<text x="{x + 9:.1f}" y="{cy + 9.5:.1f}" font-size="10" '
            f'fill="{"#fff" if master else "#1d232a"}" style="{FONT}">{escape(text)}</text>'
        )
    if node.problems:
        svg.add(
            f'<text x="{x + CARD_W - 6:.1f}" y="{y + 13:.1f}" font-size="11" font-weight="700" '
            f'text-anchor="end" fill="{VIOLATION}" style="{FONT}">!</text>'
        )
    svg.add("</g>")


def _frame(svg: _Svg, mark: Mark | None, x: float, y: float, w: float, h: float) -> None:
    if mark is None:
        return
    dash = ' stroke-dasharray="6 3"' if mark.kind == "worst" else ""
    colour = WORST if mark.kind == "worst" else "#7a7f87"
    svg.add(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" fill="none" '
        f'stroke="{colour}" stroke-width="2.5"{dash}/>'
    )


def panel_svg(scene: Scene, width: float, palette: dict[str, str]) -> str:
    """The scene as one SVG ``width`` pixels wide; its height follows from the content."""
    zones = list(scene.zones.items())
    detailed = len(scene.nodes) <= DETAIL_LIMIT
    columns = max(1, min(len(zones), int(width // (CARD_W * 2 + 40 if detailed else 260))))
    col_w = width / columns
    svg = _Svg([])
    column_y = [0.0] * columns
    for zone, racks in zones:
        col = min(range(columns), key=lambda c: (column_y[c], c))
        x0 = col * col_w + 4
        y0 = column_y[col] + 4
        inner = col_w - 8
        body: list[str] = []
        zsvg = _Svg(body)
        y = y0 + 24
        for rack, nodes in racks.items():
            rack_mark = scene.mark_of("rack", rack)
            rack_y = y
            masters = sum(len(n.masters) for n in nodes)
            replicas = sum(len(n.replicas) for n in nodes)
            down = all(n.down for n in nodes)
            label = f"rack {rack} · {len(nodes)} node{'s' * (len(nodes) != 1)} · {masters} M / {replicas} r"
            if down:
                label += " · DOWN"
            zsvg.add(
                f'<text x="{x0 + 8:.1f}" y="{y + 12:.1f}" font-size="11" fill="#333" '
                f'style="{FONT}">{escape(label)}</text>'
            )
            y += 17
            if detailed:
                per_row = max(1, int((inner - 12) // (CARD_W + 6)))
                for start in range(0, len(nodes), per_row):
                    row = nodes[start : start + per_row]
                    for i, node in enumerate(row):
                        _card(zsvg, node, x0 + 8 + i * (CARD_W + 6), y, palette)
                    y += max(_card_height(n) for n in row) + 6
            else:
                size = 13.0
                gap = 2.0
                per_row = max(1, int((inner - 14) // (size + gap)))
                for i, node in enumerate(nodes):
                    r, c = divmod(i, per_row)
                    _cell(
                        zsvg, node, x0 + 8 + c * (size + gap), y + r * (size + gap), size, palette
                    )
                y += -(-len(nodes) // per_row) * (size + gap) + 4
            _frame(zsvg, rack_mark, x0 + 3, rack_y - 2, inner - 6, y - rack_y + 2)
            y += 6
        zone_h = y - y0 + 2
        zone_mark = scene.mark_of("zone", zone)
        zone_down = all(n.down for nodes in racks.values() for n in nodes)
        svg.add(
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{inner:.1f}" height="{zone_h:.1f}" rx="8" '
            f'fill="{"#f0f0f0" if zone_down else "#f7f8fa"}" stroke="#d5d9e0"/>'
        )
        title = f"zone {zone}" + (" · DOWN" if zone_down else "")
        svg.add(
            f'<text x="{x0 + 8:.1f}" y="{y0 + 17:.1f}" font-size="13" font-weight="700" '
            f'style="{FONT}">{escape(title)}</text>'
        )
        svg.parts.extend(body)
        _frame(svg, zone_mark, x0, y0, inner, zone_h)
        column_y[col] = y0 + zone_h + 8
    notes = [m for m in scene.marks if m.kind == "worst"]
    top = 22 * len(notes)
    header = "".join(
        f'<text x="6" y="{14 + 22 * i}" font-size="12" fill="{WORST}" style="{FONT}">'
        f"{escape(m.text)} ({escape(m.level)} {escape(m.domain)}, dashed frame)</text>"
        for i, m in enumerate(notes)
    )
    height = max(column_y) + 4 + top
    return (
        f'<svg class="placement" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">{header}'
        f'<g transform="translate(0,{top})">{"".join(svg.parts)}</g></svg>'
    )


def _legend(palette: dict[str, str]) -> str:
    items = [
        f'<span><i class="sw" style="background:{c}"></i>{escape(k)}</span>'
        for k, c in palette.items()
    ]
    items.append(
        '<span><i class="sw" style="background:#888"></i>master (cell top / filled chip)</span>'
    )
    items.append(
        '<span><i class="sw rep" style="background:#888"></i>replica (stripe / outlined chip)</span>'
    )
    items.append(
        f'<span><i class="sw" style="border:2px solid {VIOLATION}"></i>hard violation</span>'
    )
    items.append("<span>+ placed, ↦ moved by the plan</span>")
    items.append(f'<span><i class="sw" style="background:{DOWN_FILL}"></i>lost (drill)</span>')
    items.append(
        f'<span><i class="sw" style="border:2px dashed {WORST}"></i>worst single failure</span>'
    )
    return f'<div class="legend">{"".join(items)}</div>'


def html_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], bad: int | None = None
) -> str:
    """A plain table; ``bad``: index of a column whose non-empty cells are shown as alarming."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="bad">{escape(c)}</td>' if i == bad and c else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def page(
    title: str,
    scenes: Sequence[Scene],
    summary: Iterable[str] = (),
    extra_html: Iterable[str] = (),
    width: float = 1360,
) -> str:
    """The whole page: title, summary, legend, the scenes side by side, then ``extra_html``."""
    palette = colours(c for s in scenes for c in s.clusters)
    each = (width - 16 * (len(scenes) - 1)) / max(1, len(scenes))
    figures = []
    for scene in scenes:
        caption = "".join(f"<small>{escape(line)}</small>" for line in scene.caption)
        figures.append(
            f"<figure><figcaption>{escape(scene.title)}{caption}</figcaption>"
            f"{panel_svg(scene, each, palette)}</figure>"
        )
    lines = "".join(f"<div>{escape(line)}</div>" for line in summary)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><div class="sub">{lines}</div>{_legend(palette)}'
        f'<div class="panels">{"".join(figures)}</div>{"".join(extra_html)}</body></html>'
    )
