"""``-o map`` and ``-o html``: the text map on every command, and the HTML page as a real
browser (headless Chromium) renders it."""

import json
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import png
import pytest
import yaml
from click.testing import CliRunner

from models.synthetic import generate_cluster
from placer.cli import main
from placer.output.html import PALETTE
from tests.kube_dicts import node, redis_pod

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not on PATH (Debian: apt-get install chromium)")
    return binary


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def screenshot(page: Path, out: Path) -> list[tuple[int, int, int]]:
    """The page as Chromium draws it in a 1400x1000 window, as RGB pixels."""
    done = browse(page, f"--screenshot={out}", "--window-size=1400,1000")
    assert out.exists(), done.stderr[-2000:]
    width, height, rows, _ = png.Reader(filename=str(out)).asRGBA8()
    assert (width, height) == (1400, 1000)
    pixels: list[tuple[int, int, int]] = []
    for row in rows:
        pixels.extend(zip(row[0::4], row[1::4], row[2::4], strict=True))
    return pixels


def dom(page: Path) -> str:
    done = browse(page, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def near(pixel: tuple[int, int, int], colour: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 3 for a, b in zip(pixel, colour, strict=True))


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return str(path)


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(main, args)


def small_cluster() -> dict[str, Any]:
    """Two Redis clusters on six nodes; node n0 runs two masters (a hard violation)."""
    nodes = [node(f"n{i}", f"zone-{'abc'[i % 3]}", f"rack-{i % 3}-{i // 3}") for i in range(6)]
    pods = [
        redis_pod("cache-0-0", "cache", 0, "master", node="n0"),
        redis_pod("cache-0-1", "cache", 0, "replica", node="n1"),
        redis_pod("cache-1-0", "cache", 1, "master", node="n0"),
        redis_pod("cache-1-1", "cache", 1, "replica", node="n2"),
        redis_pod("web-0-0", "web", 0, "master", node="n4"),
        redis_pod("web-0-1", "web", 0, "replica", node="n5"),
        redis_pod("web-1-0", "web", 1, None),
        redis_pod("web-1-1", "web", 1, None),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": [*nodes, *pods]}


SELF_CONTAINED = re.compile(r"https?:|<link|<img|@import|url\(|src=", re.IGNORECASE)


@pytest.mark.parametrize("command", ["plan", "audit", "rebalance", "drill"])
def test_every_command_writes_a_self_contained_page_and_a_map(command: str, tmp_path: Path) -> None:
    dump = write(tmp_path, "dump.yaml", small_cluster())
    page = invoke([command, "-f", dump, "-o", "html"])
    assert page.exit_code in (0, 1), page.output
    text = page.stdout
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert SELF_CONTAINED.search(text) is None, SELF_CONTAINED.search(text)
    assert text.count('class="node"') == 6 * (2 if command == "rebalance" else 1)
    text_map = invoke([command, "-f", dump, "-o", "map"])
    assert text_map.exit_code == page.exit_code
    lines = text_map.stdout.splitlines()
    assert "zone zone-a" in "\n".join(lines)
    n0 = [line for line in lines if line.strip().startswith("n0 ")]
    assert n0 and all("M:cache/0 M:cache/1" in line for line in n0[:1])


def test_map_flags_hard_violations_and_rebalance_shows_before_and_after(tmp_path: Path) -> None:
    dump = write(tmp_path, "dump.yaml", small_cluster())
    audit = invoke(["audit", "-f", dump, "-o", "map"])
    assert audit.exit_code == 1
    n0 = next(line for line in audit.stdout.splitlines() if line.strip().startswith("n0 "))
    assert n0.endswith("[hard: master-exclusivity]")
    rebalance = invoke(["rebalance", "-f", dump, "-o", "map"])
    out = rebalance.stdout
    assert "== before: running placement ==" in out and "== after: the rebalance plan ==" in out
    before, after = out.split("== after: the rebalance plan ==")
    assert "[hard: master-exclusivity]" in before and "[hard:" not in after
    assert "1. failover shard default/cache/" in out
    plan = invoke(["plan", "-f", dump, "-o", "map"])
    assert "web/1" in plan.stdout  # the pending shard, where the plan puts it


def test_the_page_renders_in_a_browser_with_each_clusters_colour(tmp_path: Path) -> None:
    dump = write(tmp_path, "dump.yaml", small_cluster())
    page = tmp_path / "plan.html"
    page.write_text(invoke(["plan", "-f", dump, "-o", "html"]).stdout)
    pixels = screenshot(page, tmp_path / "plan.png")
    counts = Counter(pixels)
    assert counts.most_common(1)[0][0] == (255, 255, 255)  # a page, mostly white ...
    assert len(counts) > 50  # ... with something drawn on it
    for colour in PALETTE[:2]:  # cache, then web
        assert sum(n for p, n in counts.items() if near(p, rgb(colour))) > 200, colour
    # The SVG is there after load, one rect per node and a chip per member.
    html = dom(page)
    assert html.count('class="node"') == 6
    assert "zone zone-a" in html and "M cache/0" in html and "r web/0" in html


def test_a_drill_greys_out_the_lost_zone(tmp_path: Path) -> None:
    dump = write(tmp_path, "dump.yaml", small_cluster())
    page = tmp_path / "drill.html"
    result = invoke(["drill", "-f", dump, "--fail", "zone=zone-a", "-o", "html"])
    page.write_text(result.stdout)
    html = dom(page)
    assert "zone zone-a · DOWN" in html and "zone zone-b · DOWN" not in html
    assert html.count('opacity="0.35"') == 2  # n0 and n3, the nodes of zone-a


def test_a_thousand_nodes_stay_readable(tmp_path: Path) -> None:
    """1,000 nodes, 1,200 Redis pods: every node a cell, racks as bars, all on one screen."""
    dump = write(
        tmp_path,
        "big.json",
        json.dumps(generate_cluster(1000, 0, running_shards=400, clusters=3, racks_per_zone=12)),
    )
    page = tmp_path / "audit.html"
    result = invoke(["audit", "-f", dump, "-o", "html"])
    page.write_text(result.stdout)
    assert len(result.stdout) < 2_000_000
    html = dom(page)
    assert html.count('class="node"') == 1000
    assert html.count("<title>") == 1000 + 1  # a hover title per node, and the page's
    assert "rack zone-a-rack-11 · " in html
    pixels = screenshot(page, tmp_path / "audit.png")
    counts = Counter(pixels)
    for colour in PALETTE[:3]:
        assert sum(n for p, n in counts.items() if near(p, rgb(colour))) > 2000, colour
    # The three zones are three columns, each with its clusters' colours ...
    coloured = {p for p in counts if any(near(p, rgb(c)) for c in PALETTE[:3])}
    for left in (0, 466, 933):
        column = (pixels[y * 1400 + x] for y in range(1000) for x in range(left, left + 466))
        assert sum(1 for p in column if p in coloured) > 1000
    # ... and the whole placement fits under the page header on one 1000-pixel screen.
    height = int(re.search(r'<svg class="placement" width="\d+" height="(\d+)"', html)[1])  # type: ignore[index]
    assert height <= 760
