"""Image frames: JPEG and PNG at ingest (codec.py), their decoders
(decoders/), resize at ingest (resize.py), and what an encoded frame stream
is (encoding.py)."""

from .decoders import FrameDecoding
from .encoding import (
    CODECS,
    FRAME_FORMS,
    EncodedFrames,
    FrameEncoding,
    codec_for,
    frame_kind,
)
from .resize import check_size, resize

__all__ = [
    "CODECS",
    "FRAME_FORMS",
    "EncodedFrames",
    "FrameDecoding",
    "FrameEncoding",
    "check_size",
    "codec_for",
    "frame_kind",
    "resize",
]
