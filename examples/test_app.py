"""test_app: a test that fails on purpose under `pytest --heaplens`, for the README.

app.handle() keeps every page it renders, so 100 requests leak about 6.3 MiB, over the
1 MB limit. Run it from this directory: pytest --heaplens test_app.py
"""
import pytest

import app


@pytest.mark.limit_leaks("1 MB")
def test_handle_leaks_nothing():
    for n in range(100):
        app.handle(n)
