"""Review of the security merge from the side of other implementations and of the new threads:
the loopback callback listener in a process with many files open."""

from __future__ import annotations

import http.client
import os
import resource
import threading
from collections.abc import Iterator

import pytest
from raw_http import WAIT

from exmcp_actors._auth._browser import LoopbackListener, free_port

# -- the loopback callback listener ---------------------------------------------------------------


@pytest.fixture
def files_open_past_1024() -> Iterator[None]:
    """Every descriptor up to past 1024 taken while the test makes its sockets, as in a host
    with many connections open: select() cannot watch those."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip("this machine allows fewer than 1200 open files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    taken = [os.dup(0) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_callback_listener_takes_the_callback_when_its_sockets_are_numbered_past_1024(
    files_open_past_1024: None,
) -> None:
    port = free_port("127.0.0.1")
    redirect = f"http://127.0.0.1:{port}/callback"
    listener = LoopbackListener(redirect)
    answered: list[int] = []

    def browser() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            connection.request("GET", "/callback?code=c0de&state=s1")
            answered.append(connection.getresponse().status)
        finally:
            connection.close()

    thread = threading.Thread(target=browser, daemon=True)
    thread.start()
    assert listener.wait(redirect, 5.0) == f"{redirect}?code=c0de&state=s1"
    thread.join(WAIT)
    assert answered == [200]
