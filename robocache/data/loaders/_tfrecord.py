"""TFRecord shards read record by record, with both masked CRC-32Cs of
every record (its length's and its data's) checked."""

import os
import struct

from ._common import LoaderError


def tfrecords(path, where, masked_crc):
    """(data, problem) of each record of a TFRecord file, its CRCs checked:
    problem is None, or what is wrong with the data (its CRC does not match:
    that record alone is bad). A length whose CRC does not match, or a record
    that runs past the end of the file, ends the file with a LoaderError
    (what follows cannot be found)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        k = 0
        while True:
            at = f.tell()
            header = f.read(12)
            if not header:
                return
            here = f"{where}, record {k} (byte {at})"
            if len(header) < 12:
                raise LoaderError(f"{here}: the file ends inside the record's header (cut short?)")
            if masked_crc(header[:8]) != header[8:]:
                raise LoaderError(f"{here}: the CRC of the record's length does not match")
            (length,) = struct.unpack("<Q", header[:8])
            if length > size - at - 16:
                raise LoaderError(
                    f"{here}: the record's {length} bytes run past the end of the file (cut short?)"
                )
            data, crc = f.read(length), f.read(4)
            problem = None
            if masked_crc(data) != crc:
                problem = f"record {k} (byte {at}): the CRC of the record's data does not match"
            yield data, problem
            k += 1
