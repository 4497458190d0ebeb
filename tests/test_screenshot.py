"""The README's picture, docs/plan.png, shows the page the bundled example plans to now.

docs/screenshot.py stamps the PNG with the digest of the page it rendered (durations masked);
here the page is rendered again and its digest compared, so a change to the plan, the example
or the drawing that leaves the picture stale fails until `python docs/screenshot.py` is run.
With chromium installed, the script itself is run too, into a scratch file.
"""

import importlib.util
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("screenshot", ROOT / "docs" / "screenshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_picture_shows_the_page_of_today() -> None:
    script = _script()
    stamped = script.digest_of((ROOT / "docs" / "plan.png").read_bytes())
    assert stamped is not None, (
        "docs/plan.png carries no page digest: run python docs/screenshot.py"
    )
    assert stamped == script.page_digest(script.render_html()), (
        "docs/plan.png is stale: run python docs/screenshot.py"
    )


def test_the_digest_survives_in_a_valid_png_and_tells_pages_apart() -> None:
    script = _script()
    png = (ROOT / "docs" / "plan.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png.endswith(b"IEND\xaeB`\x82")
    restamped = script.with_digest(png, "0" * 64)
    assert script.digest_of(restamped) == "0" * 64
    assert restamped.endswith(b"IEND\xaeB`\x82") and len(restamped) == len(png)
    assert script.page_digest("<p>solved in 0.07s</p>") == script.page_digest(
        "<p>solved in 1.2s</p>"
    )
    assert script.page_digest("<p>node-a1</p>") != script.page_digest("<p>node-a2</p>")


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="chromium is not installed")
def test_the_script_renders_a_stamped_picture(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "plan.png"
    subprocess.run(
        [sys.executable, str(ROOT / "docs" / "screenshot.py"), "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=180,
    )
    png = out.read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1400, 600)
    script = _script()
    assert script.digest_of(png) == script.page_digest(script.render_html())
