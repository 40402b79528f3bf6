"""The child side of a frame link (ChildLink), over real pipes: what the task worker,
the ask worker and the runners rely on."""

from __future__ import annotations

import asyncio
import io
import os
import threading
from collections.abc import Iterator

import pytest

from jarvisd.protocol import (
    SENTINEL,
    Cancel,
    ChildLink,
    Frame,
    FrameReader,
    Infer,
    InferResult,
    Ping,
    Pong,
    Start,
    encode,
)


class Pipes:
    """The host's end of a link: it writes frames in, reads the child's frames out."""

    def __init__(self) -> None:
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.child_in = os.fdopen(in_r, "rb")
        self.child_out = os.fdopen(out_w, "wb")
        self.child_out_r = os.fdopen(self.out_r, "rb")
        self.from_child = FrameReader(self.child_out_r)
        self.in_open = True

    def send(self, frame: Frame) -> None:
        os.write(self.in_w, encode(frame))

    def close(self) -> None:
        if self.in_open:
            self.in_open = False
            os.close(self.in_w)

    def close_all(self) -> None:
        self.close()
        for f in (self.child_in, self.child_out, self.child_out_r):
            f.close()


@pytest.fixture
def host() -> Iterator[Pipes]:
    pipes = Pipes()
    yield pipes
    pipes.close_all()


def test_answers_go_to_their_caller_pings_are_answered_the_rest_to_on_frame(host: Pipes) -> None:
    seen: list[Frame] = []
    ended: list[Exception | None] = []
    link = ChildLink(host.child_in, host.child_out, on_frame=seen.append, on_end=ended.append)
    thread = link.start()

    async def scenario() -> Frame:
        call = asyncio.ensure_future(link.call(Infer(id="q1", request={"x": 1})))
        asked = await asyncio.to_thread(host.from_child.read)
        assert isinstance(asked, Infer) and asked.id == "q1"
        host.send(InferResult(id="nobody", error="late"))  # an answer to nothing asked
        host.send(Ping(id="p1"))
        host.send(InferResult(id="q1", generation={"content": "42"}))
        return await asyncio.wait_for(call, 30)

    answer = asyncio.run(scenario())
    assert isinstance(answer, InferResult) and answer.generation == {"content": "42"}
    pong = host.from_child.read()
    assert isinstance(pong, Pong) and pong.id == "p1"
    host.send(Start(id="s", task="exec"))
    host.close()
    thread.join(30)  # the reader thread ends at the end of the stream
    assert not thread.is_alive() and ended == [None]
    assert [f.id for f in seen] == ["nobody", "s"]


def test_exchange_blocks_until_the_answer_and_on_frame_can_stop_reading(host: Pipes) -> None:
    ended: list[Exception | None] = []
    link = ChildLink(
        host.child_in,
        host.child_out,
        on_frame=lambda frame: not isinstance(frame, Cancel),
        on_end=ended.append,
    )
    thread = link.start()
    answers: list[Frame] = []
    asking = threading.Thread(target=lambda: answers.append(link.exchange(Ping(id="b1"))))
    asking.start()
    barrier = host.from_child.read()
    assert isinstance(barrier, Ping) and barrier.id == "b1"
    host.send(Pong(id="b1"))
    asking.join(30)
    assert [a.id for a in answers] == ["b1"]
    host.send(Cancel(reason="stop"))  # on_frame says stop: reading ends without EOF
    thread.join(30)
    assert not thread.is_alive() and ended == [None]


def test_a_bad_frame_ends_the_link_with_the_error() -> None:
    ended: list[Exception | None] = []
    bad = io.BytesIO((SENTINEL + '{"kind": "launch", "id": "x"}\n').encode())
    ChildLink(bad, io.BytesIO(), on_end=ended.append).read_forever()
    assert len(ended) == 1 and "unknown frame kind" in str(ended[0])


class Broken(io.BytesIO):
    def write(self, data: object) -> int:
        raise BrokenPipeError("gone")


def test_a_broken_pipe_is_the_host_gone() -> None:
    gone: list[bool] = []
    ChildLink(io.BytesIO(), Broken(), on_broken=lambda: gone.append(True)).send(Ping())
    assert gone == [True]
    with pytest.raises(BrokenPipeError):  # without on_broken the sender is told
        ChildLink(io.BytesIO(), Broken()).send(Ping())
