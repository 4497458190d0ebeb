"""Make docs/plan.png, the README's picture: `redis-placer plan -o html` of the bundled example,
rendered by headless Chromium. Run from the repository root after a change to the picture:

    python docs/screenshot.py [--chromium /usr/bin/chromium] [--size 1400,600]

The PNG carries the digest of the page it shows (a ``tEXt`` chunk, durations masked), so
tests/test_screenshot.py can tell, without a browser, whether the picture is still current.
"""

import argparse
import hashlib
import re
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "placer" / "examples" / "cluster.yaml"
OUT = ROOT / "docs" / "plan.png"
DIGEST_KEY = b"redis-placer-page-sha256"
DURATION = re.compile(r"\b\d+(?:\.\d+)?s\b")


def page_digest(html: str) -> str:
    """The page's sha256 with its durations masked: the same plan draws the same digest."""
    return hashlib.sha256(DURATION.sub("<t>s", html).encode("utf-8")).hexdigest()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def with_digest(png: bytes, digest: str) -> bytes:
    """The PNG with a tEXt chunk ``DIGEST_KEY`` = ``digest`` just before its IEND chunk (in
    place of the one it had)."""
    at = png.find(b"tEXt" + DIGEST_KEY + b"\0")
    if at >= 0:
        length = struct.unpack(">I", png[at - 4 : at])[0]
        png = png[: at - 4] + png[at + 4 + length + 4 :]
    end = png.rindex(b"IEND") - 4
    return png[:end] + _chunk(b"tEXt", DIGEST_KEY + b"\0" + digest.encode()) + png[end:]


def digest_of(png: bytes) -> str | None:
    """The page digest a PNG made here carries, or None."""
    at = png.find(b"tEXt" + DIGEST_KEY + b"\0")
    if at < 0:
        return None
    length = struct.unpack(">I", png[at - 4 : at])[0]
    return png[at + 4 + len(DIGEST_KEY) + 1 : at + 4 + length].decode()


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
    html = render_html()
    screenshot(html, args.out, args.chromium, args.size)
    args.out.write_bytes(with_digest(args.out.read_bytes(), page_digest(html)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
