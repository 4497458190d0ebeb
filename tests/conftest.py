"""Session fixtures shared by tests/ and tests/e2e/."""

from collections.abc import Iterator

import pytest

from tests import container


@pytest.fixture(scope="session")
def image() -> Iterator[container.Image]:
    """The image, built once by deploy/image/build.sh (tests/container.py says when it skips)."""
    reason = container.unusable()
    if reason is not None:
        pytest.skip(reason)
    built = container.build()
    print(f"\nimage {built.name}: {built.size}, built in {built.build_seconds:.0f}s")
    try:
        yield built
    finally:
        container.remove(built)
