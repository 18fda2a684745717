"""An MCAP file read with every CRC it carries checked, with the mcap
package's own record readers: the summary's, the data section's and each
chunk's. load_mcap reads its files this way; load_bag checks the mcap files
of a ROS 2 bag with it before rosbags reads them."""

import contextlib
import mmap
import os
import warnings
import zlib

from ._common import LoaderError


def warn_unprotected(what, files):
    """One warning for the files no CRC fully covers."""
    if files:
        warnings.warn(
            f"{what}: {len(files)} file(s) carry no CRC over some of their messages or their "
            "summary (their writer left the CRCs at 0): corruption there cannot be detected:\n  "
            + "\n  ".join(files),
            stacklevel=3,
        )


@contextlib.contextmanager
def mapped(path, where):
    """The file's bytes, mapped read-only (an mmap the mcap readers read as a
    stream): a corrupt length then reads short and fails as a cut record,
    where a file object would first allocate the length it asks for."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise LoaderError(f"{where}: the file is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


def _footer(data, where):
    """The Footer record at the file's end, and where it starts; a file that
    does not end with one and MCAP's magic (one cut short) is an error."""
    from mcap.data_stream import ReadDataStream
    from mcap.exceptions import InvalidMagic
    from mcap.reader import FOOTER_SIZE
    from mcap.records import Footer
    from mcap.stream_reader import MAGIC_SIZE, StreamReader, read_magic

    cut = LoaderError(f"{where}: the file does not end with an MCAP footer and magic (cut short?)")
    at = len(data) - MAGIC_SIZE - FOOTER_SIZE
    if at < MAGIC_SIZE:
        raise cut
    data.seek(len(data) - MAGIC_SIZE)
    try:
        read_magic(ReadDataStream(data))
    except InvalidMagic:
        raise cut from None
    data.seek(at)
    footer = next(StreamReader(data, skip_magic=True, record_size_limit=len(data)).records)
    if not isinstance(footer, Footer):
        raise cut
    return footer, at


def _crc_error(where, what, stored, computed):
    return LoaderError(
        f"{where}: the CRC of {what} does not match (stored {stored:#010x}, computed "
        f"{computed:#010x}): the file is corrupt"
    )


def _check_summary_crc(data, footer, footer_at, where):
    """The footer's CRC of the summary section (and of the footer's own
    offsets); True where there was one to check."""
    from mcap.stream_reader import MAGIC_SIZE

    if footer.summary_crc == 0:
        return False
    start = footer.summary_start or footer_at
    if not MAGIC_SIZE <= start <= footer_at:
        raise LoaderError(f"{where}: the footer's summary offset {start} is outside the file")
    computed = zlib.crc32(data[start : len(data) - MAGIC_SIZE - 4])
    if computed != footer.summary_crc:
        raise _crc_error(where, "the summary section", footer.summary_crc, computed)
    return True


@contextlib.contextmanager
def _crc_errors(where):
    """mcap's CRCValidationError (a chunk's or the data section's CRC) as a
    LoaderError that says which."""
    from mcap.stream_reader import CRCValidationError

    try:
        yield
    except CRCValidationError as e:
        what = "a chunk" if type(e.record).__name__ == "Chunk" else "the data section"
        raise _crc_error(where, what, e.expected, e.actual) from e


def _crc32(data, end, step=1 << 26):
    """zlib's CRC-32 of data[:end], a slice at a time (no copy of the file)."""
    crc = 0
    for start in range(0, end, step):
        crc = zlib.crc32(data[start : min(start + step, end)], crc)
    return crc


def _check_data_crc(data, footer, footer_at, where):
    """The data section's CRC, stored in its last record, DataEnd, just
    before the summary (or the footer): True if checked, False if the writer
    left it at 0, None where no DataEnd is where mcap's writers put it (the
    caller then reads the data section through)."""
    from mcap.records import DataEnd
    from mcap.stream_reader import StreamReader

    at = (footer.summary_start or footer_at) - 13  # opcode, length 4, crc: as written
    if at < 8:
        return None
    data.seek(at)
    try:
        record = next(StreamReader(data, skip_magic=True, record_size_limit=len(data)).records)
    except Exception:  # not a record there: the caller reads the file through
        return None
    if not isinstance(record, DataEnd):
        return None
    if record.data_section_crc == 0:
        return False
    computed = _crc32(data, at)
    if computed != record.data_section_crc:
        raise _crc_error(where, "the data section", record.data_section_crc, computed)
    return True


def _data_section(data, where, decompress):
    """Reads the data section record by record with mcap's StreamReader,
    which checks the data section's CRC at DataEnd; with ``decompress``, each
    chunk is also decompressed and its CRC checked. Returns whether every
    message is under a CRC: the data section's, or its chunk's."""
    from mcap.records import Chunk, DataEnd, Message
    from mcap.stream_reader import StreamReader, get_chunk_data_stream

    chunk_crcs, loose_messages = True, False
    data.seek(0)
    reader = StreamReader(data, validate_crcs=True, emit_chunks=True, record_size_limit=len(data))
    with _crc_errors(where):
        for record in reader.records:
            if isinstance(record, Chunk):
                if decompress:
                    get_chunk_data_stream(record, validate_crc=True)
                chunk_crcs = chunk_crcs and record.uncompressed_crc != 0
            elif isinstance(record, Message):
                loose_messages = True
            elif isinstance(record, DataEnd):
                return record.data_section_crc != 0 or (chunk_crcs and not loose_messages)
    raise LoaderError(f"{where}: the data section has no DataEnd record")


def _check(data, where, decompress):
    """Checks the CRCs of a mapped MCAP file that cover what its readers read:
    the summary section's (channels, schemas, chunk indexes) and the data
    section's; with ``decompress``, each chunk's too (else the reader that
    reads a chunk checks it). Returns (the summary or None, whether CRCs cover
    the summary and every message).

    An indexed file is checked without being read record by record (mcap's
    StreamReader parses every message index in Python: about a tenth of a
    load's time): the data section's CRC over its bytes, and each chunk's
    header from the chunk indexes."""
    from mcap.data_stream import ReadDataStream
    from mcap.reader import SeekingReader
    from mcap.records import Chunk
    from mcap.stream_reader import get_chunk_data_stream

    footer, footer_at = _footer(data, where)
    summary_crc = _check_summary_crc(data, footer, footer_at, where) or not footer.summary_start
    data.seek(0)
    summary = SeekingReader(data, record_size_limit=len(data)).get_summary()
    data_crc = None
    if summary is not None and summary.chunk_indexes:
        data_crc = _check_data_crc(data, footer, footer_at, where)
    if data_crc is None:  # no chunk indexes, or DataEnd elsewhere: read it all through
        return summary, _data_section(data, where, decompress) and summary_crc
    chunk_crcs = True
    with _crc_errors(where):
        for index in summary.chunk_indexes:
            data.seek(index.chunk_start_offset + 1 + 8)  # past the opcode and the length
            chunk = Chunk.read(ReadDataStream(data))
            if decompress:
                get_chunk_data_stream(chunk, validate_crc=True)
            chunk_crcs = chunk_crcs and chunk.uncompressed_crc != 0
    return summary, summary_crc and (data_crc or chunk_crcs)


def verify_mcap(data, where):
    """Checks every CRC of a mapped MCAP file (``mapped``) with the mcap
    package: each chunk's, the data section's and the summary's. Returns
    whether they cover the summary and every message; where they do not (a
    writer that left them at 0, as rosbags' does), corruption there cannot be
    detected."""
    return _check(data, where, decompress=True)[1]


def verified_messages(data, topics, where):
    """(channels, messages, covered) of a mapped MCAP file: its summary's
    channels (id -> Channel; None in a file without a summary); the messages
    of ``topics`` as (schema, channel, message) in log-time order, every CRC
    that covers them checked before the first is yielded; and whether CRCs
    cover the summary and every message (see ``verify_mcap``).

    Indexed files are read through the chunk indexes by mcap's SeekingReader,
    which checks each chunk it reads. Files without chunk indexes are read
    from end to end by mcap's NonSeekingReader, which checks the chunks and
    the data section as it goes: the SeekingReader would fall back to that
    itself, but drops ``validate_crcs`` when it does (mcap 1.2.1 to 1.6.0)."""
    from mcap.reader import NonSeekingReader, SeekingReader

    summary, covered = _check(data, where, decompress=False)
    data.seek(0)
    if summary is not None and summary.chunk_indexes:
        reader = SeekingReader(data, validate_crcs=True, record_size_limit=len(data))
    else:
        reader = NonSeekingReader(data, validate_crcs=True, record_size_limit=len(data))
    channels = summary.channels if summary is not None else None

    def messages():
        with _crc_errors(where):
            yield from reader.iter_messages(topics=topics)

    return channels, messages(), covered
