"""Rebuild persuasion.txt and northanger.txt from the Debian package that holds the novels.

    apt-get download r-cran-janeaustenr && dpkg -x r-cran-janeaustenr_1.0.0-1_all.deb deb
    python data/kernels/extract.py deb/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb

Rdata.rdb is R's lazy-load database: zlib-compressed objects, each a 4-byte length and a stream,
serialised in R's XDR format; each novel is a data frame whose text column is a vector of
CHARSXP strings (flags, length, bytes), one line of the book each. The objects come in the
package's order: Emma, Mansfield Park, Northanger Abbey, Persuasion, Pride and Prejudice, Sense
and Sensibility.
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUTS = {  # output: (object index, first line kept, the line the text ends with or before)
    "persuasion.txt": (3, "Chapter 1", 'something of their personableness when they cease to be '
                       'quite young."', "with"),
    "northanger.txt": (2, "CHAPTER 1", "CHAPTER 4", "before"),
}


def objects(data: bytes) -> list[bytes]:
    found, at = [], 0
    while at < len(data):
        stream = zlib.decompressobj()
        found.append(stream.decompress(data[at + 4:]))
        at = len(data) - len(stream.unused_data)
    return found


def lines(obj: bytes) -> list[str]:
    """Every CHARSXP of an XDR-serialised object, in order (after the 2-byte "X\\n" header the
    items are 4-byte aligned until a string's bytes)."""
    out, at = [], 2
    while at + 8 <= len(obj):
        flags, length = struct.unpack(">Ii", obj[at:at + 8])
        if flags & 0xFF == 9 and 0 <= length < 1 << 20 and at + 8 + length <= len(obj):
            out.append(obj[at + 8:at + 8 + length].decode("utf-8"))
            at += 8 + length
        else:
            at += 4
    return out


def main() -> int:
    books = objects(Path(sys.argv[1]).read_bytes())
    for name, (index, first, last, how) in CUTS.items():
        text = lines(books[index])
        start = text.index(first)
        end = text.index(last, start) + (1 if how == "with" else 0)
        (HERE / name).write_text("\n".join(text[start:end]) + "\n")
        print(f"{name}: lines {start + 1}-{end} of {len(text)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
