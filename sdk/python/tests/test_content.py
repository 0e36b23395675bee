"""MCP content blocks: the cases of the Go SDK's TestContent."""

from __future__ import annotations

import pytest

from toolgate_service.content import audio, blob_resource, content, image, resource, resource_link, text


@pytest.mark.parametrize(
    ("blocks", "want"),
    [
        ([], "[]"),
        ([text("hi")], '[{"type":"text","text":"hi"}]'),
        ([text("")], '[{"type":"text","text":""}]'),
        (
            [image(b"\x89PNG", "image/png"), audio(b"RIFF", "audio/wav")],
            '[{"type":"image","data":"iVBORw==","mimeType":"image/png"},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav"}]',
        ),
        (
            [resource("test://r", '{"a":1}', "application/json")],
            '[{"type":"resource","resource":{"uri":"test://r","mimeType":"application/json","text":"{\\"a\\":1}"}}]',
        ),
        ([blob_resource("test://b", b"\x00\x01")], '[{"type":"resource","resource":{"uri":"test://b","blob":"AAE="}}]'),
        (
            [resource_link("file:///a.txt", "a.txt", "text/plain")],
            '[{"type":"resource_link","uri":"file:///a.txt","name":"a.txt","mimeType":"text/plain"}]',
        ),
    ],
)
def test_content(blocks: list[object], want: str) -> None:
    assert content(*blocks) == want  # type: ignore[arg-type]


def test_refused_blocks() -> None:
    with pytest.raises(ValueError, match="image content has no data"):
        image(b"", "image/png")
    with pytest.raises(ValueError, match="audio content has no MIME type"):
        audio(b"\x01", "")
    with pytest.raises(ValueError, match="no URI"):
        resource("", "x", "text/plain")
    with pytest.raises(ValueError, match="is empty"):
        resource("u:1", "")
    with pytest.raises(ValueError, match="is empty"):
        blob_resource("u:1", b"")
    with pytest.raises(ValueError, match="a URI and a name"):
        resource_link("u:1", "")
    with pytest.raises(TypeError, match=r"content\[1\]"):
        content(text("x"), "not a block")  # type: ignore[arg-type]
