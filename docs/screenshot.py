"""Make docs/plan.png, the README's picture: `redis-placer plan -o html` of the bundled example,
rendered by headless Chromium. Run from the repository root after a change to the picture:

    python docs/screenshot.py [--chromium /usr/bin/chromium] [--size 1400,600]
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "placer" / "examples" / "cluster.yaml"
OUT = ROOT / "docs" / "plan.png"


def render_html() -> str:
    """The page exactly as a user gets it (the plan exits 0 on this example)."""
    done = subprocess.run(
        [sys.executable, "-m", "placer.cli", "plan", "-f", str(EXAMPLE), "-o", "html"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def screenshot(html: str, out: Path, chromium: str, size: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "plan.html"
        page.write_text(html, encoding="utf-8")
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--hide-scrollbars",
                f"--user-data-dir={Path(tmp) / 'profile'}",
                f"--screenshot={out}",
                f"--window-size={size}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--size", default="1400,600", help="window width,height in pixels")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    screenshot(render_html(), args.out, args.chromium, args.size)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
